package storage

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// A topic deleted, then sent to again, then a crash before the next
// checkpoint: recovery redispatches from the checkpoint, before the
// deletion. The deletion's frame deletes the queues again in its place,
// so the queue holds the send after it, at 0; the deleted ones stay
// deleted. (Before the frame, recovery redispatched the deleted records,
// found the later one at their queue offset, rebuilt, and cut the
// commitlog before it: an acknowledged send gone.)
func TestATopicDeletedBeforeACrashStaysDeleted(t *testing.T) {
	const t0 = 1_800_000_000_000
	cfg := testConfig(t.TempDir())
	s := openStore(t, cfg)
	if _, err := s.AppendRecords(1, one(t, s, t0, "a"), nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendRecords(2, one(t, s, t0, "b"), nil); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteTopic(3, "t"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendRecords(4, one(t, s, t0, "c"), nil); err != nil {
		t.Fatal(err)
	}
	if got := bodies(t, s, "t", 0); got != "[c]" {
		t.Fatalf("before the crash the queue reads %s", got)
	}
	_, end := s.CommitlogOffsets()
	s.crash()
	s = openStore(t, cfg)
	defer s.Close()
	if got := bodies(t, s, "t", 0); got != "[c]" {
		t.Fatalf("after the crash the queue reads %s, want [c]", got)
	}
	if _, after := s.CommitlogOffsets(); after != end || s.LastRaftIndex() != 4 {
		t.Fatalf("after the crash the commitlog ends at %d (raft index %d), before it at %d (4)", after, s.LastRaftIndex(), end)
	}
	// A rebuild of the queues from the commitlog's start deletes in the
	// same place.
	s.Close()
	if err := os.Remove(filepath.Join(cfg.Dir, checkpointFile)); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, cfg)
	defer s.Close()
	if got := bodies(t, s, "t", 0); got != "[c]" {
		t.Fatalf("after a rebuild the queue reads %s, want [c]", got)
	}
	// So does a replica that copies the commitlog.
	data, err := s.ReadCommitlog(0, 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	c := openStore(t, testConfig(t.TempDir()))
	defer c.Close()
	if err := c.AppendRaw(0, data); err != nil {
		t.Fatal(err)
	}
	if got := bodies(t, c, "t", 0); got != "[c]" {
		t.Fatalf("the copy's queue reads %s, want [c]", got)
	}
}

// With the commitlog as the Raft log, the records of a topic stored after
// the entry that deletes it are numbered from 0 at once, whether the
// deletion is dispatched before they are stored or after: two stores that
// interleave storing and dispatching differently write the same bytes and
// end with the same queue, through a restart with the deletion stored and
// not dispatched. A cut of the deletion numbers on from the old queue.
func TestAStoredDeletionNumbersTheTopicFromZero(t *testing.T) {
	const t0 = 1_800_000_000_000
	raftLog := func() Config {
		cfg := testConfig(t.TempDir())
		cfg.RaftLog = true
		return cfg
	}
	lazy, eager := openStore(t, raftLog()), openStore(t, raftLog())
	defer eager.Close()
	a, b, c := one(t, lazy, t0, "a"), one(t, lazy, t0, "b"), one(t, lazy, t0, "c")
	entries := []Entry{{Index: 1, Meta: []byte("1"), Records: a}, {Index: 2, Meta: []byte("2"), Records: b},
		{Index: 3, Meta: []byte("del"), DeletesTopic: "t"}, {Index: 4, Meta: []byte("4"), Records: c}}
	dispatch := func(s *Store, e Entry) {
		t.Helper()
		var err error
		if e.DeletesTopic != "" {
			err = s.DispatchEntry(e.Index)
		} else {
			_, err = s.DispatchRecords(e.Index, e.Records, nil)
		}
		if err != nil {
			t.Fatalf("dispatch %d: %v", e.Index, err)
		}
	}
	for _, e := range entries { // each dispatched as soon as it is stored
		if err := eager.StoreEntries([]Entry{e}); err != nil {
			t.Fatal(err)
		}
		dispatch(eager, e)
	}
	// The lazy store dispatches 1, stores the rest, and crashes.
	if err := lazy.StoreEntries(entries[:1]); err != nil {
		t.Fatal(err)
	}
	dispatch(lazy, entries[0])
	if err := lazy.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := lazy.StoreEntries(entries[1:]); err != nil {
		t.Fatal(err)
	}
	cfg := lazy.cfg
	lazy.crash()
	lazy = openStore(t, cfg)
	defer lazy.Close()
	if first, last, ok := lazy.StoredRaftIndexes(); !ok || first != 2 || last != 4 {
		t.Fatalf("after the crash entries %d to %d (%v) are stored, want 2 to 4", first, last, ok)
	}
	d := one(t, lazy, t0, "d")
	five := Entry{Index: 5, Meta: []byte("5"), Records: d}
	if err := lazy.StoreEntries([]Entry{five}); err != nil {
		t.Fatal(err)
	}
	if err := eager.StoreEntries([]Entry{five}); err != nil {
		t.Fatal(err)
	}
	dispatch(eager, five)
	for _, e := range append(entries[1:], five) {
		dispatch(lazy, e)
	}
	for name, s := range map[string]*Store{"lazy": lazy, "eager": eager} {
		if got := bodies(t, s, "t", 0); got != "[c d]" {
			t.Errorf("the %s store's queue reads %s, want [c d]", name, got)
		}
	}
	l, err := lazy.ReadCommitlog(0, 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	e, err := eager.ReadCommitlog(0, 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(l, e) {
		t.Fatalf("the commitlogs differ (%d and %d bytes)", len(l), len(e))
	}

	// A deletion cut before it is dispatched numbers nothing.
	cut := openStore(t, raftLog())
	defer cut.Close()
	if err := cut.StoreEntries(entries[:1]); err != nil {
		t.Fatal(err)
	}
	dispatch(cut, entries[0])
	if err := cut.StoreEntries(entries[1:]); err != nil {
		t.Fatal(err)
	}
	if err := cut.CutStored(2); err != nil {
		t.Fatal(err)
	}
	x := one(t, cut, t0, "x")
	if err := cut.StoreEntries([]Entry{{Index: 3, Meta: []byte("3"), Records: x}}); err != nil {
		t.Fatal(err)
	}
	dispatch(cut, entries[1])
	dispatch(cut, Entry{Index: 3, Records: x})
	if got := bodies(t, cut, "t", 0); got != "[a b x]" {
		t.Fatalf("after the deletion was cut the queue reads %s, want [a b x]", got)
	}
}
