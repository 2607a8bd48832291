package main

import (
	"context"
	"database/sql"
	"fmt"
	"sync/atomic"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/acemq/acemq"
)

// The batch consumer's scenarios (SPEC §17): consumers that write each
// message to PostgreSQL, one row at a time or one statement per batch, and
// a batch consumer whose handler does nothing.

// openDB opens the scenario database and checks that it answers.
func openDB(url string) (*sql.DB, error) {
	db, err := sql.Open("pgx", url)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, err
	}
	db.SetMaxOpenConns(16)
	db.SetMaxIdleConns(16)
	return db, nil
}

// withTable runs fn with a table of the run's own, dropped afterwards.
func (e *env) withTable(fn func(table string) (measurement, error)) (measurement, error) {
	table := "benchcmp_orders_" + suffix()
	ctx := context.Background()
	if _, err := e.db.ExecContext(ctx, "CREATE TABLE "+table+" (message_id text PRIMARY KEY, order_id text NOT NULL, note text NOT NULL)"); err != nil {
		return measurement{}, err
	}
	defer func() { _, _ = e.db.ExecContext(ctx, "DROP TABLE IF EXISTS "+table) }()
	m, err := fn(table)
	if err != nil {
		return m, err
	}
	var rows int
	if err := e.db.QueryRowContext(ctx, "SELECT count(*) FROM "+table).Scan(&rows); err != nil {
		return m, err
	}
	if rows != e.n {
		return m, fmt.Errorf("the table holds %d rows, want %d", rows, e.n)
	}
	return m, nil
}

// consumeAll runs cons until e.n messages were handled (done closes) and
// measures it; it gives up after limit.
func (e *env) consumeAll(cons *acemq.Consumer[payload], done <-chan struct{}, limit time.Duration) (measurement, error) {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	runErr := make(chan error, 1)
	a := e.meter.sample()
	go func() { runErr <- cons.Run(ctx) }()
	select {
	case <-done:
	case err := <-runErr:
		return measurement{}, fmt.Errorf("the consumer stopped early: %v", err)
	case <-time.After(limit):
		return measurement{}, fmt.Errorf("the consumer took over %.0f minutes", limit.Minutes())
	}
	b := e.meter.sample()
	stop()
	if err := <-runErr; err != nil {
		return measurement{}, err
	}
	return between(a, b, e.n), nil
}

// acemqRowEach consumes the preloaded messages with a plain consumer of the
// given concurrency whose handler inserts one row per message.
func acemqRowEach(concurrency int) scenarioFunc {
	return func(e *env, q string) (measurement, error) {
		c, err := e.preloadConnect(q)
		if err != nil {
			return measurement{}, err
		}
		defer c.Close()
		return e.withTable(func(table string) (measurement, error) {
			insert := "INSERT INTO " + table + " (message_id, order_id, note) VALUES ($1, $2, $3)"
			var handled atomic.Int64
			done := make(chan struct{})
			cons, err := acemq.NewConsumer(c, q, func(ctx context.Context, m *acemq.Message[payload]) acemq.Ack {
				if _, err := e.db.ExecContext(ctx, insert, m.Envelope.ID, m.Payload.OrderID, m.Payload.Note); err != nil {
					return acemq.Retry(err)
				}
				if handled.Add(1) == int64(e.n) {
					close(done)
				}
				return acemq.Done()
			}, acemq.Concurrency(concurrency), acemq.Prefetch(500))
			if err != nil {
				return measurement{}, err
			}
			return e.consumeAll(cons, done, 10*time.Minute)
		})
	}
}

// acemqBatchStatement consumes the preloaded messages with a batch consumer
// (BatchSize 100) whose handler inserts each batch in one statement.
func acemqBatchStatement(concurrency int) scenarioFunc {
	return func(e *env, q string) (measurement, error) {
		c, err := e.preloadConnect(q)
		if err != nil {
			return measurement{}, err
		}
		defer c.Close()
		return e.withTable(func(table string) (measurement, error) {
			var handled atomic.Int64
			done := make(chan struct{})
			// One statement for the whole batch: three arrays, unnested into rows.
			insert := "INSERT INTO " + table + " (message_id, order_id, note) SELECT * FROM unnest($1::text[], $2::text[], $3::text[])"
			cons, err := acemq.NewBatchConsumer(c, q, func(ctx context.Context, batch []*acemq.Message[payload]) []acemq.Ack {
				ids, orders, notes := make([]string, len(batch)), make([]string, len(batch)), make([]string, len(batch))
				for i, m := range batch {
					ids[i], orders[i], notes[i] = m.Envelope.ID, m.Payload.OrderID, m.Payload.Note
				}
				if _, err := e.db.ExecContext(ctx, insert, ids, orders, notes); err != nil {
					acks := make([]acemq.Ack, len(batch))
					for i := range acks {
						acks[i] = acemq.Retry(err)
					}
					return acks
				}
				if handled.Add(int64(len(batch))) == int64(e.n) {
					close(done)
				}
				return nil
			}, acemq.BatchSize(100), acemq.Concurrency(concurrency))
			if err != nil {
				return measurement{}, err
			}
			return e.consumeAll(cons, done, 10*time.Minute)
		})
	}
}

// acemqBatchNoop consumes the preloaded messages with a batch consumer
// (BatchSize 100) whose handler does nothing.
func acemqBatchNoop(concurrency int) scenarioFunc {
	return func(e *env, q string) (measurement, error) {
		c, err := e.preloadConnect(q)
		if err != nil {
			return measurement{}, err
		}
		defer c.Close()
		var handled atomic.Int64
		done := make(chan struct{})
		cons, err := acemq.NewBatchConsumer(c, q, func(_ context.Context, batch []*acemq.Message[payload]) []acemq.Ack {
			if handled.Add(int64(len(batch))) == int64(e.n) {
				close(done)
			}
			return nil
		}, acemq.BatchSize(100), acemq.Concurrency(concurrency))
		if err != nil {
			return measurement{}, err
		}
		return e.consumeAll(cons, done, 10*time.Minute)
	}
}
