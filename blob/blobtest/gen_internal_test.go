package blobtest

import (
	"bytes"
	"io"
	"testing"
)

// The generator's bytes must not depend on how they are read: the large
// subtest reads its tail through reads of other sizes than the Put's.
func TestGenReaderIndependentOfReadSizes(t *testing.T) {
	const n = 1000
	want := make([]byte, n)
	if _, err := io.ReadFull(&genReader{state: 5, left: n}, want); err != nil {
		t.Fatal(err)
	}
	for _, step := range []int{1, 3, 7, 8, 13, 999} {
		g := &genReader{state: 5, left: n}
		var got bytes.Buffer
		buf := make([]byte, step)
		for {
			k, err := g.Read(buf)
			got.Write(buf[:k])
			if err == io.EOF {
				break
			}
		}
		if !bytes.Equal(got.Bytes(), want) {
			t.Fatalf("reads of %d bytes gave other bytes than one read", step)
		}
	}
}
