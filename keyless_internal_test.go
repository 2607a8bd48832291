package acemq

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// TestKeylessWithoutOriginSaysSo: a keyless message whose publisher set no
// Origin (no app-id) is logged and parked with the same words for it, the
// fallback, not an empty origin in the log beside a named one in the reason.
func TestKeylessWithoutOriginSaysSo(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	e := &engine{conn: &Conn{cfg: connConfig{logger: slog.New(slog.NewTextHandler(&buf, nil))}}, queue: "ledger", who: "consumer"}
	v := (&orderedMode{e: e}).keyless(&Envelope{ID: "m-1", Type: "Deposited"})
	if !strings.Contains(v.reason, "Origin unknown (no app-id)") {
		t.Errorf("reason %q", v.reason)
	}
	if !strings.Contains(buf.String(), `origin="unknown (no app-id)"`) {
		t.Errorf("log %q", buf.String())
	}
}
