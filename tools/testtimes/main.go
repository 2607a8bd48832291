// Command testtimes reads `go test -json` and says where the time went.
//
// With -tee FILE it is a filter: it reads the JSON stream on standard
// input, writes it unchanged to FILE, and prints what a plain `go test`
// would (each package's ok or FAIL line, build errors, and the output of
// the tests that failed), so the run stays readable. It exits 1 when a test,
// a package or a build failed, so a pipe from go test keeps its verdict:
//
//	go test -race -short -json ./... | go run ./tools/testtimes -tee .bin/test-unit.json
//
// With a file argument instead, it lists the slowest tests of that run and
// every package's time (make test-times):
//
//	go run ./tools/testtimes -top 20 .bin/test-unit.json
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// event is one line of go test -json (cmd/test2json's TestEvent).
type event struct {
	Action     string
	Package    string
	ImportPath string // build-output and build-fail
	Test       string
	Elapsed    float64
	Output     string
}

func main() {
	tee := flag.String("tee", "", "filter mode: copy the JSON read on stdin to `FILE` and print it as plain go test output")
	top := flag.Int("top", 20, "how many of the slowest tests to list")
	flag.Parse()
	var err error
	switch {
	case *tee != "" && flag.NArg() == 0:
		err = filter(os.Stdin, os.Stdout, *tee)
	case *tee == "" && flag.NArg() == 1:
		err = report(os.Stdout, flag.Arg(0), *top)
	default:
		err = errors.New("usage: testtimes -tee FILE < go-test.json, or testtimes [-top N] FILE")
	}
	if errors.Is(err, errFailed) {
		os.Exit(1)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "testtimes:", err)
		os.Exit(2)
	}
}

// errFailed says the run read had a failure; filter has printed it.
var errFailed = errors.New("tests failed")

// filter copies in to the file named path and prints it as go test's
// plain output to out.
func filter(in io.Reader, out io.Writer, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	held := map[[2]string][]string{} // a running test's output, printed if it fails
	failed := false
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		_, _ = w.Write(line)
		_ = w.WriteByte('\n')
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			fmt.Fprintf(out, "%s\n", line) // not an event: pass it on
			continue
		}
		key := [2]string{e.Package, e.Test}
		switch e.Action {
		case "build-output":
			fmt.Fprint(out, e.Output)
		case "build-fail":
			failed = true
		case "output":
			// The === RUN, PAUSE and CONT lines -json adds are dropped, as
			// plain go test prints none.
			if strings.HasPrefix(e.Output, "=== ") {
				continue
			}
			if e.Test != "" {
				held[key] = append(held[key], e.Output)
				continue
			}
			// The package's own lines: its verdict, and what TestMain or
			// a leak check printed.
			if e.Output != "PASS\n" {
				fmt.Fprint(out, e.Output)
			}
		case "fail":
			failed = true
			if e.Test != "" {
				for _, o := range held[key] {
					fmt.Fprint(out, o)
				}
			}
			delete(held, key)
		case "pass", "skip":
			delete(held, key)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if err := errors.Join(w.Flush(), f.Close()); err != nil {
		return err
	}
	if failed {
		return errFailed
	}
	return nil
}

// timing is how long one test or package took.
type timing struct {
	name    string
	action  string
	elapsed float64
}

// report lists the top slowest tests of the run in the file named path,
// then every package by time.
func report(out io.Writer, path string, top int) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("%w (make test-unit writes it)", err)
	}
	defer func() { _ = f.Close() }()
	var tests, pkgs []timing
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			continue
		}
		if e.Action != "pass" && e.Action != "fail" && e.Action != "skip" {
			continue
		}
		if e.Test == "" {
			pkgs = append(pkgs, timing{e.Package, e.Action, e.Elapsed})
		} else {
			tests = append(tests, timing{e.Package + " " + e.Test, e.Action, e.Elapsed})
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	byTime := func(ts []timing) {
		sort.SliceStable(ts, func(i, j int) bool { return ts[i].elapsed > ts[j].elapsed })
	}
	byTime(tests)
	byTime(pkgs)
	n := min(top, len(tests))
	fmt.Fprintf(out, "%d slowest of %d tests (seconds):\n", n, len(tests))
	for _, t := range tests[:n] {
		fmt.Fprintf(out, "%8.1f  %s%s\n", t.elapsed, t.name, mark(t.action))
	}
	fmt.Fprintf(out, "\n%d packages (seconds):\n", len(pkgs))
	for _, p := range pkgs {
		fmt.Fprintf(out, "%8.1f  %s%s\n", p.elapsed, p.name, mark(p.action))
	}
	return nil
}

// mark notes a test or package that did not pass.
func mark(action string) string {
	if action == "pass" {
		return ""
	}
	return " (" + action + ")"
}
