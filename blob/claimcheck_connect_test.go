package blob_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/blob"
)

// TestWithClaimCheckFailsConnect (issue 37 item 5): a nil Store or a bad
// option of WithClaimCheck fails Connect, as WithBodyStore's nil store
// does, rather than the first Send large enough to be offloaded.
func TestWithClaimCheckFailsConnect(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  acemq.ConnOption
		want string
	}{
		{"nil Store", blob.WithClaimCheck(nil, 0), "blob: WithClaimCheck was given a nil Store"},
		{"bad Expiry", blob.WithClaimCheck(blob.Memory(), 0, blob.Expiry(-time.Second)), "Expiry(-1s): want a positive duration"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, err := acemq.Connect(ctx, acemqtest.Memory(t), tc.opt)
			if err == nil {
				_ = c.Close()
				t.Fatalf("Connect succeeded; want %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Connect failed with %q; want it to say %q", err, tc.want)
			}
		})
	}
}
