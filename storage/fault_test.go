package storage

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/raftmq/raftmq/message"
)

// checkFailure checks that err is the store's failure: the injected errno
// on the file at path, named in the message, and that the store reports
// it through Err and Failed.
func checkFailure(t *testing.T, s *Store, err error, errno syscall.Errno, path string) {
	t.Helper()
	var pe *os.PathError
	if !errors.Is(err, errno) || !errors.As(err, &pe) || pe.Path != path || !strings.Contains(err.Error(), path) {
		t.Fatalf("error %v: want %v on %s, named in the message", err, errno, path)
	}
	if got := s.Err(); got == nil || got.Error() != err.Error() {
		t.Fatalf("Err() = %v, want %v", got, err)
	}
	select {
	case <-s.Failed():
	default:
		t.Fatal("Failed() is not closed")
	}
}

// A write that fails half way through a batch (its first segment written,
// the next refused) fails the store: it refuses every later write until it
// is reopened, and recovery cuts the partial batch, so the same Raft index
// is appended again.
func TestWriteErrorFailsStoreUntilReopened(t *testing.T) {
	cfg := testConfig(t.TempDir())
	next := filepath.Join(cfg.Dir, commitlogDir, segmentName(cfg.SegmentSize))
	var broken atomic.Bool
	broken.Store(true)
	cfg.DiskFault = func(op, path string) error {
		if broken.Load() && op == "write" && path == next {
			return syscall.EIO
		}
		return nil
	}
	s := openStore(t, cfg)
	var failedAt uint64
	var err error
	for idx := uint64(1); idx < 1000 && err == nil; idx++ {
		_, err = s.Append(idx, batchFor(idx))
		failedAt = idx
	}
	if err == nil {
		t.Fatal("the batches never reached the second segment")
	}
	checkFailure(t, s, err, syscall.EIO, next)
	if start := s.cl.writePos.Load(); start >= cfg.SegmentSize {
		t.Fatalf("the failed batch starts at %d, in the second segment: nothing of it was written", start)
	}
	broken.Store(false) // the disk is fine again: the store still refuses
	if _, err := s.Append(failedAt, batchFor(failedAt)); !errors.Is(err, ErrFailed) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("append after the failure: %v, want ErrFailed wrapping the failure", err)
	}
	if err := s.Flush(); !errors.Is(err, ErrFailed) {
		t.Fatalf("flush after the failure: %v, want ErrFailed", err)
	}
	if err := s.DeleteTopic(failedAt, "T"); !errors.Is(err, ErrFailed) {
		t.Fatalf("delete topic after the failure: %v, want ErrFailed", err)
	}
	if got := s.LastRaftIndex(); got != failedAt-1 {
		t.Fatalf("LastRaftIndex = %d after the failure at %d", got, failedAt)
	}
	s.Close()

	s = openStore(t, cfg)
	defer s.Close()
	checkHolds(t, s, failedAt-1)
	appendBatches(t, s, failedAt, failedAt+5)
	checkHolds(t, s, failedAt+5)
}

// A failed fdatasync of the background flusher fails the store (after one,
// nothing says which pages reached the disk, and a retried fdatasync may
// succeed without them): no flush or checkpoint is believed again, even
// once the disk answers again, and appends are refused.
func TestFailedFlushFailsStore(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.FlushInterval = 5 * time.Millisecond
	var broken atomic.Bool
	cfg.DiskFault = func(op, path string) error {
		if broken.Load() && op == "fdatasync" {
			return syscall.EIO
		}
		return nil
	}
	s := openStore(t, cfg)
	defer s.Close()
	appendBatches(t, s, 1, 5)
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	broken.Store(true)
	appendBatches(t, s, 6, 6)
	select {
	case <-s.Failed():
	case <-time.After(5 * time.Second):
		t.Fatal("the store did not fail on the flusher's failed fdatasync")
	}
	checkFailure(t, s, s.Err(), syscall.EIO, filepath.Join(cfg.Dir, commitlogDir, segmentName(0)))
	broken.Store(false)
	if err := s.Flush(); !errors.Is(err, ErrFailed) {
		t.Fatalf("flush once the disk answers again: %v, want ErrFailed", err)
	}
	if cp, ok, _ := readCheckpoint(cfg.Dir); !ok || cp.raftIndex != 5 {
		t.Fatalf("checkpoint at raft index %d (ok %v), want 5", cp.raftIndex, ok)
	}
	if _, err := s.Append(7, batchFor(7)); !errors.Is(err, ErrFailed) {
		t.Fatalf("append after the failure: %v, want ErrFailed", err)
	}
}

// A topic whose queues cannot be removed fails the store.
func TestDeleteTopicErrorFailsStore(t *testing.T) {
	cfg := testConfig(t.TempDir())
	gone := filepath.Join(cfg.Dir, consumeQueueDir, "gone")
	cfg.DiskFault = func(op, path string) error {
		if op == "remove" && path == gone {
			return syscall.EROFS
		}
		return nil
	}
	s := openStore(t, cfg)
	defer s.Close()
	appendBatches(t, s, 1, 3)
	if _, err := s.Append(4, []message.Message{{Topic: "gone", Body: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	err := s.DeleteTopic(5, "gone")
	if err == nil {
		t.Fatal("delete topic succeeded")
	}
	checkFailure(t, s, err, syscall.EROFS, gone)
	if _, err := s.Append(6, batchFor(6)); !errors.Is(err, ErrFailed) {
		t.Fatalf("append after the failure: %v, want ErrFailed", err)
	}
}
