package blob_test

import (
	"testing"

	"github.com/acemq/acemq/blob"
	"github.com/acemq/acemq/blob/blobtest"
)

func TestMemoryConformance(t *testing.T) {
	blobtest.Run(t, func(*testing.T) blob.Store { return blob.Memory() }, blobtest.InMemory())
}

func TestDirConformance(t *testing.T) {
	blobtest.Run(t, func(t *testing.T) blob.Store {
		s, err := blob.Dir(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}
