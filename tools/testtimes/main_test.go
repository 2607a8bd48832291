package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A go test -json stream: package p with a passing and a failing test,
// package q passing.
const stream = `{"Action":"run","Package":"p","Test":"TestOK"}
{"Action":"output","Package":"p","Test":"TestOK","Output":"=== RUN   TestOK\n"}
{"Action":"output","Package":"p","Test":"TestOK","Output":"    p_test.go:9: quiet on success\n"}
{"Action":"pass","Package":"p","Test":"TestOK","Elapsed":0.5}
{"Action":"run","Package":"p","Test":"TestBad"}
{"Action":"output","Package":"p","Test":"TestBad","Output":"=== RUN   TestBad\n"}
{"Action":"output","Package":"p","Test":"TestBad","Output":"    p_test.go:3: boom\n"}
{"Action":"output","Package":"p","Test":"TestBad","Output":"--- FAIL: TestBad (2.00s)\n"}
{"Action":"fail","Package":"p","Test":"TestBad","Elapsed":2}
{"Action":"output","Package":"p","Output":"FAIL\n"}
{"Action":"output","Package":"p","Output":"FAIL\tp\t2.60s\n"}
{"Action":"fail","Package":"p","Elapsed":2.6}
{"Action":"output","Package":"q","Test":"TestSlow","Output":"--- PASS: TestSlow (7.00s)\n"}
{"Action":"pass","Package":"q","Test":"TestSlow","Elapsed":7}
{"Action":"output","Package":"q","Output":"PASS\n"}
{"Action":"output","Package":"q","Output":"ok  \tq\t7.10s\n"}
{"Action":"pass","Package":"q","Elapsed":7.1}
`

func TestFilterPrintsPlainOutputAndKeepsTheVerdict(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		want    string
		failure bool
	}{
		{"a failing test", stream, "    p_test.go:3: boom\n--- FAIL: TestBad (2.00s)\nFAIL\nFAIL\tp\t2.60s\nok  \tq\t7.10s\n", true},
		{"all passing", `{"Action":"output","Package":"q","Output":"ok  \tq\t1.00s\n"}
{"Action":"pass","Package":"q","Elapsed":1}
`, "ok  \tq\t1.00s\n", false},
		{"a build failure", `{"ImportPath":"r","Action":"build-output","Output":"r/r.go:1:1: syntax error\n"}
{"ImportPath":"r","Action":"build-fail"}
not json
`, "r/r.go:1:1: syntax error\nnot json\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "run.json")
			var out bytes.Buffer
			err := filter(strings.NewReader(tc.in), &out, path)
			if got := errors.Is(err, errFailed); got != tc.failure {
				t.Errorf("filter = %v; want a failure: %v", err, tc.failure)
			}
			if out.String() != tc.want {
				t.Errorf("printed\n%q\nwant\n%q", out.String(), tc.want)
			}
			kept, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if string(kept) != tc.in {
				t.Errorf("the file holds\n%q\nwant the stream unchanged", kept)
			}
		})
	}
}

func TestReportListsTheSlowestFirst(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run.json")
	if err := os.WriteFile(path, []byte(stream), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := report(&out, path, 2); err != nil {
		t.Fatal(err)
	}
	want := `2 slowest of 3 tests (seconds):
     7.0  q TestSlow
     2.0  p TestBad (fail)

2 packages (seconds):
     7.1  q
     2.6  p (fail)
`
	if out.String() != want {
		t.Errorf("report printed\n%s\nwant\n%s", out.String(), want)
	}
}
