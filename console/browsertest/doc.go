// Package browsertest drives the acemq console in a headless Chromium, as
// an operator uses it. It is a module of its own so that the root module's
// users do not get chromedp in their module graph; it has tests only.
//
// The test skips when no chromium binary is found, unless
// ACEMQ_REQUIRE_BROWSER=1. With ACEMQ_CONSOLE_SCREENSHOTS=1 it writes the
// screenshots docs/console.md shows into docs/images.
package browsertest
