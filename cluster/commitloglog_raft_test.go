package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/storage"
)

// dispatchFSM applies entries stored in the commitlog as the broker's
// state machine will: it dispatches them, and passes over what the store
// dispatched before a restart.
type dispatchFSM struct{ s *storage.Store }

func (f dispatchFSM) Apply(l *raft.Log) any {
	if l.Index <= f.s.WrittenRaftIndex() {
		return nil // dispatched before a restart
	}
	at := testRecordsAt(l.Data)
	if at == len(l.Data) {
		return f.s.DispatchEntry(l.Index)
	}
	_, err := f.s.DispatchRecords(l.Index, l.Data[at:], nil)
	return err
}

func (dispatchFSM) Snapshot() (raft.FSMSnapshot, error) { return nil, errors.New("no snapshots") }
func (dispatchFSM) Restore(io.ReadCloser) error         { return nil }

// clogMember is a Raft member whose log is its store's commitlog: a
// member as StartRaft makes one (the leader's log written beside
// replication, entry checksums, the heartbeat gate), with RaftConfig's
// EntryLog set.
type clogMember struct {
	dir, id string
	peers   map[string]string
	s       *storage.Store
	n       *RaftNode
	r       *raft.Raft // n.Raft while it runs, nil when stopped
	drain   func()
}

func (m *clogMember) start(t *testing.T) {
	t.Helper()
	var err error
	if m.s, m.n, err = startOnCommitlog(m.dir, m.id, m.peers, 1<<20, 0); err != nil {
		t.Fatal(err)
	}
	m.r, m.drain = m.n.Raft, drainLeaderChanges(m.n)
}

// startOnCommitlog starts member id of peers with its Raft log in a store
// under dir (segments of segSize) and dispatchFSM as its state machine,
// maxAppend entries an AppendEntries at most (0: the default).
func startOnCommitlog(dir, id string, peers map[string]string, segSize int64, maxAppend int) (*storage.Store, *RaftNode, error) {
	s, err := storage.Open(storage.Config{Dir: filepath.Join(dir, "store"), SegmentSize: segSize, MaxMessageSize: int(segSize / 4),
		RaftLog: true, PreallocateAhead: -1, Logger: quiet})
	if err != nil {
		return nil, nil, err
	}
	cfg := testRaftConfig(id, filepath.Join(dir, "raft"), peers, 50*time.Millisecond)
	cfg.MaxAppendEntries = maxAppend
	cfg.SnapshotThreshold, cfg.SnapshotInterval = 1<<40, time.Hour
	cfg.EntryLog, cfg.RecordsAt = storeEntries{s}, testRecordsAt
	n, err := StartRaft(cfg, dispatchFSM{s})
	if err != nil {
		s.Close()
		return nil, nil, err
	}
	return s, n, nil
}

func (m *clogMember) stop(t *testing.T) {
	t.Helper()
	if m.r == nil {
		return
	}
	if err := m.n.Close(); err != nil {
		t.Error(err)
	}
	m.drain()
	m.s.Close()
	m.r = nil
}

// clogGroup is three members on their commitlogs, with what tests ask of
// them.
type clogGroup struct {
	t           *testing.T
	members     []*clogMember
	lastCommand uint64 // the index of the last command applied
}

func startClogGroup(t *testing.T) *clogGroup {
	addrs := clustertest.FreeAddrs(t, 3)
	peers := map[string]string{}
	for i, a := range addrs {
		peers[fmt.Sprint(i+1)] = a
	}
	g := &clogGroup{t: t, members: make([]*clogMember, 3)}
	for i := range addrs {
		g.members[i] = &clogMember{dir: t.TempDir(), id: fmt.Sprint(i + 1), peers: peers}
	}
	for _, m := range g.members {
		m.start(t)
	}
	t.Cleanup(func() {
		for _, m := range g.members {
			m.stop(t)
		}
	})
	return g
}

func (g *clogGroup) leader() *clogMember {
	g.t.Helper()
	var l *clogMember
	clustertest.WaitFor(g.t, 10*time.Second, "a leader", func() bool {
		for _, m := range g.members {
			if m.r != nil && m.r.State() == raft.Leader {
				l = m
				return true
			}
		}
		return false
	})
	return l
}

// entryData is command i: every fourth without records, the others with
// records "x<i>" and "y<i>".
func entryData(t *testing.T, i int) []byte {
	if i%4 == 3 {
		head := fmt.Sprint("command ", i)
		return append([]byte{byte(len(head))}, head...)
	}
	return append([]byte{1, 'h'}, testRecords(t, fmt.Sprint("x", i), fmt.Sprint("y", i))...)
}

// propose applies commands from to to through the leader.
func (g *clogGroup) propose(from, to int) {
	g.t.Helper()
	for i := from; i < to; i++ {
		f := g.leader().r.Apply(entryData(g.t, i), 5*time.Second)
		if err := f.Error(); err != nil {
			g.t.Fatalf("entry %d: %v", i, err)
		}
		g.lastCommand = f.Index()
	}
}

// identical waits until every member has dispatched the last command,
// then compares the commitlogs up to there and the queue's length.
func (g *clogGroup) identical(wantRecords int) {
	g.t.Helper()
	clustertest.WaitFor(g.t, 10*time.Second, "every member dispatched the last command", func() bool {
		for _, m := range g.members {
			if m.s.WrittenRaftIndex() < g.lastCommand {
				return false
			}
		}
		return true
	})
	var ref []byte
	for i, m := range g.members {
		_, end := m.s.CommitlogOffsets()
		b, err := m.s.ReadCommitlog(0, end, 1<<30)
		if err != nil {
			g.t.Fatal(err)
		}
		if i > 0 && !bytes.Equal(b, ref) {
			g.t.Fatalf("member %d's commitlog (%d bytes) differs from member 0's (%d)", i, len(b), len(ref))
		}
		ref = b
		if _, max := m.s.QueueOffsets("t", 0); max != int64(wantRecords) {
			g.t.Fatalf("member %d's queue ends at %d, want %d", i, max, wantRecords)
		}
	}
}

func (g *clogGroup) followers() []*clogMember {
	l := g.leader()
	var out []*clogMember
	for _, m := range g.members {
		if m != l {
			out = append(out, m)
		}
	}
	return out
}

// A Raft group whose members' logs are their commitlogs: entries with and
// without records replicate and are dispatched on every member, the
// commitlogs are byte-identical, and a follower restarted (its store
// recovered, its entries indexed again) catches up and stays identical.
func TestRaftGroupOnCommitlogs(t *testing.T) {
	g := startClogGroup(t)
	g.propose(0, 20)
	g.identical(30) // 15 commands of 2 records
	f := g.followers()[0]
	f.stop(t)
	g.propose(20, 28) // while it is down
	f.start(t)
	g.propose(28, 32)
	g.identical(48)
}

// The case raft-wal had bugs in (#31, #33): a leader cut off stores
// entries no one else has; a new leader's log contradicts them; the old
// leader, back as a follower, has that suffix cleared from its commitlog,
// stores the new leader's entries in its place, and is restarted.
func TestRaftFollowersSuffixClearedByANewLeaderThenRestarted(t *testing.T) {
	g := startClogGroup(t)
	g.propose(0, 8)
	g.identical(12)
	old := g.leader()
	for _, f := range g.followers() {
		f.stop(t)
	}
	stored := old.s.LastRaftIndex()
	for i := 100; i < 104; i++ { // stored by the old leader alone, never committed
		if err := old.r.Apply(entryData(t, i), 100*time.Millisecond).Error(); err == nil {
			t.Fatalf("entry %d committed without followers", i)
		}
	}
	if old.s.LastRaftIndex() <= stored {
		t.Fatal("the cut-off leader stored nothing of its own")
	}
	old.stop(t)
	for _, m := range g.members {
		if m != old {
			m.start(t)
		}
	}
	g.propose(8, 16) // a new leader, a new term: entries where the old leader's were
	old.start(t)
	g.propose(16, 20)
	g.identical(30)
	old.stop(t) // and once more, after the cut
	old.start(t)
	g.propose(20, 24)
	g.identical(36)
}

// A member keeps its Raft log where it began it: one begun in its
// commitlog does not start on a WAL (it would find an empty log beside
// its term, vote and snapshots), nor one begun on a WAL in its commitlog.
func TestAMemberKeepsItsLogWhereItBeganIt(t *testing.T) {
	g := startClogGroup(t)
	g.propose(0, 4)
	m := g.members[0]
	m.stop(t)
	cfg := testRaftConfig(m.id, filepath.Join(m.dir, "raft"), m.peers, 50*time.Millisecond)
	if n, err := StartRaft(cfg, &logFSM{}); err == nil {
		n.Close()
		t.Fatal("a member whose log is in its commitlog started on a WAL")
	} else if !strings.Contains(err.Error(), "keeps its Raft log in the commitlog") {
		t.Fatalf("refused for another reason: %v", err)
	}

	w := newTestGroup(t, 1, 50*time.Millisecond, nil)
	w.leader()
	w.stop(0)
	s, err := storage.Open(storage.Config{Dir: t.TempDir(), RaftLog: true, PreallocateAhead: -1, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cfg = w.cfgs[0]
	cfg.EntryLog, cfg.RecordsAt = storeEntries{s}, testRecordsAt
	if n, err := StartRaft(cfg, dispatchFSM{s}); err == nil {
		n.Close()
		t.Fatal("a member whose log is in a WAL started on its commitlog")
	} else if !strings.Contains(err.Error(), "holds a Raft log in its WAL") {
		t.Fatalf("refused for another reason: %v", err)
	}

	// What a broker that lets the directory choose reads
	// (RaftLogInCommitlog): each member's own place, and the commitlog
	// for a new directory, but not for one holding only a bolt log
	// (raftmq before the WAL), which is refused the commitlog too.
	bolt := filepath.Join(t.TempDir(), "raft")
	if err := os.MkdirAll(bolt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bolt, boltFileName), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for dir, want := range map[string]bool{filepath.Join(m.dir, "raft"): true, w.cfgs[0].Dir: false, bolt: false, t.TempDir(): true} {
		if got, err := RaftLogInCommitlog(dir); err != nil || got != want {
			t.Errorf("RaftLogInCommitlog(%s) = %v, %v; want %v", dir, got, err, want)
		}
	}
	cfg.Dir = bolt
	if n, err := StartRaft(cfg, dispatchFSM{s}); err == nil {
		n.Close()
		t.Fatal("a member whose log is in bolt started on its commitlog")
	} else if !strings.Contains(err.Error(), "holds a Raft log in its WAL (raft.db)") {
		t.Fatalf("refused for another reason: %v", err)
	}
}
