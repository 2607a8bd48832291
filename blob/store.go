package blob

import (
	"context"
	"errors"
	"io"
	"iter"
	"time"
)

// Store is where the bytes of large payloads live. Every method honours ctx:
// a cancelled ctx ends a Put or a read with the ctx's error.
//
// Implementations are safe for concurrent use, including concurrent Puts of
// the same ID (the last one to finish wins; neither is ever seen half
// written).
type Store interface {
	// Put reads r to its end, then makes the object visible under id with
	// the given expiry (the zero time: never). A failed Put leaves nothing
	// readable under id that was not there before. The returned Info holds
	// the size and SHA-256 of the bytes stored.
	Put(ctx context.Context, id string, r io.Reader, expires time.Time) (Info, error)
	// Open returns a reader of the object from offset on. It returns
	// ErrNotFound when the object is absent or expired. An offset at or past
	// the end gives a reader that returns io.EOF at once; a negative offset
	// is an error.
	Open(ctx context.Context, id string, offset int64) (io.ReadCloser, error)
	// Delete removes the object; an absent object is not an error.
	Delete(ctx context.Context, id string) error
	// Expired yields the IDs of the objects whose expiry is before the given
	// time (objects that never expire are never yielded): what Sweep may
	// delete. An error is yielded with the empty ID: one about a single
	// object (a Dir store's unreadable sidecar) is reported and the
	// sequence goes on after it; one about the listing as a whole ends it.
	Expired(ctx context.Context, before time.Time) iter.Seq2[string, error]
}

// Info describes a stored object: its ID, its size in bytes and the SHA-256
// digest of its bytes.
type Info struct {
	ID     string
	Size   int64
	SHA256 [32]byte
}

// ErrNotFound is returned by Store.Open when the object is absent or past
// its expiry.
var ErrNotFound = errors.New("blob: object not found")

// ErrCorrupt is returned when an object's bytes do not match the size or
// SHA-256 digest recorded for it, or a store finds its own records of an
// object inconsistent.
var ErrCorrupt = errors.New("blob: object corrupt")

// ErrInvalidID is wrapped by the error of a Store method given an ID it
// cannot hold: the empty ID, one too long for a Dir store's file names, or
// one that is not UTF-8 for a bucket (blob/gocloud).
// A message naming such an object goes to .dlq at once.
var ErrInvalidID = errors.New("blob: invalid object id")
