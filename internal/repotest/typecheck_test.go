package repotest

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/importer"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// typeCheck type-checks files, one package, against the repository's
// packages and the standard library as they are compiled (their export
// data, from go list -export run in root), and returns what the type
// checker reports, every error of it. A blank import is only looked up, not
// built: its package has to exist, its types are not needed.
func typeCheck(t *testing.T, root string, fset *token.FileSet, files []*ast.File) []error {
	t.Helper()
	var build, blank []string
	for _, f := range files {
		for _, imp := range f.Imports {
			path, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				t.Fatal(err)
			}
			if imp.Name != nil && imp.Name.Name == "_" {
				blank = append(blank, path)
			} else {
				build = append(build, path)
			}
		}
	}
	exports := exportData(t, root, build)
	names := packageNames(t, root, blank)
	gc := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		file, ok := exports.get(path)
		if !ok {
			return nil, fmt.Errorf("repotest: no export data for %q", path)
		}
		return os.Open(file)
	})
	imp := importerFunc(func(path string) (*types.Package, error) {
		if _, ok := exports.get(path); !ok {
			if name, ok := names[path]; ok {
				p := types.NewPackage(path, name)
				p.MarkComplete()
				return p, nil
			}
		}
		return gc.Import(path)
	})
	var errs []error
	conf := types.Config{Importer: imp, Error: func(err error) { errs = append(errs, err) }}
	_, _ = conf.Check("snippet", fset, files, nil)
	return errs
}

type importerFunc func(path string) (*types.Package, error)

func (f importerFunc) Import(path string) (*types.Package, error) { return f(path) }

// exportFiles maps import paths to their export data, for the whole test
// process: go list compiles what is not in the build cache, once.
type exportFiles struct {
	mu    sync.Mutex
	files map[string]string
}

func (e *exportFiles) get(path string) (string, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	f, ok := e.files[path]
	return f, ok
}

var exports = &exportFiles{files: map[string]string{}}

// exportData makes sure paths and everything they import have export data,
// asking go list for those it has not yet; a path that does not build has
// none, and the type checker reports it where it is imported.
func exportData(t *testing.T, root string, paths []string) *exportFiles {
	t.Helper()
	exports.mu.Lock()
	defer exports.mu.Unlock()
	var missing []string
	for _, p := range paths {
		if _, ok := exports.files[p]; !ok && !slices.Contains(missing, p) {
			missing = append(missing, p)
		}
	}
	if len(missing) == 0 {
		return exports
	}
	args := []string{"list", "-e", "-export", "-deps", "-f", "{{.ImportPath}}\t{{.Export}}"}
	if raceBuild {
		args = append(args, "-race")
	}
	out := goCommand(t, root, append(args, missing...)...)
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		path, file, ok := strings.Cut(sc.Text(), "\t")
		if ok && file != "" {
			exports.files[path] = file
		}
	}
	return exports
}

// packageNames looks paths up without building them: each one's package
// name, for those that exist (the type checker reports the others where
// they are imported).
func packageNames(t *testing.T, root string, paths []string) map[string]string {
	t.Helper()
	names := map[string]string{}
	if len(paths) == 0 {
		return names
	}
	out := goCommand(t, root, append([]string{"list", "-e", "-find", "-f", "{{.ImportPath}}\t{{.Name}}"}, paths...)...)
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if path, name, ok := strings.Cut(sc.Text(), "\t"); ok && name != "" {
			names[path] = name
		}
	}
	return names
}

func goCommand(t *testing.T, dir string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}
