package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/transport"
)

// maxPeek bounds -n. Every message is held, unacked and in memory, until
// all are put back; a peek is for looking, not for draining.
const maxPeek = 500

// runPeek takes up to -n messages from the head of a queue, prints their
// envelopes and the start of their bodies, then puts every one back, last
// first, so the queue keeps its order. Holding them all until the end is
// what keeps the same message from being read twice.
func runPeek(ctx context.Context, c *cli, args []string) (err error) {
	fs := c.flags("peek", "QUEUE", "Show the envelopes of the messages at the head of QUEUE; nothing is consumed.")
	n := fs.Int("n", 10, fmt.Sprintf("how many messages to show, 1 to %d", maxPeek))
	bodyMax := fs.Int("body", 200, "show at most this many `bytes` of each body (0 hides bodies)")
	verbose := fs.Bool("v", false, "also show the broker's bookkeeping headers (x-death, x-first-death-*, x-last-death-*, x-delivery-count)")
	keysetFile := fs.String("keyset", "", "open sealed bodies with the Tink keyset in `FILE` (crypt.WriteKeyset's JSON); without it a sealed body shows only its key ID")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) != 1:
		return usagef("peek: name exactly one queue")
	case *n < 1 || *n > maxPeek:
		return usagef("peek: -n must be between 1 and %d, not %d", maxPeek, *n)
	case *bodyMax < 0:
		return usagef("peek: -body must not be negative")
	}
	queue := pos[0]
	keys, err := readKeys(*keysetFile)
	if err != nil {
		return err
	}
	mq, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer mq.Close()

	var held []transport.Delivery
	defer func() {
		// Put back what was taken even when the peek failed half way. A
		// failed nack leaves the message to the broker, which redelivers it
		// once the channel it came on is gone: it is not lost either way.
		var errs []error
		for i := len(held) - 1; i >= 0; i-- {
			if nerr := held[i].Nack(true); nerr != nil {
				errs = append(errs, nerr)
			}
		}
		if len(errs) > 0 {
			fmt.Fprintf(c.stderr, "acemq: warning: %s could not be put back at once; the broker returns them to %s when their channel closes: %v\n",
				plural(len(errs), "message"), queue, errs[0])
		}
	}()
	for len(held) < *n {
		d, ok, err := mq.Transport().Get(ctx, queue)
		if err != nil {
			return fmt.Errorf("acemq: peek: %w", err)
		}
		if !ok {
			break
		}
		held = append(held, d)
	}
	if len(held) == 0 {
		fmt.Fprintf(c.stdout, "%s has no ready messages\n", queue)
		return nil
	}
	for i, d := range held {
		printMessage(ctx, c.stdout, i+1, len(held), d, *bodyMax, *verbose, keys)
	}
	fmt.Fprintf(c.stdout, "%s shown; put back on %s\n", plural(len(held), "message"), queue)
	return nil
}

// printMessage writes one delivery's envelope, headers and body. Every
// string from the message is made safe for a terminal first.
// Unless verbose, the broker's bookkeeping headers are left out and
// counted, so the application's headers stand out.
func printMessage(ctx context.Context, w io.Writer, i, n int, d transport.Delivery, bodyMax int, verbose bool, keys acemq.BodyCipher) {
	env, perr := acemq.EnvelopeOf(d.Message)
	fmt.Fprintf(w, "--- %d of %d\n", i, n)
	field := func(name, value string) {
		if value != "" {
			fmt.Fprintf(w, "  %-12s %s\n", name, safe(value))
		}
	}
	field("id", env.ID)
	field("type", fmt.Sprintf("%s (version %d)", env.Type, env.Version))
	field("attempt", strconv.Itoa(env.Attempt))
	if !env.FirstSeen.IsZero() {
		// To the second, as the AMQP timestamp holds it: a message written
		// by an earlier build (x-acemq-first-seen, with nanoseconds) shows
		// as the same envelope.
		field("first seen", env.FirstSeen.UTC().Format(time.RFC3339))
	}
	field("origin", env.Origin)
	field("error", env.Error)
	if perr != nil {
		field("unreadable", perr.Error())
	}
	field("correlation", env.CorrelationID)
	field("causation", env.CausationID)
	field("reply to", env.ReplyTo)
	field("key", env.Key)
	if !env.Due.IsZero() {
		field("due", dueLine(env.Due, time.Now()))
	}
	field("delayed to", delayedTo(env))
	field("content", fmt.Sprintf("%s, %d bytes", orNone(d.ContentType), len(d.Body)))
	field("blob", blobLine(d.ContentType, d.Body))
	if d.Redelivered {
		field("redelivered", "yes")
	}
	var hidden []string
	for _, k := range slices.Sorted(maps.Keys(env.Headers)) {
		if !verbose && brokerHeader(k) {
			hidden = append(hidden, k)
			continue
		}
		field("header", k+" = "+clip(fmt.Sprint(env.Headers[k]), 120))
	}
	if len(hidden) > 0 {
		field("broker", fmt.Sprintf("%s hidden (%s); -v shows them", plural(len(hidden), "bookkeeping header"), strings.Join(hidden, ", ")))
	}
	body, shown := sealedBody(ctx, env, d, keys)
	field("sealed", shown)
	if bodyMax > 0 && body != nil {
		body := clip(string(body), bodyMax)
		fmt.Fprintf(w, "  %-12s %s\n", "body", safe(body))
	}
}

// brokerHeader reports a header RabbitMQ adds for its own bookkeeping when
// it dead-letters or redelivers a message, rather than the application's.
func brokerHeader(name string) bool {
	name = strings.ToLower(name)
	return name == "x-death" || name == "x-delivery-count" ||
		strings.HasPrefix(name, "x-first-death-") || strings.HasPrefix(name, "x-last-death-")
}

// clip cuts s to at most limit bytes, at a rune boundary, saying how much
// was left out.
func clip(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d more bytes)", s[:cut], len(s)-cut)
}

// safe returns s as it is when it is printable text, and quoted, with its
// control characters and invalid bytes escaped, otherwise: a message's
// bytes must not drive the operator's terminal.
func safe(s string) string {
	if !utf8.ValidString(s) {
		return strconv.Quote(s)
	}
	for _, r := range s {
		if !unicode.IsPrint(r) && r != ' ' {
			return strconv.Quote(s)
		}
	}
	return s
}

// plural is "1 message", "2 messages".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func orNone(s string) string {
	if s == "" {
		return "no content type"
	}
	return s
}
