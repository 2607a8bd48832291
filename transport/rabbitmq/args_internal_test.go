package rabbitmq

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/acemq/acemq/transport"
)

// TestExchangeArgumentsAreChecked: an exchange whose arguments AMQP cannot
// carry fails its declaration, on the plain path and on the plugin probe,
// naming the exchange and the argument, before anything reaches a channel
// or a connection (both are nil here): an argument is never dropped.
func TestExchangeArgumentsAreChecked(t *testing.T) {
	t.Parallel()
	x := transport.Exchange{Name: "ledger", Kind: "x-consistent-hash", Args: map[string]any{"hash-header": math.NaN()}}
	for name, err := range map[string]error{
		"declare": declareOne(nil, x),
		"probe":   (&Transport{}).probeKind(context.Background(), x, "rabbitmq_consistent_hash_exchange"),
	} {
		if err == nil {
			t.Fatalf("%s: no error", name)
		}
		for _, want := range []string{`rabbitmq: declare exchange "ledger": arguments: `, "hash-header"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %q does not say %q", name, err, want)
			}
		}
	}
}
