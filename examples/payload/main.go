// Command payload sends a 200 MB file through acemq as a stream, on the
// in-process broker, twice: once through the Memory store and once through
// a Dir store in a temporary directory. The handler reads the file back
// through a blob.Reader and the program checks its SHA-256 against the
// file's. Run it with
//
//	go run ./examples/payload
//
// (-size changes the size; -url amqp://... runs it on RabbitMQ).
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/blob"
)

// Report is the metadata that travels with the file.
type Report struct {
	Name string `json:"name"`
}

func main() {
	size := flag.Int64("size", 200e6, "the size of the generated file, in bytes")
	url := flag.String("url", "memory://payload", "the broker")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := run(ctx, *url, *size); err != nil {
		fmt.Fprintln(os.Stderr, "payload:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, url string, size int64) error {
	tmp, err := os.MkdirTemp("", "acemq-payload")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	file := filepath.Join(tmp, "report.bin")
	want, err := generate(file, size)
	if err != nil {
		return err
	}
	fmt.Printf("generated %s: %d bytes, SHA-256 %s...\n", filepath.Base(file), size, want[:16])

	storeDir := filepath.Join(tmp, "store")
	if err := os.Mkdir(storeDir, 0o700); err != nil {
		return err
	}
	dir, err := blob.Dir(storeDir)
	if err != nil {
		return err
	}
	for _, st := range []struct {
		name string
		s    blob.Store
	}{{"Memory", blob.Memory()}, {"Dir", dir}} {
		if err := roundTrip(ctx, url, st.name, st.s, file, want); err != nil {
			return fmt.Errorf("%s store: %w", st.name, err)
		}
	}
	return nil
}

// roundTrip sends file through s and checks what the handler read.
func roundTrip(ctx context.Context, url, name string, s blob.Store, file, want string) error {
	c, err := acemq.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer c.Close()
	queue := "payload-" + name
	got := make(chan string, 1)
	consumer, err := acemq.NewConsumer(c, queue, blob.Handle(s,
		func(_ context.Context, m *acemq.Message[Report], body *blob.Reader) acemq.Ack {
			h := sha256.New()
			if _, err := io.Copy(h, body); err != nil { // nil: size and digest matched the Ref
				return acemq.Retry(err)
			}
			got <- hex.EncodeToString(h.Sum(nil))
			return acemq.Done()
		}, blob.DeleteOnDone()))
	if err != nil {
		return err
	}
	cctx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- consumer.Run(cctx) }()
	defer func() { stop(); <-ran }()

	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	start := time.Now()
	ref, err := blob.NewPublisher[Report](c, s, "", queue).Send(ctx, Report{Name: filepath.Base(file)}, f)
	if err != nil {
		return err
	}
	var d string
	select {
	case d = <-got:
	case <-ctx.Done():
		return ctx.Err()
	}
	if d != want {
		return fmt.Errorf("the handler read SHA-256 %s, not the file's %s", d, want)
	}
	fmt.Printf("%-6s store: %d bytes sent and handled in %s, digest checked (object %s)\n",
		name, ref.Size, time.Since(start).Round(time.Millisecond), ref.ID)
	return nil
}

// generate writes size pseudo-random bytes to path and returns their
// SHA-256 in hex.
func generate(path string, size int64) (string, error) {
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	src := io.LimitReader(rand.NewChaCha8([32]byte{'p', 'a', 'y', 'l', 'o', 'a', 'd'}), size)
	if _, err := io.Copy(io.MultiWriter(f, h), src); err != nil {
		return "", errors.Join(err, f.Close())
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
