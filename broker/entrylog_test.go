package broker

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

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
