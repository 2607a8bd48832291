package blob_test

import (
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/blob"
	"github.com/stretchr/testify/require"
)

// TestMissing: blob.Missing describes the object of a claim check or of a
// Publisher's Envelope that the store no longer has, and says nothing of
// one it has or of a body without a Ref.
func TestMissing(t *testing.T) {
	ctx := t.Context()
	s := blob.Memory()
	info, err := s.Put(ctx, "kept", strings.NewReader("abc"), time.Time{})
	require.NoError(t, err)
	kept := blob.Ref{ID: info.ID, Size: info.Size, SHA256: hex.EncodeToString(info.SHA256[:])}
	lost := kept
	lost.ID, lost.Expires = "lost", time.Date(2026, 12, 9, 0, 0, 0, 0, time.UTC)
	claim := func(r blob.Ref) []byte { b, _ := json.Marshal(r); return b }
	envelope := func(r blob.Ref) []byte { b, _ := json.Marshal(blob.Envelope[struct{}]{Ref: r}); return b }
	missing := blob.Missing(s)
	for _, tc := range []struct {
		name, contentType string
		body              []byte
		want              string
	}{
		{"a claim check whose object is there", acemq.ClaimCheckContentType, claim(kept), ""},
		{"a claim check whose object is gone", acemq.ClaimCheckContentType, claim(lost), "object lost, 3 bytes, expires 2026-12-09T00:00:00Z"},
		{"an envelope whose object is there", "application/json", envelope(kept), ""},
		{"an envelope whose object is gone", "application/json", envelope(lost), "object lost, 3 bytes, expires 2026-12-09T00:00:00Z"},
		{"a body without a Ref", "application/json", []byte(`{"orderId":"A-1"}`), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := missing(ctx, tc.contentType, tc.body)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}
