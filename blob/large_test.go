package blob_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/blob"
	"github.com/stretchr/testify/require"
)

// heapSampler samples the live heap every few milliseconds and keeps the
// peak.
type heapSampler struct {
	peak atomic.Uint64
	stop chan struct{}
	done chan struct{}
}

func sampleHeap() *heapSampler {
	h := &heapSampler{stop: make(chan struct{}), done: make(chan struct{})}
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	go func() {
		defer close(h.done)
		tick := time.NewTicker(3 * time.Millisecond)
		defer tick.Stop()
		for {
			metrics.Read(sample)
			if v := sample[0].Value.Uint64(); v > h.peak.Load() {
				h.peak.Store(v)
			}
			select {
			case <-tick.C:
			case <-h.stop:
				return
			}
		}
	}()
	return h
}

// end stops the sampler and returns the peak, in bytes.
func (h *heapSampler) end() uint64 {
	close(h.stop)
	<-h.done
	return h.peak.Load()
}

// TestOneGiB: a 1 GiB payload (under -short, 128 MiB) sent and handled
// whole (its digest checked by the Reader and again here), with the
// process's heap under 64 MiB all along. Heavy at full size: run it under
// flock /tmp/acemq-heavy.lock.
func TestOneGiB(t *testing.T) {
	size := scaled[int64](t, 1<<30, 128<<20) // over twice the heap bound: a buffered payload fails it
	want := digest(t, 7, size)
	for _, pl := range []struct {
		broker broker
		store  storeKind
	}{{brokers[1], stores[1]}, {brokers[0], stores[3]}} {
		t.Run(pl.broker.name+"/"+pl.store.name, func(t *testing.T) {
			url, s := pl.broker.url(t), pl.store.new(t)
			c := connect(t, url)
			q := queue(t, url, "blob-gib")
			type result struct {
				n      int64
				digest string
				err    error
			}
			out := make(chan result, 1)
			run(t, c, q, blob.Handle(s, func(_ context.Context, _ *acemq.Message[meta], body *blob.Reader) acemq.Ack {
				n, d, err := readAll(body)
				out <- result{n, d, err}
				return acemq.Done()
			}, blob.DeleteOnDone()))
			runtime.GC()
			heap := sampleHeap()
			start := time.Now()
			ref, err := blob.NewPublisher[meta](c, s, "", q).Send(t.Context(), meta{Seed: 7}, payload(7, size))
			require.NoError(t, err)
			sent := time.Since(start)
			var r result
			select {
			case r = <-out:
			case <-time.After(5 * time.Minute):
				t.Fatal("not handled within 5 minutes")
			}
			peak := heap.end()
			t.Logf("%d MiB: sent in %s, handled %s later; peak heap %.1f MiB", size>>20, sent.Round(time.Millisecond), (time.Since(start) - sent).Round(time.Millisecond), float64(peak)/(1<<20))
			require.ErrorIs(t, r.err, io.EOF)
			require.Equal(t, size, r.n)
			require.Equal(t, want, r.digest)
			require.Equal(t, want, ref.SHA256)
			require.Less(t, peak, uint64(64<<20), "peak heap")
		})
	}
}

// The child process of TestKilledMidRead: a consumer that reads half of
// the payload, says so on stdout and waits to be killed.
const childEnv = "ACEMQ_BLOB_KILL_CHILD"

func TestKilledMidReadChild(t *testing.T) {
	if os.Getenv(childEnv) == "" {
		t.Skip("the child process of TestKilledMidRead")
	}
	url, q, dir := os.Getenv("CHILD_URL"), os.Getenv("CHILD_QUEUE"), os.Getenv("CHILD_DIR")
	s, err := blob.Dir(dir)
	require.NoError(t, err)
	c, err := acemq.Connect(t.Context(), url, acemq.WithLogger(quiet))
	require.NoError(t, err)
	cons, err := acemq.NewConsumer(c, q, blob.Handle(s, func(_ context.Context, _ *acemq.Message[meta], body *blob.Reader) acemq.Ack {
		if _, err := io.CopyN(io.Discard, body, body.Size()/2); err != nil {
			return acemq.Retry(err)
		}
		fmt.Println("mid-read")
		select {} // until SIGKILL
	}), acemq.WithConsumerRetry(fastRetry))
	require.NoError(t, err)
	require.NoError(t, cons.Run(context.Background()))
}

// TestKilledMidRead: a consumer process SIGKILLed in the middle of reading
// a payload loses nothing: the message comes back and a new consumer
// handles it whole. The payload is 64 MiB (under -short, 8 MiB). Heavy
// at full size: run it under flock /tmp/acemq-heavy.lock.
func TestKilledMidRead(t *testing.T) {
	url := acemqtest.RabbitMQ(t)
	dir := t.TempDir()
	s, err := blob.Dir(dir)
	require.NoError(t, err)
	st, hook := newSettlements()
	c := connect(t, url, hook)
	q := queue(t, url, "blob-kill")
	require.NoError(t, c.Declare(t.Context(), acemq.Queue{Name: q}))
	size := scaled[int64](t, 64<<20, 8<<20)
	ref, err := blob.NewPublisher[meta](c, s, "", q).Send(t.Context(), meta{Seed: 11}, payload(11, size))
	require.NoError(t, err)

	child := exec.Command(os.Args[0], "-test.run=^TestKilledMidReadChild$", "-test.count=1")
	child.Env = append(os.Environ(), childEnv+"=1", "CHILD_URL="+url, "CHILD_QUEUE="+q, "CHILD_DIR="+dir)
	stdout, err := child.StdoutPipe()
	require.NoError(t, err)
	child.Stderr = os.Stderr
	require.NoError(t, child.Start())
	midRead := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == "mid-read" {
				midRead <- true
			}
		}
		close(midRead)
	}()
	select {
	case ok := <-midRead:
		require.True(t, ok, "the child ended before it read half")
	case <-time.After(time.Minute):
		_ = child.Process.Kill()
		t.Fatal("the child did not reach the middle of the payload")
	}
	require.NoError(t, child.Process.Signal(syscall.SIGKILL))
	err = child.Wait()
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "%v", err)
	for range midRead {
	}

	type result struct {
		n           int64
		digest      string
		err         error
		redelivered bool
	}
	out := make(chan result, 1)
	run(t, c, q, blob.Handle(s, func(_ context.Context, m *acemq.Message[meta], body *blob.Reader) acemq.Ack {
		n, d, err := readAll(body)
		out <- result{n, d, err, m.Redelivered}
		return acemq.Done()
	}))
	r := <-out
	require.ErrorIs(t, r.err, io.EOF)
	require.Equal(t, size, r.n)
	require.Equal(t, ref.SHA256, r.digest)
	require.True(t, r.redelivered, "the broker delivered it again")
	require.Equal(t, acemq.OutcomeAcked, st.next(t, 10*time.Second).Outcome)
}
