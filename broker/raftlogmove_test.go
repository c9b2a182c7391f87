package broker

import (
	"context"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftmq/raftmq/cluster/pb"
	"github.com/raftmq/raftmq/message"
)

// A WAL group's move into the commitlog begins with a pause: from the
// move's entry on, every replica refuses writes (the master before
// proposing them, and every state machine whatever was proposed), so
// every replica's commitlog ends where the entry left it; each replica
// snapshots at or after it; the state survives a restart and a new
// master; and an abort resumes writes. Without the state machine's rule a
// send entry proposed past the master's check is stored on every replica.
func TestAMovingGroupPausesWrites(t *testing.T) {
	g := newGroup(t, 3, nil)
	g.createTopic("mv", 2)
	acks := g.sendBodies(g.master(), "mv", 2, "before", 0, 20)
	g.quiesce()
	m := g.master()
	_, before := g.describeRunning()

	moved := g.moveRaftLog(m, false)
	if moved.GroupRaftLog != pb.RaftLogPlace_RAFT_LOG_MOVING || moved.MoveIndex == 0 {
		t.Fatalf("move answered %v", moved)
	}
	if again := g.moveRaftLog(m, false); again.MoveIndex != moved.MoveIndex {
		t.Fatalf("the move begun again answered index %d, first %d", again.MoveIndex, moved.MoveIndex)
	}
	g.waitMoving(moved.MoveIndex)
	for i := range g.cfgs {
		waitFor(t, 10*time.Second, func() bool {
			snap, _ := strconv.ParseUint(g.brokers[i].Raft().Stats()["last_snapshot_index"], 10, 64)
			return snap >= moved.MoveIndex
		})
	}

	// The master refuses writes; metadata goes on.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	wantPaused := func(what string, err error) {
		t.Helper()
		if reason, _ := ReasonOf(err); reason != pb.ErrorReason_WRITES_PAUSED || status.Code(err) != codes.Unavailable {
			t.Fatalf("%s while moving: %v, want Unavailable WRITES_PAUSED", what, err)
		}
	}
	_, err := g.client(m).SendMessage(ctx, oneMessage("mv", 0, "paused"))
	wantPaused("a send", err)
	_, err = g.client(m).DeleteTopic(ctx, &pb.DeleteTopicRequest{Name: "mv"})
	wantPaused("a topic's deletion", err)
	if _, err := g.client(m).CreateTopic(ctx, &pb.CreateTopicRequest{Topic: &pb.TopicConfig{Name: "mv2", ReadQueues: 1, WriteQueues: 1}}); err != nil {
		t.Fatalf("create a topic while moving: %v", err)
	}

	// A send entry past the master's check: every state machine refuses it.
	req := oneMessage("mv", 1, "past-the-check")
	c, err := (&service{b: g.brokers[m]}).checkSend(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	data := append([]byte{sendRecordsEntry}, c.records...)
	if err := message.SetStoreTime(data[1:], time.Now().UnixMilli()); err != nil {
		t.Fatal(err)
	}
	f := g.brokers[m].node.Apply(data, 5*time.Second)
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	if r, _ := f.Response().(*applyResult); r == nil || r.err != errWritesPaused {
		t.Fatalf("a send entry applied while moving: %+v, want errWritesPaused", r)
	}

	// A follower restarted, then a new master: still moving.
	follower := (m + 1) % 3
	g.stop(follower)
	g.start(follower)
	g.waitMoving(moved.MoveIndex)
	if err := g.brokers[m].TransferLeadership(); err != nil {
		t.Fatal(err)
	}
	m2 := g.master()
	_, err = g.client(m2).SendMessage(ctx, oneMessage("mv", 0, "paused-too"))
	wantPaused("a send to the new master", err)
	g.quiesce()
	_, during := g.describeRunning()
	for i, d := range during {
		if d.CommitlogMaxOffset != before[0].CommitlogMaxOffset {
			t.Fatalf("replica %d's commitlog ends at %d while moving, at %d before the move", i+1, d.CommitlogMaxOffset, before[0].CommitlogMaxOffset)
		}
	}
	if got := g.moveRaftLog(m, false); got != nil {
		t.Fatalf("the old master answered a move: %v", got)
	}

	// Aborted: back to the WAL, writes resumed.
	aborted := g.moveRaftLog(m2, true)
	if aborted.GroupRaftLog != pb.RaftLogPlace_RAFT_LOG_WAL || aborted.MoveIndex != 0 {
		t.Fatalf("abort answered %v", aborted)
	}
	acks = append(acks, g.sendBodies(m2, "mv", 2, "after", 0, 20)...)
	for i := range g.cfgs {
		if d := g.describe(i); d.GroupRaftLog != pb.RaftLogPlace_RAFT_LOG_WAL {
			t.Fatalf("replica %d after the abort: the group's place %v", i+1, d.GroupRaftLog)
		}
	}
	g.checkIdentical(acks)
}

// A group whose Raft log is its commitlog has nothing to move.
func TestACommitlogGroupRefusesTheMove(t *testing.T) {
	g := newGroup(t, 3, func(cfg *Config) { cfg.Store.RaftLog = true })
	g.createTopic("mv", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := g.client(g.master()).MoveRaftLog(ctx, &pb.MoveRaftLogRequest{})
	if reason, _ := ReasonOf(err); reason != pb.ErrorReason_MEMBERSHIP_CONFLICT || status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("move of a commitlog group: %v, want FailedPrecondition MEMBERSHIP_CONFLICT", err)
	}
	if d := g.describe(g.master()); d.GroupRaftLog != pb.RaftLogPlace_RAFT_LOG_COMMITLOG {
		t.Fatalf("the group's place after a refused move: %v", d.GroupRaftLog)
	}
}

// moveRaftLog calls MoveRaftLog on replica i; nil when it answers
// NOT_LEADER.
func (g *group) moveRaftLog(i int, abort bool) *pb.MoveRaftLogResponse {
	g.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := g.client(i).MoveRaftLog(ctx, &pb.MoveRaftLogRequest{Abort: abort})
	if reason, _ := ReasonOf(err); reason == pb.ErrorReason_NOT_LEADER {
		return nil
	}
	if err != nil {
		g.t.Fatalf("replica %d: move the raft log (abort %v): %v", i+1, abort, err)
	}
	return resp
}

// waitMoving waits until every replica says the group moves from index.
func (g *group) waitMoving(index uint64) {
	g.t.Helper()
	waitFor(g.t, 10*time.Second, func() bool {
		for i := range g.cfgs {
			if d := g.describe(i); d == nil || d.GroupRaftLog != pb.RaftLogPlace_RAFT_LOG_MOVING || d.RaftLogMoveIndex != index {
				return false
			}
		}
		return true
	})
}

// RocketMQ's clients retry a send answered 14 (SERVICE_NOT_AVAILABLE) on
// another queue (needRetryCode in rocketmq-client-go producer.go),
// as they should a paused group's refusal.
func TestAPausedSendIsServiceNotAvailableToRocketMQClients(t *testing.T) {
	if got := remotingCode(errWritesPaused); got != remotingServiceNotAvailable {
		t.Fatalf("a paused send answers RocketMQ's clients %d, want %d", got, remotingServiceNotAvailable)
	}
}
