package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/outbox"
	"github.com/stretchr/testify/require"
)

// BenchmarkRelayPostgres measures relay throughput on PostgreSQL: each
// iteration writes 5,000 rows (untimed) and times the relays publishing,
// confirming and deleting them all. Run it with
//
//	go test -run '^$' -bench RelayPostgres -benchtime 3x ./outbox/
func BenchmarkRelayPostgres(b *testing.B) {
	const rows = 5000
	brokers := []struct {
		name string
		url  func(testing.TB) string
	}{
		{name: "memory", url: func(tb testing.TB) string { return acemqtest.Memory(tb) }},
		{name: "rabbitmq", url: func(tb testing.TB) string { return acemqtest.RabbitMQ(tb) }},
	}
	for _, br := range brokers {
		for _, relays := range []int{1, 3} {
			for _, batch := range []int{256, 1000} {
				b.Run(fmt.Sprintf("%s/relays=%d/batch=%d", br.name, relays, batch), func(b *testing.B) {
					benchRelay(b, br.url(b), rows, relays, batch)
				})
			}
		}
	}
}

func benchRelay(b *testing.B, url string, rows, relays, batch int) {
	ctx := context.Background()
	db, err := sql.Open("pgx", acemqtest.Postgres(b))
	require.NoError(b, err)
	db.SetMaxOpenConns(32)
	defer db.Close()
	o, err := outbox.New(db, outbox.Postgres, outbox.Table(tableName(b, "outbox_bench")))
	require.NoError(b, err)
	defer o.Close()
	require.NoError(b, o.Migrate(ctx))
	defer func() { require.NoError(b, o.Drop(ctx)) }()

	c, err := acemq.Connect(ctx, url, acemq.WithLogger(quiet))
	require.NoError(b, err)
	defer c.Close()
	queue := acemqtest.QueueName(b, "outbox-bench")
	acemqtest.DeleteQueuesAfter(b, url, queue)
	require.NoError(b, c.Declare(ctx, acemq.Queue{Name: queue}))
	p := outbox.NewPublisher[Order](o, c, "", queue)

	var total time.Duration
	for b.Loop() {
		b.StopTimer()
		fill(b, db, p, rows)
		b.StartTimer()
		start := time.Now()
		runCtx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		for range relays {
			wg.Go(func() {
				_ = outbox.NewRelay(o, c, outbox.BatchSize(batch), outbox.Window(batch),
					outbox.PollInterval(5*time.Millisecond), outbox.WithLogger(quiet)).Run(runCtx)
			})
		}
		for {
			n, err := o.Pending(ctx)
			require.NoError(b, err)
			if n == 0 {
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
		total += time.Since(start)
		stop()
		wg.Wait()
		b.StopTimer()
		if tr, ok := c.Transport().(interface {
			DeleteQueue(context.Context, string) error
		}); ok {
			require.NoError(b, tr.DeleteQueue(ctx, queue))
			require.NoError(b, c.Declare(ctx, acemq.Queue{Name: queue}))
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(rows*b.N)/total.Seconds(), "rows/s")
}
