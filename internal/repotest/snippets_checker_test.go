package repotest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSnippetRules holds the checker to its rules on a page and a file of
// its own: a block matches its file token for token, comments, spacing and
// indentation aside, with "..." lines for what it leaves out, in order; a
// block with other code, code out of order, a wrong #NAME, or a page that
// does not name the file, fails; and the markers and fences are read
// where a list indents them.
func TestSnippetRules(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	const src = `package p

func f() error {
	x := 1 // one
	y := x + 1
	if y > 1 {
		return nil
	}
	return g(x, y)
}

func h() { z := 3; _ = z }
`
	if err := os.WriteFile(filepath.Join(root, "f_test.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	s := &sources{root: root}
	for _, tc := range []struct {
		name, marker, code string
		prose              string // default: names f_test.go
		want               string // a part of the error; empty when it passes
	}{
		{name: "verbatim", marker: "f_test.go#f", code: "x := 1\ny := x + 1"},
		{name: "spacing, comments and indentation aside", marker: "f_test.go#f", code: "    x:=1 // a comment of the page's\n\t\t\ty := x+1"},
		{name: "a gap", marker: "f_test.go#f", code: "x := 1\n...\nreturn g(x, y)"},
		{name: "a comment gap", marker: "f_test.go", code: "y := x + 1\n// ... and the rest\nz := 3"},
		{name: "the whole file", marker: "f_test.go", code: "z := 3"},
		{name: "another declaration's code", marker: "f_test.go#f", code: "z := 3", want: "not in f_test.go#f"},
		{name: "other code", marker: "f_test.go#f", code: "x := 2", want: "the block has `2` where the file has `1`"},
		{name: "out of order", marker: "f_test.go#f", code: "y := x + 1\n...\nx := 1", want: "not in"},
		{name: "no such declaration", marker: "f_test.go#nope", code: "x := 1", want: "no top-level declaration nope"},
		{name: "no such file", marker: "g_test.go", code: "x := 1", want: "g_test.go"},
		{name: "the page does not say", marker: "f_test.go", code: "x := 1", prose: "elsewhere", want: "which the page does not name"},
	} {
		prose := tc.prose
		if prose == "" {
			prose = "cut from f_test.go"
		}
		err := s.check(block{line: 1, code: tc.code, marker: tc.marker}, prose)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: error %v, want one saying %q", tc.name, err, tc.want)
		}
	}

	page := "# P\n\n<!-- snippet: f_test.go#f -->\n```go\nx := 1\n```\n\n- a list\n\n  <!-- snippet: f_test.go#h -->\n  ```go\n  z := 3\n  ```\n\n```go\nunmarked()\n```\n\n```sh\nnot go\n```\n"
	blocks := goBlocks(page)
	if len(blocks) != 3 {
		t.Fatalf("%d go blocks, want 3: %+v", len(blocks), blocks)
	}
	for i, want := range []block{{line: 4, code: "x := 1", marker: "f_test.go#f"}, {line: 11, code: "z := 3", marker: "f_test.go#h"}, {line: 15, code: "unmarked()"}} {
		if blocks[i] != want {
			t.Errorf("block %d: %+v, want %+v", i, blocks[i], want)
		}
	}
	if got := s.suggest(blocks[1]); !strings.Contains(got, "<!-- snippet: f_test.go#h -->") {
		t.Errorf("suggestion %q", got)
	}
	for code, whole := range map[string]bool{"package x\n\nimport _ \"fmt\"": true, "// Package x.\npackage x\n": true, "x := 1\n": false, "packages := 1\n": false} {
		if wholeFile.MatchString(code) != whole {
			t.Errorf("%q: whole file %t, want %t", code, !whole, whole)
		}
	}
	if p := prose(page); strings.Contains(p, "snippet:") {
		t.Errorf("prose keeps the markers: %q", p)
	}
}
