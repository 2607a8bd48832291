package repotest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"testing"
)

// errorKey is the one key every log line of the module puts its error
// under, as slog's own handlers and most services do.
const errorKey = "error"

// TestLogLinesNameTheirErrorError reads every non-test Go file of the
// repository and fails on a log call (a slog.Logger's Debug, Info, Warn,
// Error, Log, LogAttrs, their Context forms and With, or slog.Any,
// slog.String and the other Attr makers) that puts a value under the key
// "err" (or another spelling of "error"), naming the file and line. Test
// files are left out: testing.T's Error takes any arguments.
func TestLogLinesNameTheirErrorError(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	fset := token.NewFileSet()
	checked := 0
	for _, rel := range goFiles(t, root, false) {
		f, err := parser.ParseFile(fset, filepath.Join(root, rel), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			for _, k := range logKeys(call) {
				checked++
				if wrongErrorKey[k.value] {
					t.Errorf("%s: the log key %q: name an error %q", fset.Position(k.pos), k.value, errorKey)
				}
			}
			return true
		})
	}
	if checked < 50 {
		t.Fatalf("only %d log keys found in the repository: the scan is broken", checked)
	}
}

// wrongErrorKey are the keys that mean an error but are not errorKey.
var wrongErrorKey = map[string]bool{"err": true, "Err": true, "Error": true, "ERROR": true, "e": true}

// TestLogKeysFindsWhatItMust: the scan reads the key of each form of log
// call, and only keys.
func TestLogKeysFindsWhatItMust(t *testing.T) {
	t.Parallel()
	src := `package p
func f() {
	log.Warn("msg", "queue", q, "err", err)
	log.ErrorContext(ctx, "msg", slog.Int("n", 1), "err", err)
	log.Log(ctx, slog.LevelWarn, "msg", "err", err)
	log.LogAttrs(ctx, slog.LevelWarn, "msg", slog.Any("err", err))
	log.With("err", err).Info("msg")
	slog.String("err", "x")
	log.Info("err", "kind", "err")
	fmt.Println("err", "err")
}`
	f, err := parser.ParseFile(token.NewFileSet(), "p.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	ast.Inspect(f, func(n ast.Node) bool {
		if call, ok := n.(*ast.CallExpr); ok {
			for _, k := range logKeys(call) {
				got = append(got, k.value)
			}
		}
		return true
	})
	want := []string{"queue", "err", "err", "err", "n", "err", "err", "err", "kind"}
	// Calls nest: LogAttrs' slog.Any is met after LogAttrs itself, and the
	// With inside .Info after it, so compare as multisets.
	if !sameMultiset(got, want) {
		t.Fatalf("keys %q, want %q", got, want)
	}
}

func sameMultiset(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	n := map[string]int{}
	for _, s := range a {
		n[s]++
	}
	for _, s := range b {
		n[s]--
	}
	for _, c := range n {
		if c != 0 {
			return false
		}
	}
	return true
}

type logKey struct {
	value string
	pos   token.Pos
}

// logKeys returns the literal keys of a log call: the keys of its
// key-value arguments (a string literal is a key and the argument after
// it its value; anything else is taken for a slog.Attr), or the key an
// Attr maker is given. Other calls have none.
func logKeys(call *ast.CallExpr) []logKey {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return nil
	}
	if pkg, ok := sel.X.(*ast.Ident); ok && pkg.Name == "slog" && attrMakers[sel.Sel.Name] {
		if k, ok := stringLit(call.Args, 0); ok {
			return []logKey{k}
		}
		return nil
	}
	first, ok := logMethods[sel.Sel.Name]
	if !ok || len(call.Args) < first {
		return nil
	}
	var keys []logKey
	for i := first; i < len(call.Args); i++ {
		if k, ok := stringLit(call.Args, i); ok {
			keys = append(keys, k)
			i++ // its value
		}
	}
	return keys
}

// logMethods are slog.Logger's (and slog's) methods with key-value
// arguments, with the index of the first of them.
var logMethods = map[string]int{
	"Debug": 1, "Info": 1, "Warn": 1, "Error": 1,
	"DebugContext": 2, "InfoContext": 2, "WarnContext": 2, "ErrorContext": 2,
	"Log": 3, "LogAttrs": 3, "With": 0,
}

// attrMakers are slog's functions that make an Attr from a key.
var attrMakers = map[string]bool{
	"Any": true, "String": true, "Int": true, "Int64": true, "Uint64": true, "Float64": true,
	"Bool": true, "Time": true, "Duration": true, "Group": true,
}

func stringLit(args []ast.Expr, i int) (logKey, bool) {
	if i >= len(args) {
		return logKey{}, false
	}
	lit, ok := args[i].(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return logKey{}, false
	}
	s, err := strconv.Unquote(lit.Value)
	if err != nil {
		return logKey{}, false
	}
	return logKey{value: s, pos: lit.Pos()}, true
}
