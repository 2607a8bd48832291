package blob_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log"
	"os"
	"strings"
	"time"

	"github.com/acemq/acemq/blob"
)

// A payload streamed into a store and back: Put returns its size and
// digest, Open reads it from any offset, and Sweep removes it once it has
// expired.
func ExampleMemory() {
	ctx := context.Background()
	s := blob.Memory()
	info, err := s.Put(ctx, "report-2026-12", strings.NewReader("a very large report"), time.Now().Add(time.Hour))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("stored %d bytes, SHA-256 %x...\n", info.Size, info.SHA256[:4])

	rc, err := s.Open(ctx, "report-2026-12", 7)
	if err != nil {
		log.Fatal(err)
	}
	defer rc.Close()
	rest, err := io.ReadAll(rc)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("from offset 7: %q\n", rest)

	n, err := blob.Sweep(ctx, s, time.Now().Add(2*time.Hour))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("swept two hours later:", n)
	// Output:
	// stored 19 bytes, SHA-256 fe9c67ae...
	// from offset 7: "large report"
	// swept two hours later: 1
}

// A Dir store keeps each object as a plain file beside a small JSON
// sidecar holding its expiry, so a sweep reads no payload.
func ExampleDir() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "blob-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	s, err := blob.Dir(dir)
	if err != nil {
		log.Fatal(err)
	}
	body := strings.Repeat("0123456789", 300_000) // 3 MB, streamed in 1 MiB pieces
	info, err := s.Put(ctx, "invoice-42", strings.NewReader(body), time.Now().Add(7*24*time.Hour))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("digest matches:", info.SHA256 == sha256.Sum256([]byte(body)))

	entries, err := os.ReadDir(dir)
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range entries {
		fmt.Println(e.Name())
	}

	_, err = s.Open(ctx, "no-such-object", 0)
	fmt.Println(err)
	// Output:
	// digest matches: true
	// invoice-42
	// invoice-42.meta
	// blob: object not found: "no-such-object"
}
