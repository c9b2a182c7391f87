package cluster

import (
	"errors"
	"testing"

	"github.com/hashicorp/raft"
)

// Writes before Close reach the store; after it they are dropped without
// an error (raft panics on one), reads fail, and the store is closed once.
func TestClosingStableDropsWritesAfterClose(t *testing.T) {
	mem := raft.NewInmemStore()
	closes := 0
	s := newClosingStable(mem, func() error { closes++; return nil })
	if err := s.SetUint64([]byte("CurrentTerm"), 3); err != nil {
		t.Fatal(err)
	}
	if v, err := s.GetUint64([]byte("CurrentTerm")); err != nil || v != 3 {
		t.Fatalf("%d %v", v, err)
	}
	if err := s.Close(); err != nil || closes != 1 {
		t.Fatalf("close: %v, %d closes", err, closes)
	}
	if err := s.SetUint64([]byte("CurrentTerm"), 4); err != nil {
		t.Fatalf("a write after Close: %v, want it dropped quietly", err)
	}
	if err := s.Set([]byte("LastVoteCand"), []byte("x")); err != nil {
		t.Fatalf("a write after Close: %v", err)
	}
	if v, _ := mem.GetUint64([]byte("CurrentTerm")); v != 3 {
		t.Fatalf("the store took a write after Close: term %d", v)
	}
	if _, err := s.GetUint64([]byte("CurrentTerm")); !errors.Is(err, errStableClosed) {
		t.Fatalf("a read after Close: %v", err)
	}
	if err := s.Close(); err != nil || closes != 1 {
		t.Fatalf("second close: %v, %d closes", err, closes)
	}
}
