package errtext

import (
	"context"
	"errors"
	"testing"
)

func TestErrorf(t *testing.T) {
	t.Parallel()
	sentinel := errors.New("acemq: the message was unroutable")
	inner := Errorf("rabbitmq publish to %q: %w", "q", sentinel)
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"adds the prefix", Errorf("no such %s", "thing"), "acemq: no such thing"},
		{"keeps one given", Errorf("acemq: no such %s", "thing"), "acemq: no such thing"},
		{"drops the cause's", inner, `acemq: rabbitmq publish to "q": the message was unroutable`},
		{"drops nested ones", Errorf("acemq: publishing x: %w", inner), `acemq: publishing x: rabbitmq publish to "q": the message was unroutable`},
		{"drops them in a join", Errorf("consumer: %w", errors.Join(errors.New("acemq: a"), errors.New("acemq: b"))), "acemq: consumer: a\nb"},
		{"leaves foreign text", Errorf("sending: %w", context.Canceled), "acemq: sending: context canceled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.err.Error(); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
	if err := Errorf("publishing x: %w", inner); !errors.Is(err, sentinel) {
		t.Errorf("errors.Is does not reach the sentinel through %v", err)
	}
	if err := Errorf("a: %w and %w", sentinel, context.Canceled); !errors.Is(err, sentinel) || !errors.Is(err, context.Canceled) {
		t.Errorf("errors.Is does not reach both causes of %v", err)
	}
}
