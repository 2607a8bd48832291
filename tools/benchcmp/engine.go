package main

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/transport/rabbitmq"
)

// The acemq side: the engine over the RabbitMQ transport, with its
// defaults (JSON codec, no interceptors, the global meter provider).

func (e *env) connect() (*acemq.Conn, error) {
	return e.connectChannels(0)
}

// preloadConnect fills q with e.n messages, then connects; the consuming
// scenarios start with it.
func (e *env) preloadConnect(q string) (*acemq.Conn, error) {
	if err := e.preload(q); err != nil {
		return nil, err
	}
	return e.connect()
}

// connectChannels connects with the RabbitMQ transport's defaults, or,
// when channels is above zero, with that many publishing channels (the
// transport dialled here and handed to the Conn).
func (e *env) connectChannels(channels int) (*acemq.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	quiet := slog.New(slog.DiscardHandler)
	if channels == 0 {
		return acemq.Connect(ctx, e.url, acemq.WithLogger(quiet))
	}
	tr, err := rabbitmq.Dial(ctx, e.url, rabbitmq.Config{Channels: channels, Logger: quiet})
	if err != nil {
		return nil, err
	}
	return acemq.Connect(ctx, e.url, acemq.WithLogger(quiet), acemq.WithTransport(tr))
}

// acemqSend publishes n messages with Send from g goroutines (one: a loop).
func acemqSend(g int) scenarioFunc { return acemqSendOn(g, 0) }

// acemqSendOn is acemqSend with the given number of publishing channels
// (0: the default).
func acemqSendOn(g, channels int) scenarioFunc {
	return func(e *env, q string) (measurement, error) {
		c, err := e.connectChannels(channels)
		if err != nil {
			return measurement{}, err
		}
		defer c.Close()
		pub := acemq.NewPublisher[payload](c, "", q)
		ctx := context.Background()
		v := e.payload
		var next atomic.Int64
		var first firstErr
		var wg sync.WaitGroup
		a := e.meter.sample()
		for range g {
			wg.Go(func() {
				for next.Add(1) <= int64(e.n) {
					if err := pub.Send(ctx, v); err != nil {
						first.set(err)
						return
					}
				}
			})
		}
		wg.Wait()
		b := e.meter.sample()
		if err := first.err; err != nil {
			return measurement{}, err
		}
		return between(a, b, e.n), nil
	}
}

// acemqSendAll publishes the n messages with one SendAll.
func acemqSendAll(e *env, q string) (measurement, error) { return acemqSendAllOn(0)(e, q) }

// acemqSendAllOn is acemqSendAll with the given number of publishing
// channels (0: the default).
func acemqSendAllOn(channels int) scenarioFunc {
	return func(e *env, q string) (measurement, error) { return e.sendAll(q, channels) }
}

func (e *env) sendAll(q string, channels int) (measurement, error) {
	c, err := e.connectChannels(channels)
	if err != nil {
		return measurement{}, err
	}
	defer c.Close()
	pub := acemq.NewPublisher[payload](c, "", q)
	batch := make([]payload, e.n)
	for i := range batch {
		batch[i] = e.payload
	}
	a := e.meter.sample()
	results := pub.SendAll(context.Background(), batch)
	b := e.meter.sample()
	for _, r := range results {
		if r.Err != nil {
			return measurement{}, r.Err
		}
	}
	return between(a, b, e.n), nil
}

// acemqConsume consumes the n messages preloaded in q with the given
// concurrency and prefetch (0: the default); the handler returns Done.
func acemqConsume(concurrency, prefetch int) scenarioFunc {
	return func(e *env, q string) (measurement, error) {
		c, err := e.preloadConnect(q)
		if err != nil {
			return measurement{}, err
		}
		defer c.Close()
		var handled atomic.Int64
		done := make(chan struct{})
		cons, err := acemq.NewConsumer(c, q, func(_ context.Context, _ *acemq.Message[payload]) acemq.Ack {
			if handled.Add(1) == int64(e.n) {
				close(done)
			}
			return acemq.Done()
		}, acemq.Concurrency(concurrency), prefetchOption(prefetch))
		if err != nil {
			return measurement{}, err
		}
		return e.consumeAll(cons, done, 5*time.Minute)
	}
}

// prefetchOption is Prefetch(n), or the consumer's default for 0.
func prefetchOption(n int) acemq.ConsumerOption {
	if n == 0 {
		return nil
	}
	return acemq.Prefetch(n)
}

// acemqLatency publishes e.latencyN messages at a steady rate (open loop:
// each Send starts at its scheduled time, whether or not earlier ones have
// been confirmed) to an acemq consumer, and measures from the scheduled
// send time to the handler.
func acemqLatency(rate int) scenarioFunc {
	return func(e *env, q string) (measurement, error) {
		c, err := e.connect()
		if err != nil {
			return measurement{}, err
		}
		defer c.Close()
		n := e.latencyN
		lat := make([]time.Duration, n)
		var handled atomic.Int64
		done := make(chan struct{})
		start := time.Now()
		cons, err := acemq.NewConsumer(c, q, func(_ context.Context, m *acemq.Message[payload]) acemq.Ack {
			if i := m.Payload.Seq; i >= 0 && i < int64(n) {
				lat[i] = time.Since(start) - time.Duration(m.Payload.At)
			}
			if handled.Add(1) == int64(n) {
				close(done)
			}
			return acemq.Done()
		}, acemq.Concurrency(8), acemq.Prefetch(500))
		if err != nil {
			return measurement{}, err
		}
		ctx, stop := context.WithCancel(context.Background())
		defer stop()
		runErr := make(chan error, 1)
		go func() { runErr <- cons.Run(ctx) }()
		pub := acemq.NewPublisher[payload](c, "", q)
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
				if err := pub.Send(ctx, v); err != nil {
					first.set(err)
				}
			})
		}
		wg.Wait()
		if err := first.err; err != nil {
			return measurement{}, err
		}
		select {
		case <-done:
		case <-time.After(time.Minute):
			return measurement{}, fmt.Errorf("%d of %d messages arrived", handled.Load(), n)
		}
		b := e.meter.sample()
		stop()
		if err := <-runErr; err != nil {
			return measurement{}, err
		}
		m := between(a, b, n)
		slices.Sort(lat)
		m.p50, m.p99 = lat[n*50/100], lat[n*99/100]
		return m, nil
	}
}
