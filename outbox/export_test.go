package outbox

import (
	"context"
	"time"
)

// ClaimForTest claims a batch as r would and then forgets it, as a relay
// killed right after its claim would.
func ClaimForTest(ctx context.Context, r *Relay) (int, error) {
	rows, err := r.claim(ctx, time.Now())
	return len(rows), err
}
