//go:build !race

package repotest

const raceBuild = false
