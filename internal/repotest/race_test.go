//go:build race

package repotest

// raceBuild says the test binary was built with -race, so that the export
// data typeCheck asks go list for is built the same way, from the same
// cache entries.
const raceBuild = true
