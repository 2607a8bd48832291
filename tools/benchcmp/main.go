// Command benchcmp measures acemq against raw amqp091-go on one RabbitMQ
// broker, in one process and one run, and prints each figure beside its
// baseline: messages per second (median, min and max over the runs), the
// ratio of the medians, and the CPU per message the client (this process)
// and the broker (its beam.smp process) spent.
//
// Each scenario publishes or consumes -n persistent messages of 256 bytes of
// JSON on a durable queue of its own, deleted afterwards, and runs -runs
// times; the runs are interleaved (run 1 of every scenario, then run 2...) so
// a slow spell on a shared machine lands on every scenario alike.
//
//	go run ./tools/benchcmp -url amqp://guest:guest@127.0.0.1:5672/ -n 20000 -runs 5
//
// `make bench` runs it. -only selects scenarios by a regular expression;
// -cpuprofile writes a CPU profile of the whole run.
package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"regexp"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq"
)

// payload is the message: 256 bytes once encoded with Seq and At zero.
type payload struct {
	OrderID string `json:"orderId"`
	Seq     int64  `json:"seq"`
	At      int64  `json:"at"` // when it was due to be sent, for latency
	Note    string `json:"note"`
}

const bodySize = 256

func newPayload() (payload, []byte) {
	p := payload{OrderID: "A-0000001"}
	empty, _ := json.Marshal(p)
	p.Note = strings.Repeat("x", bodySize-len(empty))
	body, _ := json.Marshal(p)
	return p, body
}

// env is what every scenario shares.
type env struct {
	url      string
	n        int // messages per run of the scenario being run
	latencyN int
	payload  payload
	body     []byte
	meter    *meter
	admin    *amqp.Connection
	db       *sql.DB // for the scenarios that write to PostgreSQL
}

// scenarioFunc runs one scenario once on the fresh queue q.
type scenarioFunc func(e *env, q string) (measurement, error)

type scenario struct {
	name     string
	baseline string // the scenario it is compared with; "" for a baseline
	run      scenarioFunc
	latency  bool // measures latency at a steady rate; -latency-n messages
	consume  bool // consumes preloaded messages; -consume-n of them
	db       bool // consumes preloaded messages into PostgreSQL; -db-n of them
	small    bool // one confirm at a time, slow: -n/10 messages
	results  []measurement
}

func scenarios(latencyRate int) []*scenario {
	lat := fmt.Sprintf("@%d msg/s", latencyRate)
	return []*scenario{
		{name: "raw confirm each (window 1)", run: rawPipelined(1, false), small: true},
		{name: "raw pipelined (window 1024)", run: rawPipelined(1024, false)},
		{name: "raw no confirms", run: rawPipelined(0, false)},
		{name: "raw pipelined, acemq properties", baseline: "raw pipelined (window 1024)", run: rawPipelined(1024, true)},
		{name: "raw 8 goroutines, shared channel", run: rawSharedChannel(8)},
		{name: "raw 64 goroutines, shared channel", run: rawSharedChannel(64)},
		{name: "acemq Send loop", baseline: "raw confirm each (window 1)", run: acemqSend(1), small: true},
		{name: "acemq SendAll", baseline: "raw pipelined (window 1024)", run: acemqSendAll},
		{name: "acemq Send 8 goroutines", baseline: "raw 8 goroutines, shared channel", run: acemqSend(8)},
		{name: "acemq Send 64 goroutines", baseline: "raw 64 goroutines, shared channel", run: acemqSend(64)},
		{name: "acemq SendAll, 2 channels", baseline: "acemq SendAll", run: acemqSendAllOn(2)},
		{name: "acemq Send 8 goroutines, 2 channels", baseline: "acemq Send 8 goroutines", run: acemqSendOn(8, 2)},
		{name: "acemq Send 64 goroutines, 2 channels", baseline: "acemq Send 64 goroutines", run: acemqSendOn(64, 2)},
		{name: "raw consumer prefetch 500", run: rawConsume(500), consume: true},
		{name: "acemq consumer 8 x prefetch 500", baseline: "raw consumer prefetch 500", run: acemqConsume(8, 500), consume: true},
		{name: "acemq consumer 8", run: acemqConsume(8, 0), consume: true},
		{name: "acemq ordered P16 x 8, 1000 keys", baseline: "acemq consumer 8", run: acemqOrdered(16, 8, 1000), consume: true},
		{name: "acemq batch consumer 8 x 100, no-op", baseline: "acemq consumer 8 x prefetch 500", run: acemqBatchNoop(8), consume: true},
		{name: "acemq consumer 8, a row each (PostgreSQL)", run: acemqRowEach(8), db: true},
		{name: "acemq batch consumer 8 x 100, a statement each (PostgreSQL)", baseline: "acemq consumer 8, a row each (PostgreSQL)", run: acemqBatchStatement(8), db: true},
		{name: "raw latency " + lat, run: rawLatency(latencyRate), latency: true},
		{name: "acemq latency " + lat, baseline: "raw latency " + lat, run: acemqLatency(latencyRate), latency: true},
	}
}

func main() {
	var (
		url        = flag.String("url", "", "the broker (default $ACEMQ_RABBITMQ_URL, else the local guest account)")
		n          = flag.Int("n", 20000, "messages per publishing scenario run (a tenth for the one-at-a-time ones)")
		consumeN   = flag.Int("consume-n", 100000, "messages per consumer scenario run")
		dbN        = flag.Int("db-n", 20000, "messages per run of the scenarios that write to PostgreSQL")
		pgURL      = flag.String("pg", "", "the PostgreSQL database (default $ACEMQ_POSTGRES_URL, else the local one acemqtest uses)")
		runs       = flag.Int("runs", 5, "runs of each scenario")
		latencyN   = flag.Int("latency-n", 5000, "messages per latency run")
		rate       = flag.Int("rate", 1000, "messages per second in the latency scenario")
		only       = flag.String("only", "", "run only the scenarios matching this regular expression (baselines are not added)")
		cpuprofile = flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	)
	flag.Parse()
	if *url == "" { // read after parsing, so -h never prints a password
		*url = envOr("ACEMQ_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/")
	}
	if *pgURL == "" {
		*pgURL = envOr("ACEMQ_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	}
	log.SetFlags(0)

	var filter *regexp.Regexp
	if *only != "" {
		filter = regexp.MustCompile(*only)
	}
	e := &env{url: *url, latencyN: *latencyN, meter: newMeter()}
	e.payload, e.body = newPayload()
	admin, err := amqp.Dial(e.url)
	if err != nil {
		log.Fatalf("benchcmp: no broker at %s: %v", acemq.Redact(e.url), err)
	}
	defer admin.Close()
	e.admin = admin
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}

	all := scenarios(*rate)
	var chosen []*scenario
	for _, s := range all {
		if filter == nil || filter.MatchString(s.name) {
			chosen = append(chosen, s)
		}
	}
	if slices.ContainsFunc(chosen, func(s *scenario) bool { return s.db }) {
		db, err := openDB(*pgURL)
		if err != nil {
			// The broker comparison goes on without them.
			fmt.Fprintf(os.Stderr, "benchcmp: no PostgreSQL (%v); the scenarios that write to it are left out\n", err)
			chosen = slices.DeleteFunc(chosen, func(s *scenario) bool { return s.db })
		} else {
			defer db.Close()
			e.db = db
		}
	}
	fmt.Printf("benchcmp: %d-byte JSON persistent messages; %d per publishing run (%d one at a time), %d per consumer run, %d per PostgreSQL run, %d at %d msg/s for latency; %d runs; GOMAXPROCS %d; broker pid %d\n",
		len(e.body), *n, max(1, *n/10), *consumeN, *dbN, *latencyN, *rate, *runs, runtime.GOMAXPROCS(0), e.meter.brokerPID)
	for r := range *runs {
		for _, s := range chosen {
			switch {
			case s.consume:
				e.n = *consumeN
			case s.db:
				e.n = *dbN
			case s.small:
				e.n = max(1, *n/10)
			default:
				e.n = *n
			}
			m, err := e.once(s)
			if err != nil {
				log.Fatalf("benchcmp: %s, run %d: %v", s.name, r+1, err)
			}
			s.results = append(s.results, m)
			fmt.Fprintf(os.Stderr, "  run %d  %-38s %8.0f msg/s  client %5.1f µs/msg  broker %5.1f µs/msg%s\n",
				r+1, s.name, m.rate(), m.clientUS, m.brokerUS, latencyNote(s, m))
		}
	}
	report(os.Stdout, all, chosen)
}

func latencyNote(s *scenario, m measurement) string {
	if !s.latency {
		return ""
	}
	return fmt.Sprintf("  p50 %v p99 %v", m.p50.Round(10*time.Microsecond), m.p99.Round(10*time.Microsecond))
}

// once runs s on a fresh queue and deletes the queue after.
func (e *env) once(s *scenario) (measurement, error) {
	q := "benchcmp-" + strings.NewReplacer(" ", "-", ",", "", "(", "", ")", "", "@", "", "/", "").Replace(s.name) + "-" + suffix()
	ch, err := e.admin.Channel()
	if err != nil {
		return measurement{}, err
	}
	defer ch.Close()
	if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
		return measurement{}, err
	}
	defer func() {
		// The queue and the ladder an acemq consumer of it declares.
		names := []string{q, acemq.DeadLetterQueue(q), acemq.ParkingQueue(q)}
		for _, d := range acemq.DefaultRetryPolicy().Delays {
			names = append(names, acemq.RetryQueue(q, d))
		}
		for _, name := range names {
			if c, err := e.admin.Channel(); err == nil {
				_, _ = c.QueueDelete(name, false, false, false) // a missing one closes c
				_ = c.Close()
			}
		}
	}()
	runtime.GC()
	time.Sleep(300 * time.Millisecond) // let the broker finish the last deletion
	return s.run(e, q)
}

// preload fills q with e.n messages published by acemq, so consumers read
// envelopes as acemq writes them.
func (e *env) preload(q string) error {
	c, err := e.connect()
	if err != nil {
		return err
	}
	defer c.Close()
	batch := make([]payload, e.n)
	for i := range batch {
		batch[i] = e.payload
	}
	for _, r := range acemq.NewPublisher[payload](c, "", q).SendAll(context.Background(), batch) {
		if r.Err != nil {
			return r.Err
		}
	}
	return e.waitDepth(q, e.n)
}

// waitDepth waits until q holds at least n ready messages.
func (e *env) waitDepth(q string, n int) error {
	ch, err := e.admin.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	deadline := time.Now().Add(time.Minute)
	for {
		st, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
		if err != nil {
			return err
		}
		if st.Messages >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("queue %s holds %d messages, want %d", q, st.Messages, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func suffix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// stats is the median, min and max of the rates and the medians of the
// rest.
type stats struct {
	med, lo, hi    float64
	client, broker float64
	p50, p99       time.Duration
	haveBroker     bool
}

func summarize(ms []measurement) stats {
	rates := make([]float64, len(ms))
	var client, broker []float64
	var p50, p99 []time.Duration
	for i, m := range ms {
		rates[i] = m.rate()
		client = append(client, m.clientUS)
		if m.brokerUS >= 0 {
			broker = append(broker, m.brokerUS)
		}
		p50, p99 = append(p50, m.p50), append(p99, m.p99)
	}
	s := stats{med: median(rates), lo: slices.Min(rates), hi: slices.Max(rates), client: median(client)}
	if len(broker) > 0 {
		s.broker, s.haveBroker = median(broker), true
	}
	s.p50, s.p99 = median(p50), median(p99)
	return s
}

func median[T float64 | time.Duration](xs []T) T {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// report prints the table: one row per scenario, the ratio of its median
// rate to its baseline's (of p50 and p99 for latency, where lower is
// better), and the ratio of its client CPU per message to the baseline's.
func report(out *os.File, all, chosen []*scenario) {
	byName := map[string]*scenario{}
	for _, s := range all {
		byName[s.name] = s
	}
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "scenario\tmsgs/s median\tmin\tmax\tratio\trun ratios\tvs\tclient µs/msg\tclient ratio\tbroker µs/msg\tp50\tp99\t")
	for _, s := range chosen {
		st := summarize(s.results)
		ratio, spread, vs, cpu := "", "", "", ""
		if b := byName[s.baseline]; b != nil && len(b.results) > 0 {
			bs := summarize(b.results)
			if s.latency {
				ratio = fmt.Sprintf("p50 %.2f× p99 %.2f×", float64(st.p50)/float64(bs.p50), float64(st.p99)/float64(bs.p99))
			} else {
				ratio = fmt.Sprintf("%.2f×", st.med/bs.med)
			}
			spread = runRatios(s, b)
			vs = b.name
			cpu = fmt.Sprintf("%.2f×", st.client/bs.client)
		}
		broker := "n/a"
		if st.haveBroker {
			broker = fmt.Sprintf("%.1f", st.broker)
		}
		p50, p99 := "", ""
		if s.latency {
			p50, p99 = st.p50.Round(10*time.Microsecond).String(), st.p99.Round(10*time.Microsecond).String()
		}
		fmt.Fprintf(w, "%s\t%.0f\t%.0f\t%.0f\t%s\t%s\t%s\t%.1f\t%s\t%s\t%s\t%s\t\n",
			s.name, st.med, st.lo, st.hi, ratio, spread, vs, st.client, cpu, broker, p50, p99)
	}
	_ = w.Flush()
}

// runRatios pairs s's runs with its baseline's of the same round (they ran
// back to back, so a slow spell hits both) and gives the median, min and max
// of the per-run ratios of the rates (of p50 for latency, lower is better).
// On a busy machine the spread says how far to trust the ratio of medians.
func runRatios(s, b *scenario) string {
	n := min(len(s.results), len(b.results))
	if n == 0 {
		return ""
	}
	rs := make([]float64, n)
	for i := range n {
		if s.latency {
			rs[i] = float64(s.results[i].p50) / float64(b.results[i].p50)
		} else {
			rs[i] = s.results[i].rate() / b.results[i].rate()
		}
	}
	return fmt.Sprintf("%.2f× (%.2f–%.2f)", median(rs), slices.Min(rs), slices.Max(rs))
}

// firstErr keeps the first error set on it, from any goroutine; read err
// once they have all ended. (atomic.Value would panic on a second error of
// another concrete type.)
type firstErr struct {
	once sync.Once
	err  error
}

func (f *firstErr) set(err error) { f.once.Do(func() { f.err = err }) }
