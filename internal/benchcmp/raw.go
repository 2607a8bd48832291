package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// The baselines: what amqp091-go does alone, written as a careful user
// would write it.

// rawChannel dials its own connection and opens one channel, in confirm
// mode when confirm is set.
func rawChannel(e *env, confirm bool) (*amqp.Connection, *amqp.Channel, error) {
	conn, err := amqp.Dial(e.url)
	if err != nil {
		return nil, nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		_ = conn.Close()
		return nil, nil, err
	}
	if confirm {
		if err := ch.Confirm(false); err != nil {
			_ = conn.Close()
			return nil, nil, err
		}
	}
	return conn, ch, nil
}

func (e *env) rawPublishing() amqp.Publishing {
	return amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: e.body}
}

// acemqPublishing is a message as acemq puts it on the wire: the envelope as
// reserved headers, mirrored in the properties. Publishing it raw shows what
// the wire format alone costs the client's library and the broker.
func (e *env) acemqPublishing() amqp.Publishing {
	now := time.Now().UTC()
	id := "01936f5e-8f3a-7c1e-9a4b-2f6d8e0c1a2b"
	origin := "benchcmp@" + hostname()
	return amqp.Publishing{
		Headers: amqp.Table{
			"x-acemq-id":         id,
			"x-acemq-type":       "payload",
			"x-acemq-version":    int32(1),
			"x-acemq-attempt":    int32(1),
			"x-acemq-first-seen": now.Format(time.RFC3339Nano),
			"x-acemq-origin":     origin,
		},
		ContentType:  "application/json",
		MessageId:    id,
		Type:         "payload",
		AppId:        origin,
		Timestamp:    now,
		DeliveryMode: amqp.Persistent,
		Body:         e.body,
	}
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return "localhost"
	}
	return h
}

// rawPipelined publishes n messages from one goroutine with up to window
// confirms in flight; window 1 is one-at-a-time confirms, window 0 no
// confirms at all. With headers it sends acemq's wire format.
func rawPipelined(window int, headers bool) scenarioFunc {
	return func(e *env, q string) (measurement, error) {
		conn, ch, err := rawChannel(e, window > 0)
		if err != nil {
			return measurement{}, err
		}
		defer conn.Close()
		ctx := context.Background()
		msg := e.rawPublishing()
		if headers {
			msg = e.acemqPublishing()
		}
		if window == 0 {
			a := e.meter.sample()
			for range e.n {
				if err := ch.PublishWithContext(ctx, "", q, true, false, msg); err != nil {
					return measurement{}, err
				}
			}
			// Without confirms the broker is done when the queue holds
			// them all.
			if err := e.waitDepth(q, e.n); err != nil {
				return measurement{}, err
			}
			return between(a, e.meter.sample(), e.n), nil
		}
		confirms := ch.NotifyPublish(make(chan amqp.Confirmation, window+1))
		slots := make(chan struct{}, window)
		done := make(chan error, 1)
		a := e.meter.sample()
		go func() {
			var err error
			for range e.n {
				if c := <-confirms; !c.Ack && err == nil {
					err = errors.New("nacked")
				}
				<-slots
			}
			done <- err
		}()
		for range e.n {
			slots <- struct{}{}
			if err := ch.PublishWithContext(ctx, "", q, true, false, msg); err != nil {
				return measurement{}, err
			}
		}
		if err := <-done; err != nil {
			return measurement{}, err
		}
		return between(a, e.meter.sample(), e.n), nil
	}
}

// rawSharedChannel publishes n messages from g goroutines on one channel,
// each waiting for its own confirm before its next publish.
func rawSharedChannel(g int) scenarioFunc {
	return func(e *env, q string) (measurement, error) {
		conn, ch, err := rawChannel(e, true)
		if err != nil {
			return measurement{}, err
		}
		defer conn.Close()
		ctx := context.Background()
		msg := e.rawPublishing()
		var next atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, g)
		a := e.meter.sample()
		for range g {
			wg.Go(func() {
				for next.Add(1) <= int64(e.n) {
					dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", q, true, false, msg)
					if err != nil {
						errs <- err
						return
					}
					if ok, err := dc.WaitContext(ctx); err != nil || !ok {
						errs <- fmt.Errorf("confirm: ok=%v err=%v", ok, err)
						return
					}
				}
			})
		}
		wg.Wait()
		b := e.meter.sample()
		select {
		case err := <-errs:
			return measurement{}, err
		default:
		}
		return between(a, b, e.n), nil
	}
}

// rawConsume consumes the n messages preloaded in q with the given
// prefetch, decoding each body as the acemq consumer does, and acks each
// one as it is handled (multiple=false), as a plain amqp091-go consumer
// does.
func rawConsume(prefetch int) scenarioFunc {
	return func(e *env, q string) (measurement, error) {
		if err := e.preload(q); err != nil {
			return measurement{}, err
		}
		conn, ch, err := rawChannel(e, false)
		if err != nil {
			return measurement{}, err
		}
		defer conn.Close()
		if err := ch.Qos(prefetch, 0, false); err != nil {
			return measurement{}, err
		}
		a := e.meter.sample()
		ds, err := ch.Consume(q, "", false, false, false, false, nil)
		if err != nil {
			return measurement{}, err
		}
		for range e.n {
			d, ok := <-ds
			if !ok {
				return measurement{}, errors.New("the delivery channel closed")
			}
			var p payload
			if err := json.Unmarshal(d.Body, &p); err != nil {
				return measurement{}, err
			}
			if err := d.Ack(false); err != nil {
				return measurement{}, err
			}
		}
		b := e.meter.sample()
		return between(a, b, e.n), nil
	}
}
