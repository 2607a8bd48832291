package acemq

import (
	"testing"
	"time"

	"github.com/acemq/acemq/transport"
)

// TestBatchGathererTransitions drives the gatherer's transitions, one
// event at a time, and checks after each where it stands: its state, the
// size of the batch being gathered, whether the batch is to be handed over
// (with no job buffered), and how many deliveries went back to the queue.
func TestBatchGathererTransitions(t *testing.T) {
	t.Parallel()
	type want struct {
		state gatherState
		cur   int
		ready bool
		back  int
	}
	for _, tc := range []struct {
		name   string
		events string // j: a job, x: a job past a probe's few, d: BatchWait passed, s: taken by a worker, r: Run stops, p: Pause, c: Conn.Close, t: the taking ends
		want   []want // after each event
	}{
		{name: "a full batch goes", events: "jjjs", want: []want{
			{gathering, 1, false, 0}, {gathering, 2, false, 0}, {gathering, 3, true, 0}, {gathering, 0, false, 0},
		}},
		{name: "BatchWait makes a short batch go", events: "jds", want: []want{
			{gathering, 1, false, 0}, {gathering, 1, true, 0}, {gathering, 0, false, 0},
		}},
		{name: "Run stopping finishes the batch being gathered, then nothing more", events: "jrjsj", want: []want{
			{gathering, 1, false, 0}, {finishing, 1, true, 0}, {finishing, 2, true, 0}, {draining, 0, false, 0}, {draining, 0, false, 1},
		}},
		{name: "Run stopping takes the jobs already handed out as the last batch", events: "jjjsrjjs", want: []want{
			{gathering, 1, false, 0}, {gathering, 2, false, 0}, {gathering, 3, true, 0}, {gathering, 0, false, 0},
			{finishing, 0, false, 0}, {finishing, 1, true, 0}, {finishing, 2, true, 0}, {draining, 0, false, 0},
		}},
		{name: "Conn.Close puts the batch back and starts none", events: "jjcj", want: []want{
			{gathering, 1, false, 0}, {gathering, 2, false, 0}, {draining, 0, false, 2}, {draining, 0, false, 3},
		}},
		{name: "Conn.Close while the last batch is topped up puts it back", events: "jrcj", want: []want{
			{gathering, 1, false, 0}, {finishing, 1, true, 0}, {draining, 0, false, 1}, {draining, 0, false, 2},
		}},
		{name: "Pause puts the batch being gathered back", events: "jjpj", want: []want{
			{gathering, 1, false, 0}, {gathering, 2, false, 0}, {draining, 0, false, 2}, {draining, 0, false, 3},
		}},
		{name: "the taking ending hands the batch over at once", events: "jtxs", want: []want{
			{gathering, 1, false, 0}, {flushing, 1, true, 0}, {flushing, 1, true, 1}, {flushing, 0, false, 1},
		}},
		{name: "Run stopping after the taking ended finishes the batch", events: "jtrs", want: []want{
			{gathering, 1, false, 0}, {flushing, 1, true, 0}, {finishing, 1, true, 0}, {draining, 0, false, 0},
		}},
		{name: "Pause after Run stopping changes nothing", events: "jrp", want: []want{
			{gathering, 1, false, 0}, {finishing, 1, true, 0}, {finishing, 1, true, 0},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newBatchGatherer(3, time.Second)
			back := 0
			for i, ev := range tc.events {
				switch ev {
				case 'j', 'x':
					if b, _ := g.add(job{d: transport.Delivery{}, take: ev == 'j'}); b {
						back++
					}
				case 'd':
					g.due = true
				case 's':
					g.sent()
				case 'r':
					back += len(g.stop(true))
				case 'p':
					back += len(g.stop(false))
				case 'c':
					back += len(g.abort())
				case 't':
					g.takingEnded()
				}
				got := want{g.state, len(g.cur), g.ready(0), back}
				if got != tc.want[i] {
					t.Fatalf("after %q: %+v, want %+v", tc.events[:i+1], got, tc.want[i])
				}
			}
		})
	}
}

// TestBatchGathererWaitsForBuffered: while the taking ends or Run stops,
// the batch waits for the jobs already handed out (up to BatchSize), and
// goes once they are in or it is full.
func TestBatchGathererWaitsForBuffered(t *testing.T) {
	t.Parallel()
	g := newBatchGatherer(3, time.Second)
	g.add(job{take: true})
	g.stop(true)
	if g.ready(2) {
		t.Fatal("a finishing batch went with jobs still buffered")
	}
	g.add(job{take: true})
	g.add(job{take: true})
	if !g.ready(5) || g.accepting() {
		t.Fatalf("a full finishing batch: ready %v, accepting %v", g.ready(5), g.accepting())
	}
	if last := g.closed(); len(last) != 3 {
		t.Fatalf("closed handed over %d, want 3", len(last))
	}
	if g.closed() != nil {
		t.Fatal("closed handed over a batch twice")
	}
}
