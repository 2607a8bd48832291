package repotest

import (
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/scanner"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
)

// TestDocSnippetsAreTestedCode holds every ```go block of docs/*.md and
// README.md to one of two rules (docs/testing.md, "Snippets in the docs"):
//
//   - Cut from a file that compiles. The block is preceded by a marker,
//     <!-- snippet: PATH --> or <!-- snippet: PATH#NAME -->, PATH a .go
//     file of the repository (an Example or a test that runs, or the
//     library's own declaration), NAME a top-level function, method
//     (Type.Method) or declared name in it. The block's code, token by
//     token (comments, spacing and indentation aside), is in that file, or
//     in NAME's declaration; a line "..." (or a comment beginning "// ...")
//     in the block stands for any code left out there. The page names PATH in its text, so a
//     reader knows where the running version is.
//   - A whole file. A block that begins with a package clause is parsed and
//     type-checked against the repository's packages as they are.
//
// A block that is neither fails, with its page and line, and with the
// marker to give it when its code is found verbatim in some file.
func TestDocSnippetsAreTestedCode(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, filepath.Join(root, "README.md"))
	src := &sources{root: root}
	blocks, pendingSeen := 0, map[string]bool{}
	for _, abs := range pages {
		page, err := filepath.Rel(root, abs)
		if err != nil {
			t.Fatal(err)
		}
		page = filepath.ToSlash(page)
		text, err := os.ReadFile(abs)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range goBlocks(string(text)) {
			blocks++
			where := fmt.Sprintf("%s:%d", page, b.line)
			if why, ok := pendingBlock(page, b); ok {
				pendingSeen[why] = true
				if b.marker != "" {
					t.Errorf("%s: the block is marked now: take %q off the pending list in snippets_test.go", where, why)
				}
				continue
			}
			switch {
			case b.marker != "":
				if err := src.check(b, prose(string(text))); err != nil {
					t.Errorf("%s: %v", where, err)
				}
			case wholeFile.MatchString(b.code):
				for _, err := range checkWholeFile(t, root, page, b) {
					t.Error(err)
				}
			default:
				t.Errorf("%s: a ```go block neither cut from a file nor a whole file (docs/testing.md, \"Snippets in the docs\"): %s",
					where, src.suggest(b))
			}
		}
	}
	for key, why := range pending {
		if !pendingSeen[why] {
			t.Errorf("the pending block %q (%s) is gone: take it off the list in snippets_test.go", key, why)
		}
	}
	if blocks < 50 {
		t.Fatalf("only %d ```go blocks in docs/*.md and README.md: the reader is broken", blocks)
	}
}

// pending are blocks whose owners bring them under the rules in work of
// their own, named "page" (every block of the page) or "page:first line".
// Each is let through as long as it is unmarked; marked, or gone, it fails
// the test until its entry is taken off.
var pending = map[string]string{}

func pendingBlock(page string, b block) (string, bool) {
	first, _, _ := strings.Cut(strings.TrimSpace(b.code), "\n")
	if why, ok := pending[page+":"+strings.TrimSpace(first)]; ok {
		return why, true
	}
	why, ok := pending[page]
	return why, ok
}

// wholeFile matches a block that is a Go file: a package clause first,
// after any comments.
var wholeFile = regexp.MustCompile(`^(?:\s*//[^\n]*\n)*\s*package\s+\w+\s*\n`)

// block is a ```go block of a page.
type block struct {
	line   int    // of its opening fence, from 1
	code   string // between the fences, dedented by the fence's indent
	marker string // PATH or PATH#NAME of the snippet marker before it
}

var (
	fence     = regexp.MustCompile("^( *)(```+|~~~+)\\s*(\\S*)")
	markerRe  = regexp.MustCompile(`^\s*<!--\s*snippet:\s*(\S+)\s*-->\s*$`)
	markerAny = regexp.MustCompile(`<!--\s*snippet:[^>]*-->`)
)

// goBlocks returns the page's ```go blocks, each with the marker on the
// nearest non-blank line before it, if that line is one.
func goBlocks(page string) []block {
	lines := strings.Split(page, "\n")
	var out []block
	for i := 0; i < len(lines); i++ {
		m := fence.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		indent, delim, lang := len(m[1]), m[2], m[3]
		start := i
		var body []string
		for i++; i < len(lines); i++ {
			if strings.HasPrefix(strings.TrimLeft(lines[i], " "), delim) && strings.TrimSpace(strings.TrimLeft(lines[i], " "))[len(delim):] == "" {
				break
			}
			l := lines[i]
			for k := 0; k < indent && strings.HasPrefix(l, " "); k++ {
				l = l[1:]
			}
			body = append(body, l)
		}
		if lang != "go" {
			continue
		}
		b := block{line: start + 1, code: strings.Join(body, "\n")}
		for j := start - 1; j >= 0; j-- {
			if strings.TrimSpace(lines[j]) == "" {
				continue
			}
			if mm := markerRe.FindStringSubmatch(lines[j]); mm != nil {
				b.marker = mm[1]
			}
			break
		}
		out = append(out, b)
	}
	return out
}

// prose is a page without its snippet markers, where it must name each
// marker's file.
func prose(page string) string { return markerAny.ReplaceAllString(page, "") }

// checkWholeFile type-checks a block that is a whole file, reporting each
// error at its line of the page.
func checkWholeFile(t *testing.T, root, page string, b block) []error {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "snippet.go", b.code, parser.SkipObjectResolution)
	if err != nil {
		return []error{atPage(page, b, err)}
	}
	var errs []error
	for _, err := range typeCheck(t, root, fset, []*ast.File{f}) {
		errs = append(errs, atPage(page, b, err))
	}
	return errs
}

// atPage rewrites an error of the parser or the type checker, whose
// positions are in the block, to name the page's line.
func atPage(page string, b block, err error) error {
	line, msg := 0, err.Error()
	var list scanner.ErrorList
	var te types.Error
	switch {
	case errors.As(err, &list) && len(list) > 0:
		line, msg = list[0].Pos.Line, list[0].Msg
	case errors.As(err, &te):
		line, msg = te.Fset.Position(te.Pos).Line, te.Msg
	}
	return fmt.Errorf("%s:%d: %s", page, b.line+line, msg)
}

// tok is a Go token, a literal's text with it.
type tok struct {
	t   token.Token
	lit string
}

// codeTokens returns src's tokens, comments left out and every semicolon,
// written or inserted at a line's end, alike; and, for each, its offset in
// src.
func codeTokens(src []byte) ([]tok, []int) {
	var s scanner.Scanner
	fset := token.NewFileSet()
	file := fset.AddFile("", fset.Base(), len(src))
	s.Init(file, src, func(token.Position, string) {}, 0)
	var toks []tok
	var offs []int
	for {
		pos, t, lit := s.Scan()
		if t == token.EOF {
			return toks, offs
		}
		switch {
		case t == token.SEMICOLON:
			lit = ""
		case t.IsOperator() || t.IsKeyword():
			lit = ""
		}
		toks = append(toks, tok{t, lit})
		offs = append(offs, file.Offset(pos))
	}
}

// segments splits a block's code at its "..." lines (and its comment
// lines beginning "// ...") into the runs of
// tokens that must each appear, in order, in the source; a run's trailing
// semicolon is dropped, since where the block ends a line the source may
// go on.
func segments(code string) [][]tok {
	var segs [][]tok
	var cur []string
	flush := func() {
		toks, _ := codeTokens([]byte(strings.Join(cur, "\n")))
		for len(toks) > 0 && toks[len(toks)-1].t == token.SEMICOLON {
			toks = toks[:len(toks)-1]
		}
		if len(toks) > 0 {
			segs = append(segs, toks)
		}
		cur = nil
	}
	for _, l := range strings.Split(code, "\n") {
		if l := strings.TrimSpace(l); l == "..." || strings.HasPrefix(l, "// ...") {
			flush()
			continue
		}
		cur = append(cur, l)
	}
	flush()
	return segs
}

// findIn reports where segs appear in toks, in order, each run whole: the
// token index of the first, or -1.
func findIn(toks []tok, segs [][]tok) int {
	first, from := -1, 0
	for _, seg := range segs {
		i := indexRun(toks[from:], seg)
		if i < 0 {
			return -1
		}
		if first < 0 {
			first = from + i
		}
		from += i + len(seg)
	}
	return first
}

func indexRun(toks, run []tok) int {
	for i := 0; i+len(run) <= len(toks); i++ {
		if slices.Equal(toks[i:i+len(run)], run) {
			return i
		}
	}
	return -1
}

// sources reads the repository's Go files, each once.
type sources struct {
	root  string
	mu    sync.Mutex
	files map[string]*goFile
	all   []string
}

type goFile struct {
	src   []byte
	toks  []tok
	offs  []int
	fset  *token.FileSet
	ast   *ast.File // nil when it does not parse
	tfile *token.File
}

func (s *sources) get(rel string) (*goFile, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f, ok := s.files[rel]; ok {
		return f, nil
	}
	src, err := os.ReadFile(filepath.Join(s.root, filepath.FromSlash(rel)))
	if err != nil {
		return nil, err
	}
	f := &goFile{src: src, fset: token.NewFileSet()}
	f.toks, f.offs = codeTokens(src)
	f.ast, _ = parser.ParseFile(f.fset, rel, src, parser.SkipObjectResolution|parser.ParseComments)
	if f.ast != nil {
		f.tfile = f.fset.File(f.ast.Pos())
	}
	if s.files == nil {
		s.files = map[string]*goFile{}
	}
	s.files[rel] = f
	return f, nil
}

// check holds a marked block to its marker: the file exists, the page
// names it, and the block's code is in it (in NAME's declaration).
func (s *sources) check(b block, prose string) error {
	path, name, _ := strings.Cut(b.marker, "#")
	if !strings.HasSuffix(path, ".go") {
		return fmt.Errorf("the snippet marker names %q, not a .go file", path)
	}
	f, err := s.get(path)
	if err != nil {
		return fmt.Errorf("the snippet marker names %s: %v", path, err)
	}
	if !strings.Contains(prose, path) {
		return fmt.Errorf("the block is cut from %s, which the page does not name: say so in its text (\"… in %s\")", path, path)
	}
	toks := f.toks
	if name != "" {
		lo, hi, ok := f.decl(name)
		if !ok {
			return fmt.Errorf("%s has no top-level declaration %s (the snippet marker's #%s)", path, name, name)
		}
		i, j := tokenAt(f.offs, lo), tokenAt(f.offs, hi)
		toks = f.toks[i:j]
	}
	segs := segments(b.code)
	if len(segs) == 0 {
		return fmt.Errorf("the block has no code")
	}
	if findIn(toks, segs) < 0 {
		return fmt.Errorf("the block's code is not in %s: %s", b.marker, firstDifference(toks, segs))
	}
	return nil
}

// tokenAt is the index of the first token at or after offset off.
func tokenAt(offs []int, off int) int {
	i, _ := slices.BinarySearch(offs, off)
	return i
}

// decl finds a top-level declaration by name (Type.Method for a method)
// and returns its offsets in the file.
func (f *goFile) decl(name string) (int, int, bool) {
	if f.ast == nil {
		return 0, 0, false
	}
	for _, d := range f.ast.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			n := d.Name.Name
			if d.Recv != nil && len(d.Recv.List) > 0 {
				n = recvName(d.Recv.List[0].Type) + "." + n
			}
			if n == name {
				return f.tfile.Offset(d.Pos()), f.tfile.Offset(d.End()), true
			}
		case *ast.GenDecl:
			for _, sp := range d.Specs {
				var names []*ast.Ident
				switch sp := sp.(type) {
				case *ast.TypeSpec:
					names = []*ast.Ident{sp.Name}
				case *ast.ValueSpec:
					names = sp.Names
				}
				for _, id := range names {
					if id.Name == name {
						return f.tfile.Offset(d.Pos()), f.tfile.Offset(d.End()), true
					}
				}
			}
		}
	}
	return 0, 0, false
}

func recvName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return recvName(e.X)
	case *ast.IndexExpr:
		return recvName(e.X)
	case *ast.IndexListExpr:
		return recvName(e.X)
	case *ast.Ident:
		return e.Name
	}
	return ""
}

// enclosing names the top-level declaration at offset off, for a marker.
func (f *goFile) enclosing(off int) string {
	if f.ast == nil {
		return ""
	}
	for _, d := range f.ast.Decls {
		if off < f.tfile.Offset(d.Pos()) || off >= f.tfile.Offset(d.End()) {
			continue
		}
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv != nil && len(d.Recv.List) > 0 {
				return recvName(d.Recv.List[0].Type) + "." + d.Name.Name
			}
			return d.Name.Name
		case *ast.GenDecl:
			for _, sp := range d.Specs {
				switch sp := sp.(type) {
				case *ast.TypeSpec:
					return sp.Name.Name
				case *ast.ValueSpec:
					return sp.Names[0].Name
				}
			}
		}
	}
	return ""
}

// firstDifference says where the block parts from the file: for the
// first of its runs that is not there (in order), how much of it matches
// at its best place, and what each has next.
func firstDifference(toks []tok, segs [][]tok) string {
	from := 0
	for _, seg := range segs {
		if i := indexRun(toks[from:], seg); i >= 0 {
			from += i + len(seg)
			continue
		}
		best, at := 0, -1
		for i := from; i < len(toks); i++ {
			n := 0
			for n < len(seg) && i+n < len(toks) && toks[i+n] == seg[n] {
				n++
			}
			if n > best {
				best, at = n, i
			}
		}
		if at < 0 {
			return fmt.Sprintf("nothing like %s is there", show(seg[:min(3, len(seg))]))
		}
		return fmt.Sprintf("it matches up to %s, then the block has %s where the file has %s",
			show(seg[:best]), show(seg[best:best+1]), show(toks[at+best:min(at+best+1, len(toks))]))
	}
	return "its runs of code are there, but not in the block's order"
}

func show(ts []tok) string {
	var b bytes.Buffer
	start := max(0, len(ts)-6)
	if start > 0 {
		b.WriteString("… ")
	}
	for i, t := range ts[start:] {
		if i > 0 {
			b.WriteByte(' ')
		}
		switch {
		case t.t == token.SEMICOLON:
			b.WriteString("⏎")
		case t.lit != "":
			b.WriteString(t.lit)
		default:
			b.WriteString(t.t.String())
		}
	}
	if b.Len() == 0 {
		return "nothing"
	}
	return "`" + b.String() + "`"
}

// suggest looks for an unmarked block's code in the repository's Go files
// and names the marker to give it.
func (s *sources) suggest(b block) string {
	segs := segments(b.code)
	if len(segs) == 0 {
		return "the block has no code"
	}
	s.mu.Lock()
	if s.all == nil {
		s.all = goFilesUnder(s.root)
	}
	all := s.all
	s.mu.Unlock()
	var found []string
	for _, rel := range all {
		f, err := s.get(rel)
		if err != nil {
			continue
		}
		if i := findIn(f.toks, segs); i >= 0 {
			m := rel
			if n := f.enclosing(f.offs[i]); n != "" {
				m += "#" + n
			}
			found = append(found, "<!-- snippet: "+m+" -->")
		}
	}
	if len(found) == 0 {
		return "its code is in no Go file of the repository: cut it from an Example or a test, or make it a whole file"
	}
	return "its code is in " + strings.Join(found[:min(3, len(found))], " or ")
}
