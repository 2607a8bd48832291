package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
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

// acemqPublishing is a message as acemq puts it on the wire (format v2,
// first attempt, version 1): the envelope in the properties, no header.
// Publishing it raw shows what the wire format alone costs the client's
// library and the broker over a bare message.
func (e *env) acemqPublishing() amqp.Publishing {
	return amqp.Publishing{
		ContentType:  "application/json",
		MessageId:    "01936f5e-8f3a-7c1e-9a4b-2f6d8e0c1a2b",
		Type:         "payload",
		AppId:        "benchcmp@" + hostname(),
		Timestamp:    time.Now().Truncate(time.Second),
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
// confirms at all. With props it sends acemq's wire format.
func rawPipelined(window int, props bool) scenarioFunc {
	return func(e *env, q string) (measurement, error) {
		conn, ch, err := rawChannel(e, window > 0)
		if err != nil {
			return measurement{}, err
		}
		defer conn.Close()
		ctx := context.Background()
		msg := e.rawPublishing()
		if props {
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

// rawLatency publishes e.latencyN messages at a steady rate (open loop, a
// goroutine per publish waiting for its own confirm) on one channel, to a
// consumer on a second channel of the same connection with prefetch 500
// that decodes each body and acks it, and measures from each publish's
// scheduled time to its decode.
func rawLatency(rate int) scenarioFunc {
	return func(e *env, q string) (measurement, error) {
		conn, pub, err := rawChannel(e, true)
		if err != nil {
			return measurement{}, err
		}
		defer conn.Close()
		sub, err := conn.Channel()
		if err != nil {
			return measurement{}, err
		}
		if err := sub.Qos(500, 0, false); err != nil {
			return measurement{}, err
		}
		ds, err := sub.Consume(q, "", false, false, false, false, nil)
		if err != nil {
			return measurement{}, err
		}
		n := e.latencyN
		lat := make([]time.Duration, n)
		start := time.Now()
		consumed := make(chan error, 1)
		go func() {
			for range n {
				d, ok := <-ds
				if !ok {
					consumed <- errors.New("the delivery channel closed")
					return
				}
				var p payload
				if err := json.Unmarshal(d.Body, &p); err != nil {
					consumed <- err
					return
				}
				if i := p.Seq; i >= 0 && i < int64(n) {
					lat[i] = time.Since(start) - time.Duration(p.At)
				}
				if err := d.Ack(false); err != nil {
					consumed <- err
					return
				}
			}
			consumed <- nil
		}()
		ctx := context.Background()
		interval := time.Second / time.Duration(rate)
		var first firstErr
		var wg sync.WaitGroup
		a := e.meter.sample()
		base := time.Since(start)
		for i := range n {
			due := base + time.Duration(i)*interval
			if wait := due - time.Since(start); wait > 0 {
				time.Sleep(wait)
			}
			v := e.payload
			v.Seq, v.At = int64(i), int64(due)
			wg.Go(func() {
				body, _ := json.Marshal(v)
				msg := e.rawPublishing()
				msg.Body = body
				dc, err := pub.PublishWithDeferredConfirmWithContext(ctx, "", q, true, false, msg)
				if err == nil {
					if ok, werr := dc.WaitContext(ctx); werr != nil || !ok {
						err = fmt.Errorf("confirm: ok=%v err=%v", ok, werr)
					}
				}
				if err != nil {
					first.set(err)
				}
			})
		}
		wg.Wait()
		if err := first.err; err != nil {
			return measurement{}, err
		}
		select {
		case err := <-consumed:
			if err != nil {
				return measurement{}, err
			}
		case <-time.After(time.Minute):
			return measurement{}, errors.New("the messages did not all arrive within a minute")
		}
		m := between(a, e.meter.sample(), n)
		slices.Sort(lat)
		m.p50, m.p99 = lat[n*50/100], lat[n*99/100]
		return m, nil
	}
}
