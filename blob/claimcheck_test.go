package blob_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/blob"
	"github.com/stretchr/testify/require"
)

// Report is a typed payload that may be large.
type Report struct {
	Title string `json:"title"`
	Rows  []byte `json:"rows"`
}

// TestClaimCheck: a Publisher[T] of a Conn with WithClaimCheck stores a
// body over the threshold and sends its Ref; a consumer on a Conn with the
// option sees T unchanged; a small body travels as it is.
func TestClaimCheck(t *testing.T) {
	eachPlace(t, func(t *testing.T, url string, s blob.Store) {
		c := connect(t, url, blob.WithClaimCheck(s, 0))
		q := queue(t, url, "blob-claim")
		got := make(chan Report, 2)
		run(t, c, q, func(_ context.Context, m *acemq.Message[Report]) acemq.Ack {
			got <- m.Payload
			return acemq.Done()
		})
		// A raw reader of the wire: what travels.
		big := Report{Title: "big", Rows: bytes.Repeat([]byte("r"), 3<<20)}
		small := Report{Title: "small", Rows: []byte("r")}
		p := acemq.NewPublisher[Report](c, "", q)
		require.NoError(t, p.Send(t.Context(), big))
		require.NoError(t, p.Send(t.Context(), small))
		for range 2 {
			select {
			case r := <-got:
				if r.Title == "big" {
					require.Equal(t, big, r)
				} else {
					require.Equal(t, small, r)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("not handled")
			}
		}
		require.Len(t, ids(t, s), 1, "only the body over 256 KiB was stored")
	})
}

// TestClaimCheckOnTheWire: the offloaded message carries the claim (a Ref
// whose ContentType is the body's), small, with the claim-check content
// type; a Conn without the option parks it with a reason naming the
// option; a Consumer[Raw] there gets the claim as it is.
func TestClaimCheckOnTheWire(t *testing.T) {
	for _, b := range brokers {
		t.Run(b.name, func(t *testing.T) {
			url := b.url(t)
			s := blob.Memory()
			sender := connect(t, url, blob.WithClaimCheck(s, 1000))
			st, hook := newSettlements()
			plain := connect(t, url, hook)
			q, rawQ := queue(t, url, "blob-noclaim"), queue(t, url, "blob-rawclaim")
			run(t, plain, q, func(context.Context, *acemq.Message[Report]) acemq.Ack { return acemq.Done() })
			raw := make(chan []byte, 1)
			run(t, plain, rawQ, func(_ context.Context, m *acemq.Message[acemq.Raw]) acemq.Ack {
				raw <- m.Payload
				return acemq.Done()
			})
			big := Report{Title: "big", Rows: bytes.Repeat([]byte("r"), 2000)}
			require.NoError(t, acemq.NewPublisher[Report](sender, "", q).Send(t.Context(), big))
			got := st.next(t, 10*time.Second)
			require.Equal(t, acemq.OutcomeParked, got.Outcome)
			require.Contains(t, got.Reason, "blob.WithClaimCheck")

			require.NoError(t, acemq.NewPublisher[Report](sender, "", rawQ).Send(t.Context(), big))
			claim := <-raw
			require.Less(t, len(claim), 400)
			ref, ok := blob.RefOf(acemq.ClaimCheckContentType, claim)
			require.True(t, ok, "%s", claim)
			require.Equal(t, "application/json", ref.ContentType)
			require.Greater(t, ref.Size, int64(2000))
		})
	}
}

// TestClaimCheckGoneIsDeadLettered: a consumer that cannot load the body
// because its object is gone sends the delivery to .dlq at once, with a
// reason naming the object and its expiry.
func TestClaimCheckGoneIsDeadLettered(t *testing.T) {
	url := "memory://" + strings.ReplaceAll(t.Name(), "/", "-")
	s := blob.Memory()
	st, hook := newSettlements()
	sender := connect(t, url, blob.WithClaimCheck(s, 10, blob.Expiry(time.Millisecond)))
	consumer := connect(t, url, blob.WithClaimCheck(s, 10), hook)
	q := queue(t, url, "blob-claimgone")
	require.NoError(t, sender.Declare(t.Context(), acemq.Queue{Name: q}))
	require.NoError(t, acemq.NewPublisher[Report](sender, "", q).Send(t.Context(), Report{Title: strings.Repeat("t", 100)}))
	time.Sleep(10 * time.Millisecond)
	run(t, consumer, q, func(context.Context, *acemq.Message[Report]) acemq.Ack { return acemq.Done() })
	got := st.next(t, 10*time.Second)
	require.Equal(t, acemq.OutcomeDeadLettered, got.Outcome)
	require.Equal(t, 1, got.Attempt)
	require.Contains(t, got.Reason, "is gone")
	require.Contains(t, got.Reason, "expired at")
}
