package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/message"
	"github.com/raftmq/raftmq/storage"
)

// storeEntries is a real store as an EntryLog (the broker's adapter does
// the same).
type storeEntries struct{ s *storage.Store }

func (a storeEntries) StoreEntries(es []LogEntry) error {
	out := make([]storage.Entry, len(es))
	for i, e := range es {
		out[i] = storage.Entry{Index: e.Index, Meta: e.Meta, Records: e.Records}
	}
	return a.s.StoreEntries(out)
}

func (a storeEntries) ReadEntry(index uint64) (LogEntry, error) {
	e, err := a.s.ReadEntry(index)
	if errors.Is(err, storage.ErrEntryNotFound) {
		return LogEntry{}, fmt.Errorf("%w: %w", ErrNoEntry, err)
	}
	return LogEntry{Index: e.Index, Meta: e.Meta, Records: e.Records}, err
}

func (a storeEntries) EntryIndexes() (uint64, uint64, bool) { return a.s.EntryIndexes() }
func (a storeEntries) CutStored(after uint64) error         { return a.s.CutStored(after) }
func (a storeEntries) ForgetEntries(index uint64)           { a.s.ForgetEntries(index) }
func (a storeEntries) IndexAtStart(snapshot bool) error {
	if snapshot {
		return a.s.IndexNewestEntries()
	}
	return a.s.IndexEntries(0)
}

// testRecordsAt: a command's first byte says how long its head is.
func testRecordsAt(data []byte) int {
	if len(data) == 0 {
		return 0
	}
	return min(1+int(data[0]), len(data))
}

func newCommitlogLog(t *testing.T) (raft.LogStore, *storage.Store) {
	t.Helper()
	s, err := storage.Open(storage.Config{Dir: t.TempDir(), SegmentSize: 1 << 20, MaxMessageSize: 64 << 10, RaftLog: true, PreallocateAhead: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return NewCommitlogLog(storeEntries{s}, testRecordsAt), s
}

func testRecords(t *testing.T, bodies ...string) []byte {
	t.Helper()
	return clustertest.Records(t, "t", bodies...)
}

// command is a command entry whose data is a head of n bytes and records.
func command(index, term uint64, head string, records []byte) *raft.Log {
	data := append(append([]byte{byte(len(head))}, head...), records...)
	return &raft.Log{Index: index, Term: term, Type: raft.LogCommand, Data: data, Extensions: entryChecksum(data),
		AppendedAt: time.Unix(1_800_000_000, 5)}
}

// bodiesOf decodes the records an entry's data ends with.
func bodiesOf(t *testing.T, records []byte) string {
	t.Helper()
	var got []string
	for p := 0; p < len(records); {
		r, err := message.Decode(records[p:])
		if err != nil {
			t.Fatalf("record at %d: %v", p, err)
		}
		got = append(got, string(r.Body))
		p += int(r.Size)
	}
	return fmt.Sprint(got)
}

// Entries come back with their fields, their head and their records (as
// stored: the store's fields filled in, so a new checksum that matches),
// entries of Raft's own types whole; a suffix deleted is cut and stored
// again differently, a prefix deleted is forgotten, and the whole log
// deleted (after a snapshot install) leaves it empty for the entries
// after the snapshot.
func TestCommitlogLogStoresReadsAndDeletes(t *testing.T) {
	logs, _ := newCommitlogLog(t)
	if first, _ := logs.FirstIndex(); first != 0 {
		t.Fatalf("an empty log's first index is %d", first)
	}
	cfg := []byte("configuration")
	in := []*raft.Log{
		{Index: 1, Term: 1, Type: raft.LogConfiguration, Data: cfg},
		command(2, 1, "hd", testRecords(t, "a", "b")),
		command(3, 1, "no records", nil),
		{Index: 4, Term: 2, Type: raft.LogNoop},
		command(5, 2, "", testRecords(t, "c")),
	}
	if err := logs.StoreLogs(in); err != nil {
		t.Fatal(err)
	}
	if first, _ := logs.FirstIndex(); first != 1 {
		t.Fatalf("first index %d", first)
	}
	if last, _ := logs.LastIndex(); last != 5 {
		t.Fatalf("last index %d", last)
	}
	for _, want := range in {
		var got raft.Log
		if err := logs.GetLog(want.Index, &got); err != nil {
			t.Fatalf("entry %d: %v", want.Index, err)
		}
		if got.Index != want.Index || got.Term != want.Term || got.Type != want.Type || !got.AppendedAt.Equal(want.AppendedAt) {
			t.Fatalf("entry %d read back as %+v", want.Index, got)
		}
		if len(got.Data) != len(want.Data) || !entrySound(&got) || (len(want.Extensions) > 0) != (len(got.Extensions) > 0) {
			t.Fatalf("entry %d: %d bytes of data (want %d), its checksum sound: %v", want.Index, len(got.Data), len(want.Data), entrySound(&got))
		}
		at := len(want.Data)
		if want.Type == raft.LogCommand {
			at = testRecordsAt(want.Data)
		}
		if !bytes.Equal(got.Data[:at], want.Data[:at]) || bodiesOf(t, got.Data[at:]) != bodiesOf(t, want.Data[at:]) {
			t.Fatalf("entry %d's data read back differently", want.Index)
		}
	}
	var none raft.Log
	if err := logs.GetLog(6, &none); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("entry 6: %v", err)
	}

	// A new leader's log contradicts 4 and 5.
	if err := logs.DeleteRange(4, 5); err != nil {
		t.Fatal(err)
	}
	if last, _ := logs.LastIndex(); last != 3 {
		t.Fatalf("after deleting 4-5 the last index is %d", last)
	}
	if err := logs.StoreLogs([]*raft.Log{command(4, 3, "new", testRecords(t, "d"))}); err != nil {
		t.Fatal(err)
	}
	var four raft.Log
	if err := logs.GetLog(4, &four); err != nil || four.Term != 3 || bodiesOf(t, four.Data[4:]) != "[d]" {
		t.Fatalf("the new entry 4: term %d, %v", four.Term, err)
	}
	// A snapshot at 2 compacts 1-2.
	if err := logs.DeleteRange(1, 2); err != nil {
		t.Fatal(err)
	}
	if first, _ := logs.FirstIndex(); first != 3 {
		t.Fatalf("after compacting 1-2 the first index is %d", first)
	}
	if err := logs.GetLog(2, &none); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("entry 2 after compaction: %v", err)
	}
	// A snapshot installed at 10: the whole log goes, and 11 follows.
	if err := logs.DeleteRange(3, 4); err != nil {
		t.Fatal(err)
	}
	if first, _ := logs.FirstIndex(); first != 0 {
		t.Fatalf("after deleting the whole log the first index is %d", first)
	}
	if err := logs.StoreLogs([]*raft.Log{command(11, 4, "after", nil)}); err != nil {
		t.Fatal(err)
	}
	if first, _ := logs.FirstIndex(); first != 11 {
		t.Fatalf("the first entry after the snapshot is %d", first)
	}
}

// A follower stores an entry as its leader sent it: the bytes proposed
// (records not filled in, the entry checksum over them) from the leader's
// memory, or, for a follower catching up, the entry as the leader's log
// gives it back (records filled in, the checksum computed again). Both
// must leave the same commitlog bytes: replicas are compared, and copied
// from, byte for byte (TestDrillFollowerStoppedAndCaughtUp with
// --raft-log commitlog found frames that differed in the checksum).
func TestAnEntryIsStoredAlikeAsProposedOrAsReadBack(t *testing.T) {
	leader, ls := newCommitlogLog(t)
	follower, fs := newCommitlogLog(t)
	proposed := command(1, 1, "head", testRecords(t, "a", "b"))
	if err := leader.StoreLogs([]*raft.Log{proposed}); err != nil {
		t.Fatal(err)
	}
	var readBack raft.Log
	if err := leader.GetLog(1, &readBack); err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(readBack.Data, proposed.Data) {
		t.Fatal("the entry read back is the one proposed: the store filled nothing in")
	}
	if len(readBack.Extensions) != 5 || !entrySound(&readBack) {
		t.Fatalf("the entry read back has no sound checksum (%x)", readBack.Extensions)
	}
	if err := follower.StoreLogs([]*raft.Log{&readBack}); err != nil {
		t.Fatal(err)
	}
	var fromFollower raft.Log
	if err := follower.GetLog(1, &fromFollower); err != nil {
		t.Fatal(err)
	}
	if len(fromFollower.Extensions) != 5 || !entrySound(&fromFollower) {
		t.Fatalf("the follower's entry has no sound checksum (%x)", fromFollower.Extensions)
	}
	for _, s := range []*storage.Store{ls, fs} {
		if _, err := s.DispatchRecords(1, proposed.Data[5:], nil); err != nil {
			t.Fatal(err)
		}
	}
	a, b := commitlogOf(t, ls), commitlogOf(t, fs)
	if !bytes.Equal(a, b) {
		t.Fatalf("the commitlogs differ: %d and %d bytes, first at %d", len(a), len(b), firstDiff(a, b))
	}
}

func commitlogOf(t *testing.T, s *storage.Store) []byte {
	t.Helper()
	_, end := s.CommitlogOffsets()
	b, err := s.ReadCommitlog(0, end, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
