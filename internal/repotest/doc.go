// Package repotest holds checks of the repository itself, run by go test
// like any other test: every log line of the module names its error under
// the key "error" (logkeys_test.go), and every Go snippet of docs/*.md and
// README.md is code that CI compiles (snippets_test.go; docs/testing.md,
// "Snippets in the docs", says how to add one). It has no code of its own.
package repotest
