package cluster

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

func TestEntrySound(t *testing.T) {
	data := []byte("some records")
	l := &raft.Log{Index: 7, Data: data, Extensions: entryChecksum(data)}
	if !entrySound(l) {
		t.Fatal("an entry with its own checksum is not sound")
	}
	l.Data = []byte("some recorcs")
	if entrySound(l) {
		t.Fatal("an entry whose data changed is sound")
	}
	l.Extensions[3] ^= 1
	l.Data = data
	if entrySound(l) {
		t.Fatal("an entry whose checksum changed is sound")
	}
	for _, ext := range [][]byte{nil, {9, 1, 2, 3, 4}, {1, 2}} {
		if !entrySound(&raft.Log{Data: data, Extensions: ext}) {
			t.Fatalf("an entry without a checksum (extensions %v) is not taken as it is", ext)
		}
	}
}

// damagedLogStore holds entry 2 with its data changed after its checksum.
func damagedLogStore(t *testing.T) raft.LogStore {
	t.Helper()
	s := raft.NewInmemStore()
	var logs []*raft.Log
	for i := uint64(1); i <= 3; i++ {
		data := []byte{byte(i), 'x'}
		logs = append(logs, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: data, Extensions: entryChecksum(data)})
	}
	logs[1].Data = []byte{2, 'y'}
	if err := s.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestCheckedLogNeverServesADamagedEntryWhileLeading(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"00000000000000000001-0000000000000000.wal", "00000000000000000003-0000000000000001.wal"} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c := newCheckedLog(damagedLogStore(t), dir)
	var l raft.Log

	// A follower reads it as it is: its state machine stops on it.
	if err := c.GetLog(2, &l); err != nil || l.Index != 2 {
		t.Fatalf("not leading: GetLog(2) = %v, entry %d; want the entry as it is", err, l.Index)
	}
	leading := true
	lead := func() bool { return leading }
	c.leading.Store(&lead)
	if err := c.GetLog(3, &l); err != nil || l.Index != 3 {
		t.Fatalf("leading: GetLog(3) of a sound entry = %v", err)
	}
	select {
	case <-c.damaged:
		t.Fatal("damage reported before a damaged entry was read")
	default:
	}
	if err := c.GetLog(2, &l); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("leading: GetLog(2) of a damaged entry = %v, want raft.ErrLogNotFound (a snapshot is sent instead)", err)
	}
	select {
	case <-c.damaged:
	default:
		t.Fatal("a damaged entry read while leading was not reported")
	}
	seg := filepath.Join(dir, "00000000000000000001-0000000000000000.wal")
	if err := damagedEntryError(dir, &raft.Log{Index: 3}); !strings.Contains(err.Error(), "00000000000000000003-") {
		t.Fatalf("entry 3 named as %v, want the segment starting at it", err)
	}
	var pe *os.PathError
	if !errors.As(c.err, &pe) || pe.Path != seg || !errors.Is(c.err, ErrDamagedEntry) || !strings.Contains(c.err.Error(), "entry 2 ") {
		t.Fatalf("damage reported as %v; want entry 2, in %s", c.err, seg)
	}
}

// applyRecorder is a state machine that records what it is given.
type applyRecorder struct {
	applied []uint64
	failed  []error
}

func (a *applyRecorder) Apply(l *raft.Log) any               { a.applied = append(a.applied, l.Index); return nil }
func (a *applyRecorder) Snapshot() (raft.FSMSnapshot, error) { return nil, errors.New("none") }
func (a *applyRecorder) Restore(io.ReadCloser) error         { return nil }
func (a *applyRecorder) LogFailed(err error) any             { a.failed = append(a.failed, err); return err }

func TestCheckedFSMStopsOnADamagedEntry(t *testing.T) {
	store := damagedLogStore(t)
	rec := &applyRecorder{}
	f := checkedFSM{FSM: rec, walDir: t.TempDir(), failer: rec}
	for i := uint64(1); i <= 2; i++ {
		var l raft.Log
		if err := store.GetLog(i, &l); err != nil {
			t.Fatal(err)
		}
		f.Apply(&l)
	}
	if len(rec.applied) != 1 || rec.applied[0] != 1 {
		t.Fatalf("applied %v, want only entry 1", rec.applied)
	}
	if len(rec.failed) != 1 || !errors.Is(rec.failed[0], ErrDamagedEntry) {
		t.Fatalf("told of failures %v, want one damaged entry", rec.failed)
	}
}
