package acemq_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/acemq/acemq"
)

// reserveStock is the handler the table test below exercises.
func reserveStock(_ context.Context, m *acemq.Message[OrderPlaced]) acemq.Ack {
	switch {
	case m.Payload.OrderID == "":
		return acemq.Reject(errors.New("the order has no ID"))
	case m.Payload.TotalCents > 1_000_000:
		return acemq.AckOf(acemq.Fatal(errors.New("over the credit limit")))
	case m.Envelope.Headers["x-stock"] == "low":
		return acemq.RetryAfter(30*time.Second, errors.New("waiting for stock"))
	}
	return acemq.Done()
}

// A handler is a function: a unit test calls it with a Message and reads
// what it asked for from the Ack it returns (Kind, Err, Delay), with no
// broker and no Conn.
func ExampleAck_Kind() {
	for _, tc := range []struct {
		name    string
		payload OrderPlaced
		headers map[string]any
		want    acemq.AckKind
	}{
		{name: "an order", payload: OrderPlaced{OrderID: "A-1", TotalCents: 1250}, want: acemq.AckDone},
		{name: "no ID", payload: OrderPlaced{TotalCents: 1}, want: acemq.AckReject},
		{name: "too big", payload: OrderPlaced{OrderID: "A-2", TotalCents: 5_000_000}, want: acemq.AckFatal},
		{name: "low stock", payload: OrderPlaced{OrderID: "A-3"}, headers: map[string]any{"x-stock": "low"}, want: acemq.AckRetry},
	} {
		if tc.headers == nil {
			tc.headers = map[string]any{}
		}
		m := &acemq.Message[OrderPlaced]{Payload: tc.payload, Envelope: &acemq.Envelope{ID: "m-1", Attempt: 1, Headers: tc.headers}}
		ack := reserveStock(context.Background(), m)
		verdict := "ok"
		if ack.Kind() != tc.want {
			verdict = fmt.Sprintf("FAIL: got %s, want %s", ack.Kind(), tc.want)
		}
		fmt.Printf("%-9s %-6s err=%v delay=%v  %s\n", tc.name, ack.Kind(), ack.Err(), ack.Delay(), verdict)
	}
	// Output:
	// an order  done   err=<nil> delay=0s  ok
	// no ID     reject err=the order has no ID delay=0s  ok
	// too big   fatal  err=over the credit limit delay=0s  ok
	// low stock retry  err=waiting for stock delay=30s  ok
}
