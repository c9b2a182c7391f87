package broker

import (
	"slices"
	"testing"
)

// A message of any size up to 8 MiB gets a buffer less than twice its
// size (gRPC clears the whole buffer it hands out).
func TestBufferTiersFitMessages(t *testing.T) {
	tiers := bufferTiers()
	if !slices.IsSorted(tiers) {
		t.Fatalf("tiers %v not in order", tiers)
	}
	for size := 16<<10 + 1; size <= 8<<20; size += 4093 {
		i, _ := slices.BinarySearch(tiers, size)
		if i == len(tiers) || tiers[i] >= 2*size {
			t.Fatalf("a message of %d bytes gets a buffer of %d", size, tiers[min(i, len(tiers)-1)])
		}
	}
	pool := BufferPool()
	buf := pool.Get(70_000)
	if len(*buf) != 70_000 || cap(*buf) != 128<<10 {
		t.Fatalf("a 70 kB message got a buffer of %d, capacity %d", len(*buf), cap(*buf))
	}
	pool.Put(buf)
}
