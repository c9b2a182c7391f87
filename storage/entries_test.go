package storage

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/raftmq/raftmq/message"
)

// entryBodies decodes an entry's records into their bodies, checking that
// each carries the entry's Raft index.
func entryBodies(t *testing.T, e Entry) string {
	t.Helper()
	var got []string
	for p := 0; p < len(e.Records); {
		r, err := decodeRecord(e.Records[p:])
		if err != nil {
			t.Fatalf("entry %d, record at %d: %v", e.Index, p, err)
		}
		if r.RaftIndex != e.Index || r.SysFlag&message.SysFlagFrame != 0 {
			t.Fatalf("entry %d holds a record of entry %d (sys flag %d)", e.Index, r.RaftIndex, r.SysFlag)
		}
		got = append(got, string(r.Body))
		p += int(r.Size)
	}
	return fmt.Sprint(got)
}

// checkEntry reads entry idx back and compares its meta and bodies.
func checkEntry(t *testing.T, s *Store, idx uint64, meta, bodies string) Entry {
	t.Helper()
	e, err := s.ReadEntry(idx)
	if err != nil {
		t.Fatalf("read entry %d: %v", idx, err)
	}
	if string(e.Meta) != meta || entryBodies(t, e) != bodies {
		t.Fatalf("entry %d reads meta %q, records %s; want %q, %s", idx, e.Meta, entryBodies(t, e), meta, bodies)
	}
	return e
}

// Entries are stored as a frame and their records, read back as stored at
// once, and dispatched in order: records by DispatchRecords, an entry
// without records by DispatchEntry or on the way to a later one. Frames
// are in no queue, and a restart
// (recovery re-dispatching the commitlog) passes over them; IndexEntries
// finds the entries again.
func TestEntriesAreStoredReadBackAndDispatched(t *testing.T) {
	cfg := testConfig(t.TempDir())
	s := openStore(t, cfg)
	const t0 = 1_800_000_000_000
	ab := append(one(t, s, t0, "a"), one(t, s, t0, "b")...)
	c := one(t, s, t0, "c")
	if err := s.StoreEntries([]Entry{{Index: 1, Meta: []byte("m1"), Records: ab}, {Index: 2, Meta: []byte("m2")}, {Index: 3, Meta: []byte("m3"), Records: c}}); err != nil {
		t.Fatal(err)
	}
	if first, last, ok := s.EntryIndexes(); !ok || first != 1 || last != 3 {
		t.Fatalf("entries %d to %d (%v), want 1 to 3", first, last, ok)
	}
	e1 := checkEntry(t, s, 1, "m1", "[a b]")
	checkEntry(t, s, 2, "m2", "[]")
	checkEntry(t, s, 3, "m3", "[c]")
	if _, err := s.ReadEntry(4); !errors.Is(err, ErrEntryNotFound) {
		t.Fatalf("entry 4: %v", err)
	}
	if _, max := s.QueueOffsets("t", 0); max != 0 {
		t.Fatalf("the queue ends at %d before any dispatch", max)
	}
	if err := s.StoreEntries([]Entry{{Index: 3, Meta: []byte("again")}}); !errors.Is(err, ErrStaleRaftIndex) {
		t.Fatalf("entry 3 stored twice: %v", err)
	}
	if err := s.DispatchEntry(1); !errors.Is(err, ErrNotStored) {
		t.Fatalf("DispatchEntry of an entry with records: %v", err)
	}
	if _, err := s.DispatchRecords(3, c, nil); !errors.Is(err, ErrNotStored) {
		t.Fatalf("dispatching 3 with 1's records not dispatched: %v", err)
	}
	// The records as read back dispatch as well as the records as sent.
	if res, err := s.DispatchRecords(1, e1.Records, nil); err != nil || len(res) != 2 || res[1].QueueOffset != 1 {
		t.Fatalf("dispatch 1: %+v, %v", res, err)
	}
	if _, err := s.DispatchRecords(2, nil, nil); !errors.Is(err, ErrNotStored) {
		t.Fatalf("DispatchRecords of an entry without records: %v", err)
	}
	// Entry 2, without records, is passed on the way to 3 (Raft's own
	// entries never reach the state machine).
	if _, err := s.DispatchRecords(3, c, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := s.StoredRaftIndexes(); ok || s.WrittenRaftIndex() != 3 {
		t.Fatalf("after dispatching 3: entries still stored (%v), dispatched to %d", ok, s.WrittenRaftIndex())
	}
	if got := bodies(t, s, "t", 0); got != "[a b c]" {
		t.Fatalf("the queue reads %s", got)
	}
	if _, end := s.CommitlogOffsets(); end != s.cl.writePos.Load() {
		t.Fatalf("dispatched to %d, written to %d", end, s.cl.writePos.Load())
	}
	s.crash()
	s = openStore(t, cfg)
	defer s.Close()
	if got := bodies(t, s, "t", 0); got != "[a b c]" || s.LastRaftIndex() != 3 {
		t.Fatalf("after a restart the queue reads %s, last Raft index %d", got, s.LastRaftIndex())
	}
	if _, err := s.ReadEntry(1); !errors.Is(err, ErrEntryNotFound) {
		t.Fatalf("entry 1 before IndexEntries: %v", err)
	}
	if err := s.IndexEntries(0); err != nil {
		t.Fatal(err)
	}
	if again := checkEntry(t, s, 1, "m1", "[a b]"); !bytes.Equal(again.Records, e1.Records) {
		t.Fatal("entry 1's records read back differently after a restart")
	}
	checkEntry(t, s, 2, "m2", "[]")
	checkEntry(t, s, 3, "m3", "[c]")
	// Entries go on after the restart.
	if err := s.StoreEntries([]Entry{{Index: 4, Meta: []byte("m4")}}); err != nil {
		t.Fatal(err)
	}
	checkEntry(t, s, 4, "m4", "[]")
}

// Raft's own entries (no records) after what is dispatched count in the
// commitlog's end once applied, and a copy reads them, without their being
// dispatched; an entry with records ends the count until it is dispatched.
// A snapshot's entry ends where that count reaches.
func TestCommittedEndCountsEntriesWithoutRecords(t *testing.T) {
	s := openStore(t, testConfig(t.TempDir()))
	defer s.Close()
	const t0 = 1_800_000_000_000
	a, b := one(t, s, t0, "a"), one(t, s, t0, "b")
	err := s.StoreEntries([]Entry{{Index: 1, Meta: []byte("m1")}, {Index: 2, Meta: []byte("m2"), Records: a},
		{Index: 3, Meta: []byte("m3")}, {Index: 4, Meta: []byte("m4")}, {Index: 5, Meta: []byte("m5"), Records: b}})
	if err != nil {
		t.Fatal(err)
	}
	span := func(i uint64) entrySpan { sp, _ := s.entries.span(i); return sp }
	if got := s.CommittedEnd(5); got != span(1).end {
		t.Fatalf("before any dispatch the committed end is %d, want entry 1's end %d", got, span(1).end)
	}
	if _, err := s.EntryEnd(2); !errors.Is(err, ErrNotStored) {
		t.Fatalf("entry 2's end before its records are dispatched: %v", err)
	}
	if _, err := s.DispatchRecords(2, a, nil); err != nil {
		t.Fatal(err)
	}
	dispatched := span(2).end
	for applied, want := range map[uint64]int64{2: dispatched, 3: span(3).end, 9: span(4).end} {
		if got := s.CommittedEnd(applied); got != want {
			t.Errorf("applied %d: committed end %d, want %d", applied, got, want)
		}
	}
	if end, err := s.EntryEnd(4); err != nil || end != span(4).end || end != span(5).frame {
		t.Fatalf("entry 4 ends at %d (%v); its span ends at %d, entry 5 begins at %d", end, err, span(4).end, span(5).frame)
	}
	if _, err := s.EntryEnd(5); !errors.Is(err, ErrNotStored) {
		t.Fatalf("entry 5, with records not dispatched: %v", err)
	}
	if _, err := s.EntryEnd(6); !errors.Is(err, ErrEntryNotFound) {
		t.Fatalf("entry 6, never stored: %v", err)
	}
	// A copy to the snapshot's entry reads the frames of 3 and 4, and never
	// entry 5's records.
	if got, err := s.ReadCommitlog(dispatched, span(5).end, 1<<20); err != nil || int64(len(got)) != span(4).end-dispatched {
		t.Fatalf("read from %d: %d bytes (%v), want %d", dispatched, len(got), err, span(4).end-dispatched)
	}
	if got, err := s.ReadCommitlog(dispatched, 0, 1<<20); err != nil || len(got) != 0 {
		t.Fatalf("read to what is dispatched: %d bytes (%v)", len(got), err)
	}
	// Nothing was dispatched by counting.
	if first, last, ok := s.StoredRaftIndexes(); !ok || first != 3 || last != 5 || s.WrittenRaftIndex() != 2 {
		t.Fatalf("stored %d to %d (%v), dispatched to %d; want 3 to 5, 2", first, last, ok, s.WrittenRaftIndex())
	}
}

// At start a member with a snapshot indexes only the newest segment's
// entries: the last one is there, and the first indexed begins that
// segment. An empty store indexes nothing.
func TestIndexNewestEntriesReadsTheNewestSegment(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.SegmentSize, cfg.MaxMessageSize = 4096, 1024
	s := openStore(t, cfg)
	if err := s.IndexNewestEntries(); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := s.EntryIndexes(); ok {
		t.Fatal("an empty store indexed entries")
	}
	const t0 = 1_800_000_000_000
	for i := range 30 { // about 400 bytes an entry: 10 a segment
		r := append(append(one(t, s, t0, fmt.Sprint("x", i)), one(t, s, t0, fmt.Sprint("y", i))...), one(t, s, t0, fmt.Sprint("z", i))...)
		if err := s.StoreEntries([]Entry{{Index: uint64(i + 1), Meta: []byte(fmt.Sprint("m", i)), Records: r}}); err != nil {
			t.Fatal(err)
		}
	}
	newest := s.cl.lastStart()
	if newest < 2*cfg.SegmentSize {
		t.Fatalf("30 entries reached segment %d only", newest)
	}
	want := uint64(0)
	for i := uint64(1); i <= 30 && want == 0; i++ {
		if sp, _ := s.entries.span(i); sp.frame >= newest {
			want = i
		}
	}
	s.crash()
	s = openStore(t, cfg)
	defer s.Close()
	if err := s.IndexNewestEntries(); err != nil {
		t.Fatal(err)
	}
	if first, last, ok := s.EntryIndexes(); !ok || first != want || last != 30 {
		t.Fatalf("indexed %d to %d (%v), want %d (the newest segment's first) to 30", first, last, ok, want)
	}
	checkEntry(t, s, 30, "m29", "[x29 y29 z29]")
}

// An entry that does not fit the rest of a segment starts the next one,
// whole; cut entries leave the index; forgotten ones are not read.
func TestEntriesAcrossSegmentsCutAndForgotten(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.SegmentSize, cfg.MaxMessageSize = 4096, 1024
	s := openStore(t, cfg)
	defer s.Close()
	const t0 = 1_800_000_000_000
	var recs [][]byte
	for i := range 30 { // about 400 bytes an entry: 10 a segment
		r := append(append(one(t, s, t0, fmt.Sprint("x", i)), one(t, s, t0, fmt.Sprint("y", i))...), one(t, s, t0, fmt.Sprint("z", i))...)
		recs = append(recs, r)
		if err := s.StoreEntries([]Entry{{Index: uint64(i + 1), Meta: []byte(fmt.Sprint("m", i)), Records: r}}); err != nil {
			t.Fatal(err)
		}
	}
	if s.cl.lastStart() < 2*cfg.SegmentSize {
		t.Fatalf("30 entries reached segment %d only", s.cl.lastStart())
	}
	for i := range 30 {
		e := checkEntry(t, s, uint64(i+1), fmt.Sprint("m", i), fmt.Sprintf("[x%d y%d z%d]", i, i, i))
		sp, _ := s.entries.span(e.Index)
		if sp.frame/cfg.SegmentSize != (sp.end-1)/cfg.SegmentSize {
			t.Fatalf("entry %d spans commitlog %d to %d, across a segment end", e.Index, sp.frame, sp.end)
		}
	}
	for i := range 6 {
		if _, err := s.DispatchRecords(uint64(i+1), recs[i], nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.CutStored(8); err != nil {
		t.Fatal(err)
	}
	if _, last, _ := s.EntryIndexes(); last != 8 {
		t.Fatalf("after cutting above 8 the last entry is %d", last)
	}
	if _, err := s.ReadEntry(9); !errors.Is(err, ErrEntryNotFound) {
		t.Fatalf("entry 9 after the cut: %v", err)
	}
	if err := s.StoreEntries([]Entry{{Index: 9, Meta: []byte("new 9")}}); err != nil {
		t.Fatal(err)
	}
	checkEntry(t, s, 9, "new 9", "[]")
	checkEntry(t, s, 8, "m7", "[x7 y7 z7]")
	s.ForgetEntries(3)
	if _, err := s.ReadEntry(2); !errors.Is(err, ErrEntryNotFound) {
		t.Fatalf("entry 2 after forgetting below 3: %v", err)
	}
	if first, _, _ := s.EntryIndexes(); first != 3 {
		t.Fatalf("first entry %d after forgetting below 3", first)
	}
	checkEntry(t, s, 3, "m2", "[x2 y2 z2]")
}

// Entries that cannot be stored are refused before anything is written,
// and the store goes on: fields over MaxMessageSize, a gap in the Raft
// indexes. An append that dispatches at once waits for no stored entry.
func TestEntriesRefusedBeforeAnythingIsWritten(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.MaxMessageSize = 1024
	s := openStore(t, cfg)
	defer s.Close()
	if err := s.StoreEntries([]Entry{{Index: 1, Meta: make([]byte, 2000)}}); !errors.Is(err, ErrMessageTooLarge) {
		t.Fatalf("an entry with 2000 bytes of fields: %v", err)
	}
	if _, _, ok := s.EntryIndexes(); ok || s.LastRaftIndex() != 0 {
		t.Fatal("a refused entry was indexed")
	}
	if err := s.StoreEntries([]Entry{{Index: 1, Meta: []byte("m1")}}); err != nil {
		t.Fatal(err)
	}
	_, end := s.CommitlogOffsets()
	written := s.cl.writePos.Load()
	if err := s.StoreEntries([]Entry{{Index: 3, Meta: []byte("m3")}}); !errors.Is(err, ErrInvalidMessage) {
		t.Fatalf("entry 3 after 1: %v", err)
	}
	if s.LastRaftIndex() != 1 || s.cl.writePos.Load() != written || s.Err() != nil {
		t.Fatalf("after a refused gap: last Raft index %d, written to %d (was %d), failure %v", s.LastRaftIndex(), s.cl.writePos.Load(), written, s.Err())
	}
	if _, err := s.AppendRecords(2, one(t, s, 1, "a"), nil); !errors.Is(err, ErrNotStored) {
		t.Fatalf("an append while entry 1 waits for its dispatch: %v", err)
	}
	if err := s.DispatchEntry(1); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendRecords(2, one(t, s, 1, "a"), nil); err != nil {
		t.Fatal(err)
	}
	if _, now := s.CommitlogOffsets(); now <= end {
		t.Fatalf("commitlog end %d after the append, %d before", now, end)
	}
}

// A crash that tears the commitlog at any byte leaves whole entries only:
// recovery cuts at the last whole batch, and IndexEntries finds every
// entry before it as it was stored, frames and records alike.
func TestEntriesTornByACrashAreCutWhole(t *testing.T) {
	const t0, n = 1_800_000_000_000, 40
	build := func(dir string) (Config, []entrySpan, []Entry) {
		cfg := testConfig(dir)
		cfg.SegmentSize, cfg.MaxMessageSize = 8192, 2048
		s := openStore(t, cfg)
		var stored []Entry
		for i := range n {
			e := Entry{Index: uint64(i + 1), Meta: []byte(fmt.Sprint("meta-", i))}
			if i%3 != 1 { // every third an entry without records
				e.Records = append(one(t, s, t0, fmt.Sprint("a", i)), one(t, s, t0, fmt.Sprint("b", i))...)
			}
			if err := s.StoreEntries([]Entry{e}); err != nil {
				t.Fatal(err)
			}
			got, err := s.ReadEntry(e.Index)
			if err != nil {
				t.Fatal(err)
			}
			stored = append(stored, got)
		}
		var spans []entrySpan
		for i := range n {
			sp, _ := s.entries.span(uint64(i + 1))
			spans = append(spans, sp)
		}
		s.crash()
		return cfg, spans, stored
	}
	_, spans, _ := build(t.TempDir())
	end := spans[n-1].end
	rng := rand.New(rand.NewPCG(7, 8))
	for trial := range 12 {
		off := spans[0].frame + rng.Int64N(end-spans[0].frame+1)
		cfg, _, stored := build(t.TempDir())
		cutAt(t, cfg, off, trial%2 == 0)
		want := 0 // entries wholly before the cut
		for want < n && spans[want].end <= off {
			want++
		}
		s := openStore(t, cfg)
		if err := s.IndexEntries(0); err != nil {
			t.Fatalf("cut at %d: %v", off, err)
		}
		first, last, ok := s.EntryIndexes()
		if want == 0 && ok || want > 0 && (!ok || first != 1 || last != uint64(want)) {
			t.Fatalf("cut at %d: entries %d to %d (%v), want 1 to %d", off, first, last, ok, want)
		}
		for i := range want {
			e, err := s.ReadEntry(uint64(i + 1))
			if err != nil || !bytes.Equal(e.Meta, stored[i].Meta) || !bytes.Equal(e.Records, stored[i].Records) {
				t.Fatalf("cut at %d: entry %d read back as %q, %v", off, i+1, e.Meta, err)
			}
		}
		if s.LastRaftIndex() != uint64(want) {
			t.Fatalf("cut at %d: last Raft index %d, want %d", off, s.LastRaftIndex(), want)
		}
		s.Close()
	}
}

// storeAB stores entries from..to, each with records "a<i>" and "b<i>" on
// queue 0 of topic t, b dropped in even entries when they are dispatched.
func storeAB(t *testing.T, s *Store, from, to int) map[int][]byte {
	t.Helper()
	recs := map[int][]byte{}
	for i := from; i <= to; i++ {
		recs[i] = append(one(t, s, 1, fmt.Sprint("a", i)), one(t, s, 1, fmt.Sprint("b", i))...)
		if err := s.StoreEntries([]Entry{{Index: uint64(i), Meta: []byte(fmt.Sprint("m", i)), Records: recs[i]}}); err != nil {
			t.Fatal(err)
		}
	}
	return recs
}

func dispatchAB(t *testing.T, s *Store, recs map[int][]byte, from, to int) {
	t.Helper()
	for i := from; i <= to; i++ {
		if _, err := s.DispatchRecords(uint64(i), recs[i], []bool{false, i%2 == 0}); err != nil {
			t.Fatalf("dispatch %d: %v", i, err)
		}
	}
}

// With RaftLog, a restart dispatches what the checkpoint covers and keeps
// the entries after it stored, not dispatched, for Raft to apply again
// (their queue offsets as written) or to cut; without a checkpoint that
// matches, nothing is dispatched until DispatchStored, which dispatches
// entries as written (drops included) up to a snapshot's offset.
func TestRaftLogRecoveryKeepsTheEntriesAfterTheCheckpointStored(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.RaftLog = true
	s := openStore(t, cfg)
	recs := storeAB(t, s, 1, 5)
	dispatchAB(t, s, recs, 1, 3)
	if err := s.Flush(); err != nil { // the checkpoint: entries 1-3
		t.Fatal(err)
	}
	_, through3 := s.CommitlogOffsets()
	dispatchAB(t, s, recs, 4, 4) // dispatched after the checkpoint
	s.crash()

	s = openStore(t, cfg)
	if got := bodies(t, s, "t", 0); got != "[a1 b1 a2 a3 b3]" {
		t.Fatalf("after a restart the queue reads %s", got)
	}
	if first, last, ok := s.StoredRaftIndexes(); !ok || first != 4 || last != 5 || s.LastRaftIndex() != 5 || s.WrittenRaftIndex() != 3 {
		t.Fatalf("stored %d to %d (%v), last Raft index %d, dispatched %d; want 4 to 5, 5, 3", first, last, ok, s.LastRaftIndex(), s.WrittenRaftIndex())
	}
	checkEntry(t, s, 5, "m5", "[a5 b5]")
	dispatchAB(t, s, recs, 4, 5) // Raft applies 4 and 5 again
	if got := bodies(t, s, "t", 0); got != "[a1 b1 a2 a3 b3 a4 a5 b5]" {
		t.Fatalf("after applying 4 and 5 again the queue reads %s", got)
	}
	if _, max := s.QueueOffsets("t", 0); max != 10 {
		t.Fatalf("the queue ends at %d, want 10", max)
	}
	// A stored tail a new leader cuts after a restart.
	if err := s.Flush(); err != nil { // the checkpoint: entries 1-5
		t.Fatal(err)
	}
	storeAB(t, s, 6, 7)
	s.crash()
	s = openStore(t, cfg)
	if first, last, ok := s.StoredRaftIndexes(); !ok || first != 6 || last != 7 {
		t.Fatalf("stored %d to %d (%v), want 6 to 7", first, last, ok)
	}
	if err := s.CutStored(5); err != nil {
		t.Fatal(err)
	}
	if err := s.StoreEntries([]Entry{{Index: 6, Meta: []byte("new 6")}}); err != nil {
		t.Fatal(err)
	}
	if err := s.DispatchEntry(6); err != nil {
		t.Fatal(err)
	}
	s.crash()

	// No checkpoint: nothing dispatched at the start; a snapshot taken
	// after entry 3 dispatches 1-3 from what was written, and Raft the rest.
	if err := os.Remove(filepath.Join(cfg.Dir, checkpointFile)); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, cfg)
	defer s.Close()
	if _, max := s.QueueOffsets("t", 0); max != 0 {
		t.Fatalf("without a checkpoint the queue ends at %d before DispatchStored", max)
	}
	if first, last, _ := s.StoredRaftIndexes(); first != 1 || last != 6 {
		t.Fatalf("without a checkpoint, stored %d to %d, want 1 to 6", first, last)
	}
	if err := s.DispatchStored(through3); err != nil {
		t.Fatal(err)
	}
	if got := bodies(t, s, "t", 0); got != "[a1 b1 a2 a3 b3]" || s.WrittenRaftIndex() != 3 {
		t.Fatalf("after DispatchStored the queue reads %s, dispatched to %d", got, s.WrittenRaftIndex())
	}
	dispatchAB(t, s, recs, 4, 5)
	if err := s.DispatchEntry(6); err != nil {
		t.Fatal(err)
	}
	if got := bodies(t, s, "t", 0); got != "[a1 b1 a2 a3 b3 a4 a5 b5]" {
		t.Fatalf("the queue reads %s", got)
	}
}

// A producer's send keeps its dedup mark as stored, so that its entry,
// read back from the commitlog and applied (after a restart, or by a
// follower catching up), still finds a retry.
func TestEntriesReadBackAreStillDeduplicated(t *testing.T) {
	s, _ := openDedupStore(t)
	defer s.Close()
	const t0 = 1_800_000_000_000
	if err := s.StoreEntries([]Entry{{Index: 1, Meta: []byte("m1"), Records: one(t, s, t0, "a")}, {Index: 2, Meta: []byte("m2"), Records: one(t, s, t0+1, "a")}}); err != nil {
		t.Fatal(err)
	}
	var res []AppendResult
	for i := uint64(1); i <= 2; i++ {
		e, err := s.ReadEntry(i)
		if err != nil {
			t.Fatal(err)
		}
		if message.HeaderSysFlag(e.Records)&message.SysFlagDedup == 0 {
			t.Fatalf("entry %d's record lost its dedup mark as stored", i)
		}
		if res, err = s.DispatchRecords(i, e.Records, nil); err != nil {
			t.Fatal(err)
		}
	}
	if !res[0].Duplicate {
		t.Fatalf("the retry, applied as read back: %+v", res[0])
	}
	if got := bodies(t, s, "t", 0); got != "[a]" {
		t.Fatalf("the queue reads %s", got)
	}
}

// A store whose replica kept its Raft log in a WAL holds batches without
// frames; once its entries are framed in the commitlog after them (its
// group's move), both ways of indexing at a start find those entries,
// passing over the batches before them, and no entry below the first is
// found.
func TestEntriesAfterAWALReplicasBatchesAreIndexed(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.SegmentSize, cfg.MaxMessageSize = 4096, 1024
	s := openStore(t, cfg)
	const t0 = 1_800_000_000_000
	var want []string
	for i := 1; i <= 60; i++ { // about 100 bytes a batch: into the second segment
		body := fmt.Sprint("w", i)
		if _, err := s.AppendRecords(uint64(i), one(t, s, t0, body), nil); err != nil {
			t.Fatal(err)
		}
		want = append(want, body)
	}
	moved := s.cl.lastStart()
	if moved == 0 {
		t.Fatal("the batches did not reach a second segment")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	cfg.RaftLog = true
	s = openStore(t, cfg)
	for i := 61; i <= 63; i++ {
		body := fmt.Sprint("e", i)
		r := one(t, s, t0, body)
		if err := s.StoreEntries([]Entry{{Index: uint64(i), Meta: []byte(fmt.Sprint("m", i)), Records: r}}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.DispatchRecords(uint64(i), r, nil); err != nil {
			t.Fatal(err)
		}
		want = append(want, body)
	}
	if sp, _ := s.entries.span(61); sp.frame < moved {
		t.Fatalf("entry 61 at commitlog offset %d, before the newest segment %d: the test means the segment to begin with batches", sp.frame, moved)
	}
	s.crash()

	s = openStore(t, cfg)
	defer s.Close()
	for _, index := range []struct {
		name string
		run  func() error
	}{
		{"IndexNewestEntries", s.IndexNewestEntries},
		{"IndexEntries from the commitlog's start", func() error { return s.IndexEntries(0) }},
	} {
		s.entries.cutAfter(0)
		if err := index.run(); err != nil {
			t.Fatalf("%s: %v", index.name, err)
		}
		if first, last, ok := s.EntryIndexes(); !ok || first != 61 || last != 63 {
			t.Fatalf("%s indexed %d to %d (%v), want 61 to 63", index.name, first, last, ok)
		}
	}
	checkEntry(t, s, 62, "m62", "[e62]")
	if _, err := s.ReadEntry(60); !errors.Is(err, ErrEntryNotFound) {
		t.Fatalf("ReadEntry(60), a batch from before the entries: %v, want ErrEntryNotFound", err)
	}
	// Recovery dispatched the batches and keeps the entries after the
	// checkpoint stored, for Raft to apply again.
	if first, last, ok := s.StoredRaftIndexes(); !ok || first != 61 || last != 63 || s.WrittenRaftIndex() != 60 {
		t.Fatalf("stored %d to %d (%v), dispatched through %d; want 61 to 63, 60", first, last, ok, s.WrittenRaftIndex())
	}
	for i := uint64(61); i <= 63; i++ {
		e, err := s.ReadEntry(i)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.DispatchRecords(i, e.Records, nil); err != nil {
			t.Fatal(err)
		}
	}
	if got := bodies(t, s, "t", 0); got != fmt.Sprint(want) {
		t.Fatalf("the queue reads %s, want %s", got, fmt.Sprint(want))
	}
}
