package blob_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/blob"
	"github.com/stretchr/testify/require"
)

func TestDefaultExpiry(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    acemq.RetryPolicy
		want time.Duration
	}{
		{"default", acemq.DefaultRetryPolicy(), 156*time.Second + blob.InspectionTime},
		{"zero is the default", acemq.RetryPolicy{}, 156*time.Second + blob.InspectionTime},
		{"the last delay repeats", acemq.RetryPolicy{MaxAttempts: 6, Delays: []time.Duration{time.Minute, time.Hour}}, time.Minute + 4*time.Hour + blob.InspectionTime},
		{"one attempt", acemq.RetryPolicy{MaxAttempts: 1, Delays: []time.Duration{time.Hour}}, blob.InspectionTime},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, blob.DefaultExpiry(tc.p))
		})
	}
}

// TestSweepKeepsWhatDeadLettersName: a message dead-lettered after its
// ladder still names its object, and Sweep leaves the object alone until
// its expiry (the ladder plus 7 days) has passed; then it goes.
func TestSweepKeepsWhatDeadLettersName(t *testing.T) {
	for _, b := range brokers {
		t.Run(b.name, func(t *testing.T) {
			url := b.url(t)
			st, hook := newSettlements()
			c := connect(t, url, hook)
			q := queue(t, url, "blob-sweep")
			s := blob.Memory()
			run(t, c, q, blob.Handle(s, func(context.Context, *acemq.Message[meta], *blob.Reader) acemq.Ack {
				return acemq.Retry(errors.New("not today"))
			}))
			ref, err := blob.NewPublisher[meta](c, s, "", q, blob.ForPolicy(fastRetry)).Send(t.Context(), meta{}, payload(5, 1000))
			require.NoError(t, err)
			for {
				if got := st.next(t, 10*time.Second); got.Outcome == acemq.OutcomeDeadLettered {
					break
				}
			}
			requireIn(t, c, acemq.DeadLetterQueue(q), 1)
			require.True(t, ref.Expires.After(time.Now().Add(blob.InspectionTime-time.Minute)))
			for _, at := range []time.Time{time.Now(), time.Now().Add(blob.InspectionTime - time.Hour)} {
				n, err := blob.Sweep(t.Context(), s, at)
				require.NoError(t, err)
				require.Zero(t, n, "swept at %s", at)
				require.Equal(t, []string{ref.ID}, ids(t, s))
			}
			n, err := blob.Sweep(t.Context(), s, ref.Expires.Add(time.Second))
			require.NoError(t, err)
			require.Equal(t, 1, n)
			require.Empty(t, ids(t, s))
		})
	}
}
