// Package fencerun is the fencing experiment of issue 29 item 2, for the
// fault tests on one broker (tools/faulttest) and the cluster
// tests (tools/clustertest).
//
// Instance A of an ordered consumer, a process of its own (the test binary
// started again: call MaybeChild first in its TestMain), holds some
// partitions of a queue and is handling their messages when it is frozen
// (SIGSTOP) or cut off (a proxy between it and the broker stops
// forwarding) for longer than the heartbeat timeout. Instance B, in the
// test's process, takes A's partitions and handles every message, A's
// unacked ones again included. Then A runs again. Each handler sleeps
// 5–20 ms (its work, deaf to its ctx, as most code is) and then writes
// "key n" to a PostgreSQL row per key, with its ctx: checked, only while
// the row's fence is not above the message's (… WHERE fence <= $f);
// unchecked, whatever the row holds. A stale final state is a key whose
// row does not end at its last message.
package fencerun

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/acemqtest/netproxy"
	"github.com/acemq/acemq/transport/rabbitmq"
)

// The experiment's size: Keys keys of PerKey numbered messages each, over
// Partitions partitions.
const (
	Keys       = 40
	PerKey     = 200
	Partitions = 4
)

// Fault is what happens to instance A.
type Fault string

// The faults.
const (
	Freeze    Fault = "freeze"    // SIGSTOP, then SIGCONT
	Partition Fault = "partition" // a proxy that stops forwarding, both ways
)

// Setup is one run's parameters.
type Setup struct {
	Fault     Fault
	For       time.Duration // how long the fault lasts (longer when B is not done yet)
	Heartbeat time.Duration // instance A's
	Checked   bool          // fence-checked writes
	AURL      string        // the node A dials (through the proxy for Partition)
	BURL      string        // B's URL or list of URLs
	Postgres  string
	Quorum    bool // quorum partition queues (a cluster)
}

// Result is one run's outcome.
type Result struct {
	Stale    int // keys whose row did not end at their last message
	InFlight int // A's handlers started and not ended when the fault came
	// Late counts the outcomes of A's handlers that ended after it ran
	// again: written, refused (the fence) and failed (the write returned
	// an error: the ctx was cancelled; the statement may have been made
	// before the cancel reached it, as the stale keys' rows show).
	Late map[string]int
	// StaleWrites are those of A's late writes made with a fence lower
	// than one B wrote the key with: a stale holder's writes. (A may take
	// a partition back after a rebalance, with a new fence, and write
	// again what B was still acking: not stale.)
	StaleWrites int
	// HandOver is when B held every partition, Done when B had written
	// every key's last message, both after the fault began.
	HandOver, Done time.Duration
}

// String is the run's one-line summary, as the experiment logs it.
func (r Result) String() string {
	return fmt.Sprintf("stale final states %d of %d keys; A had %d handlers in flight; after it ran again A's handlers: %d written (%d with a stale fence), %d refused, %d failed (ctx cancelled); B held every partition %.1fs after the fault and had written every key's last message %.1fs after it",
		r.Stale, Keys, r.InFlight, r.Late["written"], r.StaleWrites, r.Late["refused"], r.Late["failed"], r.HandOver.Seconds(), r.Done.Seconds())
}

const childVar = "ACEMQ_FENCERUN_CHILD" // set in the child, with its setup in the other ACEMQ_FENCERUN_ variables

func (s Setup) childEnv(queue, table, aURL string) []string {
	return []string{
		childVar + "=1",
		"ACEMQ_FENCERUN_URL=" + aURL, "ACEMQ_FENCERUN_QUEUE=" + queue,
		"ACEMQ_FENCERUN_PG=" + s.Postgres, "ACEMQ_FENCERUN_TABLE=" + table,
		"ACEMQ_FENCERUN_CHECKED=" + strconv.FormatBool(s.Checked),
		"ACEMQ_FENCERUN_QUORUM=" + strconv.FormatBool(s.Quorum),
		"ACEMQ_FENCERUN_HEARTBEAT=" + s.Heartbeat.String(),
	}
}

// MaybeChild runs instance A and exits when this process was started as
// one; it returns at once otherwise. Call it first in TestMain.
func MaybeChild() {
	if os.Getenv(childVar) == "1" {
		os.Exit(child())
	}
}

// step is the experiment's message: the N-th of Key.
type step struct {
	Key string `json:"key"`
	N   int    `json:"n"`
}

// writer is the handler both instances run.
type writer struct {
	db      *pgxpool.Pool
	table   string
	who     string
	checked bool
}

// note logs an outcome, at the database's time: at, the write's own,
// when given (the process may freeze between the write and its note).
func (w *writer) note(key string, n int, fence uint64, outcome string, at ...time.Time) {
	// On a ctx of its own: what happened is kept when the handler's ctx
	// was cancelled too.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	when := any(nil)
	if len(at) > 0 {
		when = at[0]
	}
	_, _ = w.db.Exec(ctx, fmt.Sprintf(`INSERT INTO %s_log (writer, key, n, fence, outcome, at) VALUES ($1, $2, $3, $4, $5, coalesce($6, clock_timestamp()))`, w.table),
		w.who, key, n, int64(fence), outcome, when)
}

func (w *writer) handle(ctx context.Context, m *acemq.Message[step]) acemq.Ack {
	s, fence := m.Payload, m.Fence()
	w.note(s.Key, s.N, fence, "started")
	time.Sleep(time.Duration(5+mrand.IntN(16)) * time.Millisecond)
	q := `INSERT INTO %[1]s (key, n, fence) VALUES ($1, $2, $3)
		ON CONFLICT (key) DO UPDATE SET n = EXCLUDED.n, fence = EXCLUDED.fence`
	if w.checked {
		q += ` WHERE %[1]s.fence <= EXCLUDED.fence`
	}
	var at time.Time
	err := w.db.QueryRow(ctx, fmt.Sprintf(q+` RETURNING clock_timestamp()`, w.table), s.Key, s.N, int64(fence)).Scan(&at)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		w.note(s.Key, s.N, fence, "refused")
		return acemq.Retry(fmt.Errorf("key %s: a later holder wrote it: %w", s.Key, acemq.ErrPartitionLost))
	case err != nil:
		w.note(s.Key, s.N, fence, "failed")
		return acemq.Retry(err)
	}
	w.note(s.Key, s.N, fence, "written", at)
	return acemq.Done()
}

func consumer(c *acemq.Conn, q string, w *writer) (*acemq.Consumer[step], error) {
	return acemq.NewConsumer(c, q, w.handle, acemq.Ordered(acemq.OrderPolicy{Partitions: Partitions}), acemq.Concurrency(8))
}

var retry = acemq.RetryPolicy{MaxAttempts: 5, Delays: []time.Duration{50 * time.Millisecond}}

func connOptions(logger *slog.Logger, quorum bool) []acemq.ConnOption {
	opts := []acemq.ConnOption{acemq.WithRetryPolicy(retry), acemq.WithLogger(logger)}
	if quorum {
		opts = append(opts, acemq.WithQuorumQueues())
	}
	return opts
}

// child is instance A: it runs the consumer until SIGTERM, and prints
// "held N" each time the number of partitions it holds changes.
func child() int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "fencerun instance A:", err)
		return 2
	}
	hb, err := time.ParseDuration(os.Getenv("ACEMQ_FENCERUN_HEARTBEAT"))
	if err != nil {
		return fail(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	tr, err := rabbitmq.Dial(ctx, os.Getenv("ACEMQ_FENCERUN_URL"), rabbitmq.Config{Heartbeat: hb, Logger: logger,
		MinBackoff: 100 * time.Millisecond, MaxBackoff: time.Second})
	if err != nil {
		return fail(err)
	}
	c, err := acemq.Connect(ctx, "amqp://", append(connOptions(logger, os.Getenv("ACEMQ_FENCERUN_QUORUM") == "true"), acemq.WithTransport(tr))...)
	if err != nil {
		_ = tr.Close()
		return fail(err)
	}
	defer c.Close()
	db, err := pgxpool.New(ctx, os.Getenv("ACEMQ_FENCERUN_PG"))
	if err != nil {
		return fail(err)
	}
	defer db.Close()
	w := &writer{db: db, table: os.Getenv("ACEMQ_FENCERUN_TABLE"), who: "A", checked: os.Getenv("ACEMQ_FENCERUN_CHECKED") == "true"}
	cons, err := consumer(c, os.Getenv("ACEMQ_FENCERUN_QUEUE"), w)
	if err != nil {
		return fail(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- cons.Run(ctx) }()
	held := -1
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-ran:
			if err != nil && ctx.Err() == nil {
				fmt.Fprintln(os.Stderr, "fencerun instance A: Run:", err)
				return 1
			}
			return 0
		case <-tick.C:
			if n := len(cons.Partitions()); n != held {
				held = n
				fmt.Printf("held %d\n", n)
			}
		}
	}
}

// instance is A as the test sees it.
type instance struct {
	cmd    *exec.Cmd
	held   atomic.Int64
	stderr string // the file A's stderr goes to
	exited chan error
}

// start starts this test binary again as instance A. It is stopped
// (SIGCONT first, then SIGTERM, SIGKILL after 20 s) when the test ends,
// and killed when this process dies; a
// child that exits with a failure (a data race is exit status 66) fails
// the test.
func start(t *testing.T, env []string) *instance {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	// A test binary killed (a timeout, say) takes A with it, frozen or not.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := os.CreateTemp(t.TempDir(), "instance-a-*.log")
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close() // A has its own descriptor once started
	a := &instance{cmd: cmd, stderr: stderr.Name(), exited: make(chan error, 1)}
	a.held.Store(-1)
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if n, ok := strings.CutPrefix(sc.Text(), "held "); ok {
				v, _ := strconv.Atoi(n)
				a.held.Store(int64(v))
			}
		}
		_, _ = io.Copy(io.Discard, out)
		a.exited <- cmd.Wait() // after every read from the pipe, as Wait wants
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Signal(syscall.SIGTERM)
		var err error
		select {
		case err = <-a.exited:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			err = <-a.exited
			t.Errorf("instance A did not stop within 20s of SIGTERM")
		}
		if err != nil {
			log, _ := os.ReadFile(a.stderr)
			t.Errorf("instance A: %v; its log:\n%s", err, log)
		}
	})
	return a
}

// Run runs the experiment once; what it declares, the tables and A are
// gone when the test ends. With checked writes it fails the test when a
// key ends stale or unwritten; with a freeze, when A had no handler in
// flight (the run tested nothing).
func Run(t *testing.T, s Setup) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), s.For+4*time.Minute)
	defer cancel()
	var suffix [6]byte
	_, _ = rand.Read(suffix[:])
	table := "fencerun_" + hex.EncodeToString(suffix[:])
	q := acemqtest.QueueName(t, "fence")
	db, err := pgxpool.New(ctx, s.Postgres)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	for _, stmt := range []string{
		fmt.Sprintf(`CREATE TABLE %s (key TEXT PRIMARY KEY, n INT NOT NULL, fence BIGINT NOT NULL)`, table),
		fmt.Sprintf(`CREATE TABLE %s_log (writer TEXT, key TEXT, n INT, fence BIGINT, outcome TEXT, at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp())`, table),
	} {
		if _, err := db.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := db.Exec(ctx, fmt.Sprintf(`DROP TABLE IF EXISTS %[1]s, %[1]s_log`, table)); err != nil {
			t.Errorf("dropping %s: %v", table, err)
		}
	})

	// B runs in this process. DeleteAfter is registered before either
	// instance starts, so it runs once both have stopped.
	c, err := acemq.Connect(ctx, s.BURL, connOptions(slog.New(slog.DiscardHandler), s.Quorum)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	b, err := consumer(c, q, &writer{db: db, table: table, who: "B", checked: s.Checked})
	if err != nil {
		t.Fatal(err)
	}
	acemqtest.DeleteAfter(t, s.BURL, b)

	aURL := s.AURL
	var proxy *netproxy.Proxy
	if s.Fault == Partition {
		u, err := url.Parse(s.AURL)
		if err != nil {
			t.Fatal(err)
		}
		if proxy, err = netproxy.New(u.Host); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = proxy.Close() })
		u.Host = proxy.Addr()
		aURL = u.String()
	}
	a := start(t, s.childEnv(q, table, aURL))
	waitUntil(t, ctx, "A to hold every partition", func() bool { return a.held.Load() == Partitions })

	bCtx, stopB := context.WithCancel(context.Background())
	bRan := make(chan error, 1)
	go func() { bRan <- b.Run(bCtx) }()
	t.Cleanup(func() {
		stopB()
		if err := <-bRan; err != nil {
			t.Errorf("B's Run: %v", err)
		}
	})
	waitUntil(t, ctx, "A and B to share the partitions", func() bool {
		n := len(b.Partitions())
		return n > 0 && n < Partitions && a.held.Load()+int64(n) == Partitions
	})

	// Published from several goroutines (each key from one, in order), so
	// that a backlog builds and A is busy when the fault comes.
	pub := acemq.NewPublisher[step](c, q, "", acemq.KeyBy(func(s step) string { return s.Key }))
	const publishers = 8
	published := make(chan error, publishers)
	for g := range publishers {
		go func() {
			for n := 1; n <= PerKey; n++ {
				for k := g; k < Keys; k += publishers {
					if err := pub.Send(ctx, step{Key: fmt.Sprintf("k%02d", k), N: n}); err != nil {
						published <- err
						return
					}
				}
			}
			published <- nil
		}()
	}
	defer func() {
		cancel() // a run that failed early leaves no Send waiting
		for range publishers {
			if err := <-published; err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("publishing: %v", err)
			}
		}
	}()
	count := func(query string, args ...any) int {
		var n int
		if err := db.QueryRow(ctx, strings.ReplaceAll(query, "%s", table), args...).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	waitUntil(t, ctx, "A to have written 200 messages", func() bool {
		return count(`SELECT count(*) FROM %s_log WHERE writer = 'A' AND outcome = 'written'`) >= 200
	})

	if s.Fault == Freeze {
		if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	} else {
		proxy.Pause()
	}
	faultAt := time.Now()
	var r Result
	waitUntil(t, ctx, "B to hold every partition", func() bool { return len(b.Partitions()) == Partitions })
	r.HandOver = time.Since(faultAt)
	waitUntil(t, ctx, "B to write every key's last message", func() bool {
		return count(`SELECT count(*) FROM %s WHERE n = $1`, PerKey) == Keys
	})
	r.Done = time.Since(faultAt)
	if wait := time.Until(faultAt.Add(s.For)); wait > 0 {
		time.Sleep(wait)
	}
	resumedAt := time.Now()
	if s.Fault == Freeze {
		if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	} else {
		proxy.Resume()
	}
	// What A had in flight ends within moments; its reconnection and the
	// rebalance take longer, and find nothing left to handle.
	time.Sleep(s.Heartbeat + 3*time.Second)

	r.Stale = count(`SELECT count(*) FROM %s WHERE n <> $1`, PerKey)
	r.InFlight = count(`SELECT count(*) FROM %s_log s WHERE s.writer = 'A' AND s.outcome = 'started' AND s.at < $1
		AND NOT EXISTS (SELECT 1 FROM %s_log e WHERE e.writer = 'A' AND e.key = s.key AND e.n = s.n AND e.outcome <> 'started' AND e.at < $1)`, faultAt)
	rows, err := db.Query(ctx, fmt.Sprintf(`SELECT outcome, count(*) FROM %s_log WHERE writer = 'A' AND outcome <> 'started' AND at >= $1 GROUP BY outcome`, table), resumedAt)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close() // on a failed Scan too: db.Close waits for its connection
	r.Late = map[string]int{}
	for rows.Next() {
		var (
			outcome string
			n       int
		)
		if err := rows.Scan(&outcome, &n); err != nil {
			t.Fatal(err)
		}
		r.Late[outcome] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	r.StaleWrites = count(`SELECT count(*) FROM %s_log s WHERE s.writer = 'A' AND s.outcome = 'written' AND s.at >= $1
		AND s.fence < (SELECT max(e.fence) FROM %s_log e WHERE e.writer = 'B' AND e.key = s.key AND e.outcome = 'written')`, resumedAt)
	if r.Stale > 0 {
		explainStale(t, ctx, db, table)
	}
	if s.Fault == Freeze && r.InFlight == 0 {
		t.Errorf("A had no handler in flight when it was frozen: the run tested nothing")
	}
	if s.Checked {
		if r.Stale > 0 {
			t.Errorf("%d keys ended stale with fence-checked writes", r.Stale)
		}
		if missing := Keys - count(`SELECT count(*) FROM %s`); missing > 0 {
			t.Errorf("%d keys were never written", missing)
		}
	}
	return r
}

// explainStale logs, for each key that ended stale, its row and what the
// log says of the number it ends at and of the key's last two.
func explainStale(t *testing.T, ctx context.Context, db *pgxpool.Pool, table string) {
	t.Helper()
	rows, err := db.Query(ctx, fmt.Sprintf(`SELECT s.key, s.n, s.fence, l.writer, l.n, l.fence, l.outcome, l.at
		FROM %[1]s s JOIN %[1]s_log l ON l.key = s.key
		WHERE s.n <> $1 AND (l.n = s.n OR l.n >= $1 - 1) ORDER BY s.key, l.at`, table), PerKey)
	if err != nil {
		t.Logf("explaining the stale keys: %v", err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var (
			key, who, outcome string
			n, ln             int
			fence, lfence     int64
			at                time.Time
		)
		if err := rows.Scan(&key, &n, &fence, &who, &ln, &lfence, &outcome, &at); err != nil {
			t.Logf("explaining the stale keys: %v", err)
			return
		}
		t.Logf("stale key %s (ends at %d, fence %d): %s %s %d fence %d at %s", key, n, fence, who, outcome, ln, lfence, at.Format("15:04:05.000000"))
	}
}

// waitUntil polls cond every 20ms until it holds, failing the test when
// ctx ends first.
func waitUntil(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("still waiting for %s: %v", what, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Runs runs the experiment n times for each fault and each kind of write,
// logging each run and the stale final states per run, as subtests named
// fault/checked/runN and fault/unchecked/runN.
func Runs(t *testing.T, n int, base Setup, faults map[Fault]time.Duration) {
	for _, fault := range []Fault{Freeze, Partition} {
		d, ok := faults[fault]
		if !ok {
			continue
		}
		for _, checked := range []bool{true, false} {
			name := string(fault) + "/unchecked"
			if checked {
				name = string(fault) + "/checked"
			}
			t.Run(name, func(t *testing.T) {
				s := base
				s.Fault, s.For, s.Checked = fault, d, checked
				var stale []int
				for i := range n {
					// A subtest each, so that each run's instance, queues
					// and tables are gone before the next one starts.
					t.Run(fmt.Sprintf("run%d", i+1), func(t *testing.T) {
						r := Run(t, s)
						t.Logf("%s for %v, heartbeat %v: %v", fault, d, s.Heartbeat, r)
						stale = append(stale, r.Stale)
					})
				}
				t.Logf("%s: stale final states per run: %v", name, stale)
			})
		}
	}
}

// FromEnv reads the experiment's variables: ACEMQ_FENCE_FREEZE and
// ACEMQ_FENCE_PARTITION (how long each fault lasts, 10s by default),
// ACEMQ_FENCE_HEARTBEAT (A's heartbeat, 2s) and ACEMQ_FENCE_RUNS (runs of
// each, 1). make fence-experiment sets them to the full experiment's.
func FromEnv(t *testing.T) (runs int, heartbeat time.Duration, faults map[Fault]time.Duration) {
	t.Helper()
	dur := func(name string, def time.Duration) time.Duration {
		v := os.Getenv(name)
		if v == "" {
			return def
		}
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("%s=%q: want a duration above 0", name, v)
		}
		return d
	}
	runs = 1
	if v := os.Getenv("ACEMQ_FENCE_RUNS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("ACEMQ_FENCE_RUNS=%q: want a number, 1 or more", v)
		}
		runs = n
	}
	return runs, dur("ACEMQ_FENCE_HEARTBEAT", 2*time.Second), map[Fault]time.Duration{
		Freeze:    dur("ACEMQ_FENCE_FREEZE", 10*time.Second),
		Partition: dur("ACEMQ_FENCE_PARTITION", 10*time.Second),
	}
}
