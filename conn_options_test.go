package acemq_test

import (
	"strings"
	"testing"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestConnectRefusesWhatItCannotTake: every Conn option given a value it
// cannot take fails Connect, naming the option, rather than take a
// default in its place or fail later at a Send; the valid edge values
// connect.
func TestConnectRefusesWhatItCannotTake(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opt  acemq.ConnOption
		want string // empty when it connects
	}{
		{"empty origin", acemq.WithOrigin(""), "acemq: WithOrigin was given an empty origin"},
		{"long origin", acemq.WithOrigin(strings.Repeat("o", 256)), "acemq: WithOrigin was given an origin of 256 bytes; an origin has at most 255"},
		{"origin of 255 bytes", acemq.WithOrigin(strings.Repeat("o", 255)), ""},
		{"zero confirm window", acemq.WithConfirmWindow(0), "acemq: WithConfirmWindow was given 0; want 1 or more"},
		{"confirm window of 1", acemq.WithConfirmWindow(1), ""},
		{"nil logger", acemq.WithLogger(nil), "acemq: WithLogger was given nil"},
		{"nil meter provider", acemq.WithMeterProvider(nil), "acemq: WithMeterProvider was given nil"},
		{"nil OnSettled", acemq.OnSettled(nil), "acemq: OnSettled was given a nil function"},
		{"nil transport", acemq.WithTransport(nil), "acemq: WithTransport was given a nil transport"},
		{"nil codec", acemq.WithCodec(nil), "acemq: WithCodec was given a nil codec"},
		{"nil interceptor", acemq.WithPublishInterceptor(nil), "acemq: the interceptor is nil"},
		{"negative attempts", acemq.WithRetryPolicy(acemq.RetryPolicy{MaxAttempts: -1}), "acemq: RetryPolicy.MaxAttempts is -1, want 1 or more"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := acemq.Connect(ctxT(t), acemqtest.Memory(t), tc.opt)
			if tc.want == "" {
				require.NoError(t, err)
				require.NoError(t, c.Close())
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Equal(t, 1, countPrefix(err.Error()), err.Error())
		})
	}
}
