package broker

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/cluster/pb"
)

// A group whose replicas keep their Raft log in their commitlogs
// (storage.Config.RaftLog): sends replicate and every replica ends with
// the same commitlog and every acked message, through snapshots, a
// follower restarted after missing entries, and the master restarted
// after a snapshot; each restart reads its entries back from its own
// commitlog, from where its snapshot says. Deleting a topic is refused in
// this mode.
func TestAGroupWhoseRaftLogIsTheCommitlog(t *testing.T) {
	g := newGroup(t, 3, func(c *Config) {
		c.Store.RaftLog = true
		c.Raft.SnapshotThreshold, c.Raft.SnapshotInterval = 16, 20*time.Millisecond
	})
	g.createTopic("orders", 4)
	m := g.master()
	acks := g.sendBodies(m, "orders", 4, "a", 0, 40)
	g.checkIdentical(acks)

	f := (m + 1) % 3
	g.stop(f)
	acks = append(acks, g.sendBodies(m, "orders", 4, "b", 0, 20)...)
	g.start(f)
	g.checkIdentical(acks)

	snapshots := filepath.Join(g.cfgs[m].Dir, "raft", "snapshots")
	clustertest.WaitFor(t, 10*time.Second, "a snapshot on the master", func() bool {
		names, _ := os.ReadDir(snapshots)
		return len(names) > 0
	})
	g.stop(m)
	g.start(m)
	acks = append(acks, g.sendBodies(g.master(), "orders", 4, "c", 0, 20)...)
	g.checkIdentical(acks)
	for i, c := range g.cfgs {
		if _, err := os.Stat(filepath.Join(c.Dir, "raft", "wal")); !os.IsNotExist(err) {
			t.Errorf("replica %d has a WAL (%v): its Raft log is not its commitlog", i+1, err)
		}
	}
	// Not yet in this mode (entrylog.go): refused with a status, not done.
	_, err := g.client(g.master()).DeleteTopic(context.Background(), &pb.DeleteTopicRequest{Name: "orders"})
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("DeleteTopic: %v, want Unimplemented", err)
	}
}

// A replica whose Raft log is its commitlog, behind what the master's log
// retains, installs a snapshot whose entry is a barrier past the last
// send (Raft's own entries never reach the state machine), copies the
// commitlog from a peer to where that entry ends, and goes on from there
// byte for byte, through a restart too (the second restart case,
// in this mode).
func TestACommitlogRaftLogCatchesUpBySnapshotAndCopy(t *testing.T) {
	g := newGroup(t, 3, func(c *Config) {
		compactedLog(c)
		c.Store.RaftLog = true
	})
	g.createTopic("far", 2)
	m := g.master()
	behind := (m + 1) % 3
	left := g.describe(behind).AppliedIndex
	g.stop(behind)
	acks := g.sendBodies(m, "far", 2, "away", 0, 120)
	r := g.brokers[m].node.Raft
	sent := r.AppliedIndex()
	if err := r.Barrier(5 * time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	if err := r.Snapshot().Error(); err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
		t.Fatal(err)
	}
	if snap, _ := strconv.ParseUint(r.Stats()["last_snapshot_index"], 10, 64); snap <= sent {
		t.Fatalf("the master's snapshot is of Raft index %d, not past the last send's %d", snap, sent)
	}
	clustertest.WaitFor(t, 10*time.Second, "the master's log drops what the stopped replica lacks", func() bool {
		return !g.brokers[m].node.LogHolds(left + 1)
	})
	g.start(behind)
	g.checkIdentical(acks)
	if n := g.brokers[behind].catchUps.Load(); n == 0 {
		t.Fatal("the replica caught up without copying the commitlog: the test did not reach the snapshot path")
	}
	acks = append(acks, g.sendBodies(g.master(), "far", 2, "after", 0, 20)...)
	g.checkIdentical(acks)

	g.stop(behind)
	g.start(behind)
	acks = append(acks, g.sendBodies(g.master(), "far", 2, "restarted", 0, 20)...)
	g.checkIdentical(acks)
}
