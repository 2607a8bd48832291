package console_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/console"
	"github.com/acemq/acemq/crypt"
)

// TestSealedMessage: a body sealed by acemq.WithBodyCipher is shown opened
// only when the console has the keyset (console.Cipher); without it the
// view names the key and says the body is encrypted, showing none of its
// bytes; edit and replay refuses a sealed message and leaves it in .dlq.
func TestSealedMessage(t *testing.T) {
	t.Parallel()
	for _, b := range brokers {
		t.Run(b.name, func(t *testing.T) {
			url := b.url(t)
			h, err := crypt.NewKeyset()
			if err != nil {
				t.Fatal(err)
			}
			keys, err := crypt.New(h)
			if err != nil {
				t.Fatal(err)
			}
			c, err := acemq.Connect(ctxT(t), url, acemq.WithLogger(quiet), acemq.WithBodyCipher(keys))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			q := family(t, c, url)
			dlq := acemq.DeadLetterQueue(q)
			const secret = "4111-1111-1111-1111"
			pub := acemq.NewPublisher[orderPlaced](c, "", dlq)
			if err := pub.Send(ctxT(t), orderPlaced{OrderID: secret, TotalCents: 1}, acemq.MessageID("s1")); err != nil {
				t.Fatal(err)
			}
			keyID := strconv.FormatUint(uint64(keys.Primary()), 10)

			type view struct {
				Body, Sealed string
				Opened       bool
			}
			var closed view
			getJSON(t, server(t, c), "/api/message?queue="+dlq+"&id=s1", &closed)
			if closed.Sealed != keyID || closed.Opened || strings.Contains(closed.Body, secret) || !strings.Contains(closed.Body, "encrypted with key "+keyID) {
				t.Errorf("without the keyset: %+v; want key %s named, the body not shown", closed, keyID)
			}

			s := server(t, c, console.Cipher(keys), console.Write())
			var opened view
			getJSON(t, s, "/api/message?queue="+dlq+"&id=s1", &opened)
			if opened.Sealed != keyID || !opened.Opened || !strings.Contains(opened.Body, secret) {
				t.Errorf("with the keyset: %+v; want the body opened", opened)
			}

			code, body := post(t, s, "/api/edit", csrfOf(t, s), map[string]string{"queue": dlq, "id": "s1", "body": `{"orderId":"x","totalCents":2}`})
			if code != http.StatusBadRequest || !strings.Contains(body, "is sealed") {
				t.Errorf("edit of a sealed message: %d %s; want 400 saying it is sealed", code, body)
			}
			if n := readyIs(t, c, dlq, 1); n != 1 {
				t.Errorf("%s holds %d after the refused edit, want 1", dlq, n)
			}
		})
	}
}
