package storage

import (
	"errors"
	"fmt"
	"testing"
)

// bodies reads a whole queue's bodies, as a reader is given them.
func bodies(t *testing.T, s *Store, topic string, q int32) string {
	t.Helper()
	var got []string
	for _, r := range readQueue(t, s, topic, q) {
		got = append(got, string(r.Body))
	}
	return fmt.Sprint(got)
}

// one is a record of topic t, queue 0, with body and unique key body.
func one(t *testing.T, s *Store, storeTime int64, body string) []byte {
	t.Helper()
	m := keyed(body, body)
	m.QueueID = 0
	return marked(t, s, storeTime, m)
}

// An entry stored is placed and numbered but not read until dispatched:
// the queue and the commitlog's end (CommitlogOffsets) do not show it.
// Entries are dispatched oldest first, each with the records it was
// stored with; later entries are numbered past the stored ones.
func TestStoredEntriesAreReadOnlyOnceDispatched(t *testing.T) {
	s := openStore(t, testConfig(t.TempDir()))
	defer s.Close()
	const t0 = 1_800_000_000_000
	a, b := one(t, s, t0, "a"), one(t, s, t0, "bb") // sizes differ: a dispatch tells them apart
	if err := s.StoreRecords(1, a); err != nil {
		t.Fatal(err)
	}
	if err := s.StoreRecords(2, b); err != nil {
		t.Fatal(err)
	}
	if _, end := s.CommitlogOffsets(); end != 0 {
		t.Fatalf("commitlog ends at %d with nothing dispatched", end)
	}
	if _, max := s.QueueOffsets("t", 0); max != 0 {
		t.Fatalf("queue ends at %d with nothing dispatched", max)
	}
	if first, last, ok := s.StoredRaftIndexes(); !ok || first != 1 || last != 2 {
		t.Fatalf("stored %d to %d (%v), want 1 to 2", first, last, ok)
	}
	if err := s.StoreRecords(2, b); !errors.Is(err, ErrStaleRaftIndex) {
		t.Fatalf("storing 2 twice: %v", err)
	}
	if _, err := s.DispatchRecords(2, b, nil); !errors.Is(err, ErrNotStored) {
		t.Fatalf("dispatching 2 before 1: %v", err)
	}
	if _, err := s.DispatchRecords(1, b, nil); !errors.Is(err, ErrNotStored) {
		t.Fatalf("dispatching 1 with 2's records: %v", err)
	}
	res, err := s.DispatchRecords(1, a, nil)
	if err != nil || res[0].QueueOffset != 0 || res[0].Offset != 0 {
		t.Fatalf("dispatching 1: %+v, %v", res, err)
	}
	if got := bodies(t, s, "t", 0); got != "[a]" {
		t.Fatalf("after dispatching 1 the queue reads %s", got)
	}
	// Stored while 2 waits: numbered after it.
	c := one(t, s, t0, "c")
	if err := s.StoreRecords(3, c); err != nil {
		t.Fatal(err)
	}
	for i, rec := range [][]byte{b, c} {
		res, err := s.DispatchRecords(uint64(i+2), rec, nil)
		if err != nil || res[0].QueueOffset != int64(i+1) {
			t.Fatalf("dispatching %d: %+v, %v", i+2, res, err)
		}
	}
	if got := bodies(t, s, "t", 0); got != "[a bb c]" {
		t.Fatalf("the queue reads %s", got)
	}
	if _, _, ok := s.StoredRaftIndexes(); ok {
		t.Fatal("entries left stored after all were dispatched")
	}
	if _, end := s.CommitlogOffsets(); end != s.cl.writePos.Load() {
		t.Fatalf("commitlog end %d, written to %d", end, s.cl.writePos.Load())
	}
}

// A retry is decided when its entry is dispatched, against what is
// dispatched before it, and its drop is written into the stored record:
// a restart (recovery reading the commitlog again) still drops it.
func TestDispatchDropsInPlace(t *testing.T) {
	s, cfg := openDedupStore(t)
	const t0 = 1_800_000_000_000
	a, retry, b := one(t, s, t0, "a"), one(t, s, t0+1, "a"), one(t, s, t0+2, "b")
	for i, rec := range [][]byte{a, retry, b} {
		if err := s.StoreRecords(uint64(i+1), rec); err != nil {
			t.Fatal(err)
		}
	}
	first, err := s.DispatchRecords(1, a, nil)
	if err != nil {
		t.Fatal(err)
	}
	again, err := s.DispatchRecords(2, retry, nil)
	if err != nil || !again[0].Duplicate || again[0].Offset != first[0].Offset {
		t.Fatalf("the retry answered %+v, %v; stored as %+v", again, err, first[0])
	}
	refused, err := s.DispatchRecords(3, b, []bool{true})
	if err != nil || !refused[0].Dropped || refused[0].QueueOffset != 2 {
		t.Fatalf("b dropped: %+v, %v", refused, err)
	}
	if got := bodies(t, s, "t", 0); got != "[a]" {
		t.Fatalf("the queue reads %s", got)
	}
	s.crash()
	s = openStore(t, cfg)
	defer s.Close()
	if got := bodies(t, s, "t", 0); got != "[a]" {
		t.Fatalf("after a restart the queue reads %s", got)
	}
	if _, max := s.QueueOffsets("t", 0); max != 3 {
		t.Fatalf("after a restart the queue ends at %d, want 3", max)
	}
}

// Stored entries cut are gone: the next entries take their places and
// queue offsets, and a crash right after the cut does not bring them back.
// A cut never reaches a dispatched entry.
func TestCutStoredTakesBackTheTail(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.SegmentSize, cfg.MaxMessageSize = 4096, 1024 // so that the cut tail crosses into a new segment
	s := openStore(t, cfg)
	const t0 = 1_800_000_000_000
	a := one(t, s, t0, "a")
	if _, err := s.AppendRecords(1, a, nil); err != nil {
		t.Fatal(err)
	}
	_, end := s.CommitlogOffsets()
	for i := range 80 { // about 8 KB: the tail crosses into the next segment
		if err := s.StoreRecords(uint64(i+2), one(t, s, t0, fmt.Sprint("old-", i))); err != nil {
			t.Fatal(err)
		}
	}
	if s.cl.lastStart() == 0 {
		t.Fatal("the stored tail did not reach a second segment")
	}
	if err := s.cl.flush(); err != nil { // the tail is flushed, then cut
		t.Fatal(err)
	}
	if err := s.CutStored(1); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := s.StoredRaftIndexes(); ok || s.LastRaftIndex() != 1 || s.cl.writePos.Load() != end || s.cl.lastStart() != 0 {
		t.Fatalf("after the cut: last Raft index %d, written to %d (was %d), last segment at %d", s.LastRaftIndex(), s.cl.writePos.Load(), end, s.cl.lastStart())
	}
	// A new leader's entries 2 and 3 instead; the cut keeps 2.
	b, c := one(t, s, t0, "b"), one(t, s, t0, "c")
	for i, rec := range [][]byte{b, c} {
		if err := s.StoreRecords(uint64(i+2), rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.CutStored(2); err != nil {
		t.Fatal(err)
	}
	// What is written where the cut tail was is flushed again: the cut
	// set the flushed position back.
	if err := s.cl.flush(); err != nil {
		t.Fatal(err)
	}
	if flushed, written := s.cl.flushedPos.Load(), s.cl.writePos.Load(); flushed != written {
		t.Fatalf("after the cut and a flush: flushed to %d, written to %d", flushed, written)
	}
	if res, err := s.DispatchRecords(2, b, nil); err != nil || res[0].Offset != end || res[0].QueueOffset != 1 {
		t.Fatalf("dispatching b: %+v, %v", res, err)
	}
	if err := s.CutStored(0); err != nil { // nothing stored: nothing to cut
		t.Fatal(err)
	}
	if got := bodies(t, s, "t", 0); got != "[a b]" {
		t.Fatalf("the queue reads %s", got)
	}
	if err := s.StoreRecords(3, one(t, s, t0, "stored, then cut")); err != nil {
		t.Fatal(err)
	}
	if err := s.CutStored(2); err != nil {
		t.Fatal(err)
	}
	s.crash()
	s = openStore(t, cfg)
	defer s.Close()
	if got := bodies(t, s, "t", 0); got != "[a b]" || s.LastRaftIndex() != 2 {
		t.Fatalf("after a crash the queue reads %s, last Raft index %d", got, s.LastRaftIndex())
	}
}

// A store that failed refuses to store, dispatch or cut.
func TestStoredEntriesOnAFailedStore(t *testing.T) {
	s := openStore(t, testConfig(t.TempDir()))
	defer s.Close()
	rec := one(t, s, 1, "a")
	if err := s.StoreRecords(1, rec); err != nil {
		t.Fatal(err)
	}
	s.fail(errors.New("injected"))
	if err := s.StoreRecords(2, rec); !errors.Is(err, ErrFailed) {
		t.Fatalf("store: %v", err)
	}
	if _, err := s.DispatchRecords(1, rec, nil); !errors.Is(err, ErrFailed) {
		t.Fatalf("dispatch: %v", err)
	}
	if err := s.CutStored(0); !errors.Is(err, ErrFailed) {
		t.Fatalf("cut: %v", err)
	}
}
