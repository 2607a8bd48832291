package patterns_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/patterns"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// goneFor is a SkipMissingBlob check that says the object of the messages
// numbered in gone is gone, fails for those in broken, and finds the rest.
func goneFor(gone, broken []int) func(context.Context, string, []byte) (string, error) {
	return func(_ context.Context, _ string, body []byte) (string, error) {
		for _, n := range gone {
			if bytes.Contains(body, fmt.Appendf(nil, `"A-%d"`, n)) {
				return fmt.Sprintf("object lost-%d", n), nil
			}
		}
		for _, n := range broken {
			if bytes.Contains(body, fmt.Appendf(nil, `"A-%d"`, n)) {
				return "", errors.New("the store is down")
			}
		}
		return "", nil
	}
}

// TestReplayDryRunAndSkipMissingBlob: a dry run lists what would be moved
// (ID, type, reason, where to), moves and acks nothing, and leaves the
// source as it was, in order and untouched; SkipMissingBlob leaves the
// messages whose object is gone on the source, reports them, and moves the
// rest; the two together list without the missing ones.
func TestReplayDryRunAndSkipMissingBlob(t *testing.T) {
	t.Parallel()
	even := func(e *acemq.Envelope) bool { n, _ := e.Headers["x-n"].(int32); return n%2 == 0 }
	all := []string{"dead-0", "dead-1", "dead-2", "dead-3", "dead-4", "dead-5"}
	type seen struct {
		id      string
		outcome patterns.ReplayOutcome
		missing string
	}
	for _, b := range brokers {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			url := b.url(t)
			for _, tc := range []struct {
				name      string
				opts      []patterns.ReplayOption
				want      patterns.ReplayReport
				wantErr   string
				wantSeen  []seen
				wantMoved []string
				wantLeft  []string
			}{
				{name: "a dry run", opts: []patterns.ReplayOption{patterns.DryRun()},
					want:     patterns.ReplayReport{Listed: 6},
					wantSeen: []seen{{"dead-0", patterns.ReplayListed, ""}, {"dead-1", patterns.ReplayListed, ""}, {"dead-2", patterns.ReplayListed, ""}, {"dead-3", patterns.ReplayListed, ""}, {"dead-4", patterns.ReplayListed, ""}, {"dead-5", patterns.ReplayListed, ""}},
					wantLeft: all},
				{name: "a dry run with a filter and a limit", opts: []patterns.ReplayOption{patterns.DryRun(), patterns.Filter(even), patterns.Limit(2)},
					want:     patterns.ReplayReport{Listed: 2, Skipped: 1},
					wantSeen: []seen{{"dead-0", patterns.ReplayListed, ""}, {"dead-1", patterns.ReplaySkipped, ""}, {"dead-2", patterns.ReplayListed, ""}},
					wantLeft: all},
				{name: "missing blobs stay", opts: []patterns.ReplayOption{patterns.SkipMissingBlob(goneFor([]int{1, 4}, []int{5}))},
					want: patterns.ReplayReport{Moved: 3, Missing: 2, Failed: 1}, wantErr: "the store is down",
					wantSeen: []seen{{"dead-0", patterns.ReplayMoved, ""}, {"dead-1", patterns.ReplayMissingBlob, "object lost-1"}, {"dead-2", patterns.ReplayMoved, ""},
						{"dead-3", patterns.ReplayMoved, ""}, {"dead-4", patterns.ReplayMissingBlob, "object lost-4"}, {"dead-5", patterns.ReplayFailed, ""}},
					wantMoved: []string{"dead-0", "dead-2", "dead-3"}, wantLeft: []string{"dead-1", "dead-4", "dead-5"}},
				{name: "a dry run without the missing blobs", opts: []patterns.ReplayOption{patterns.DryRun(), patterns.SkipMissingBlob(goneFor([]int{0}, nil))},
					want:     patterns.ReplayReport{Listed: 5, Missing: 1},
					wantSeen: []seen{{"dead-0", patterns.ReplayMissingBlob, "object lost-0"}, {"dead-1", patterns.ReplayListed, ""}, {"dead-2", patterns.ReplayListed, ""}, {"dead-3", patterns.ReplayListed, ""}, {"dead-4", patterns.ReplayListed, ""}, {"dead-5", patterns.ReplayListed, ""}},
					wantLeft: all},
			} {
				t.Run(tc.name, func(t *testing.T) {
					c := connect(t, url)
					dlq, work := queue(t, c, "dlq"), queue(t, c, "work")
					seed(t, c, dlq, 6)
					require.Equal(t, 6, count(t, c, dlq))
					var got []seen
					opts := append(tc.opts, patterns.Each(func(it patterns.ReplayItem) {
						got = append(got, seen{it.ID, it.Outcome, it.Missing})
						assert.Equal(t, "OrderPlaced", it.Type)
						assert.Equal(t, "gave up after 5 attempts: the warehouse is busy", it.Reason)
						assert.Equal(t, "", it.Exchange)
						assert.Equal(t, work, it.RoutingKey)
						assert.Equal(t, it.Outcome == patterns.ReplayFailed, it.Err != nil, "Err is set for a failure only")
					}))
					rep, err := patterns.Replay(ctxT(t), c, dlq, work, opts...)
					if tc.wantErr != "" {
						require.ErrorContains(t, err, tc.wantErr)
					} else {
						require.NoError(t, err)
					}
					assert.Equal(t, tc.want, rep)
					assert.Equal(t, tc.wantSeen, got)

					eventually(t, "the messages left to be back", func() bool { return count(t, c, dlq) == len(tc.wantLeft) })
					assert.Equal(t, len(tc.wantMoved), count(t, c, work))
					var moved, left []string
					for _, env := range drain(t, c, work) {
						moved = append(moved, env.ID)
					}
					for _, env := range drain(t, c, dlq) {
						left = append(left, env.ID)
						assert.Equal(t, 5, env.Attempt, "what stays is untouched")
						assert.NotEmpty(t, env.Error, "what stays keeps its reason")
					}
					assert.Equal(t, tc.wantMoved, moved)
					assert.Equal(t, tc.wantLeft, left)
				})
			}
		})
	}
}

func TestReplayOutcomeString(t *testing.T) {
	t.Parallel()
	for o, want := range map[patterns.ReplayOutcome]string{
		patterns.ReplayMoved: "moved", patterns.ReplayListed: "would move", patterns.ReplaySkipped: "skipped",
		patterns.ReplayMissingBlob: "missing blob", patterns.ReplayFailed: "failed", 0: "ReplayOutcome(0)",
	} {
		assert.Equal(t, want, o.String())
	}
}
