package repotest

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// repoRoot is the directory of the root module's go.mod, found upwards
// from the test's working directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(mod, []byte("module github.com/acemq/acemq\n")) {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("repotest: no go.mod of module github.com/acemq/acemq above the working directory")
		}
		dir = parent
	}
}

// goFiles returns the repository's .go files (every module of the
// workspace), as paths relative to root with forward slashes, leaving out
// testdata, vendor and hidden directories; tests says whether _test.go
// files are in.
func goFiles(t *testing.T, root string, tests bool) []string {
	t.Helper()
	var files []string
	for _, f := range goFilesUnder(root) {
		if tests || !strings.HasSuffix(f, "_test.go") {
			files = append(files, f)
		}
	}
	if len(files) == 0 {
		t.Fatalf("repotest: no Go files under %s", root)
	}
	return files
}

// goFilesUnder lists the .go files under root, tests included, as goFiles
// says.
func goFilesUnder(root string) []string {
	var files []string
	_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".go") {
			if rel, err := filepath.Rel(root, path); err == nil {
				files = append(files, filepath.ToSlash(rel))
			}
		}
		return nil
	})
	return files
}
