package outbox

import (
	"context"
)

// ClaimForTest claims a batch as r would and then forgets it, as a relay
// killed right after its claim would.
func ClaimForTest(ctx context.Context, r *Relay) (int, error) {
	rows, err := r.claim(ctx)
	return len(rows), err
}

// SetSettleHookForTest makes r call fn before each try of a settle
// statement, with what the statement does ("delete", "release" or "push
// back"). Set it before Run.
func SetSettleHookForTest(r *Relay, fn func(what string)) { r.hook = fn }

// ClaimSQLForTest returns r's claim statement.
func ClaimSQLForTest(r *Relay) string { return r.sqls.claim }
