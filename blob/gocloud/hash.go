package gocloud

import (
	"crypto/sha256"
	"hash"

	"github.com/acemq/acemq/blob"
)

// hasher sums what Put writes, for the Info it returns.
type hasher struct{ hash.Hash }

func newHasher() hasher { return hasher{sha256.New()} }

func (h hasher) info(id string, n int64) blob.Info {
	info := blob.Info{ID: id, Size: n}
	h.Sum(info.SHA256[:0])
	return info
}
