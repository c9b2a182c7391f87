package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"

	"github.com/raftmq/raftmq/cluster/pb"
)

// The move of a WAL group's Raft log into the commitlog
// (docs/commitlog-raft-log.md, step 3): its first step, the pause.
//
// A replica whose Raft log is its commitlog frames every entry in it, and
// replicas compare and copy commitlogs byte for byte by offset. So a group
// moves as one: every replica must begin framing at the same Raft index,
// after the same commitlog. The move's entry (a RaftLogMove BEGIN, which
// `raftmq group move-raft-log` proposes through the master) is that index
// X. Applying it makes the group's place RAFT_LOG_MOVING, and from it on
// no entry writes to the commitlog: a send, a schedule move, a
// transaction's end or a topic's deletion applied while moving is refused
// (WRITES_PAUSED) and writes nothing. The rule is the state machine's, so
// it holds on every replica whatever a master proposed, an entry in flight
// past X or an old master's included; so every replica's commitlog ends
// where X left it. Each replica snapshots on applying X: the conversion at
// its restart will start from a snapshot at or after X.
//
// The master refuses those writes before proposing them too, once it has
// applied X (a new master applies it in its barrier), and its schedule and
// transaction loops idle, rather than fill the log with refused entries.
// Reads, consumers' offsets and metadata go on.
//
// Not built yet: a replica's conversion when it restarts in the commitlog
// (the WAL's tail stored as entries after the commitlog's end), and the
// entry that ends the move once every voter has converted. Until then
// `raftmq group move-raft-log --abort` takes the group back to its WAL and
// resumes writes (a RaftLogMove ABORT).

// errWritesPaused answers a write while the group's Raft log moves.
var errWritesPaused = statusError(codes.Unavailable, pb.ErrorReason_WRITES_PAUSED,
	"the group's writes are paused while its Raft log moves into the commitlog (raftmq group move-raft-log; --abort resumes them)", nil)

// moving reports whether the group's writes are paused for the move.
func (f *fsm) moving() bool { return f.groupRaftLog() == pb.RaftLogPlace_RAFT_LOG_MOVING }

// writesCommitlog reports whether applying cmd may write to the
// commitlog (send entries' first bytes say so without decoding: see
// Apply).
func writesCommitlog(cmd *pb.RaftCommand) bool {
	switch cmd.Command.(type) {
	case *pb.RaftCommand_Send, *pb.RaftCommand_Transactions, *pb.RaftCommand_DeleteTopic:
		return true
	}
	return false
}

// applyMove applies a step of the move, the entry at index. A step
// proposed again after an unknown outcome applies once.
func (f *fsm) applyMove(index uint64, step pb.RaftLogMoveStep) *applyResult {
	switch step {
	case pb.RaftLogMoveStep_RAFT_LOG_MOVE_BEGIN:
		switch f.groupRaftLog() {
		case pb.RaftLogPlace_RAFT_LOG_MOVING:
			return &applyResult{}
		case pb.RaftLogPlace_RAFT_LOG_WAL:
			f.moveIndex.Store(index)
			f.groupLog.Store(int32(pb.RaftLogPlace_RAFT_LOG_MOVING))
			f.log.Info("the group's Raft log moves into the commitlog: writes paused", "move_index", index)
			if f.onMoveBegun != nil {
				f.onMoveBegun()
			}
			return &applyResult{}
		default:
			return &applyResult{err: errNotAWALGroup(f.groupRaftLog())}
		}
	case pb.RaftLogMoveStep_RAFT_LOG_MOVE_ABORT:
		if f.moving() {
			f.groupLog.Store(int32(pb.RaftLogPlace_RAFT_LOG_WAL))
			f.moveIndex.Store(0)
			f.log.Info("the move of the group's Raft log was aborted: writes resumed", "abort_index", index)
		}
		return &applyResult{}
	}
	return &applyResult{err: statusError(codes.InvalidArgument, pb.ErrorReason_ILLEGAL_ARGUMENT, fmt.Sprintf("no step %v of a Raft log's move", step), nil)}
}

func errNotAWALGroup(place pb.RaftLogPlace) error {
	return conflict(fmt.Sprintf("only a group that keeps its Raft log in a WAL moves; this one: %s", raftLogWhere(place)))
}

// writesPaused is errWritesPaused while the group moves, else nil.
func (b *Broker) writesPaused() error {
	if b.fsm.moving() {
		return errWritesPaused
	}
	return nil
}

// MoveRaftLog begins the move on the master, or aborts it, and answers
// with the group's place.
func (s *service) MoveRaftLog(ctx context.Context, req *pb.MoveRaftLogRequest) (*pb.MoveRaftLogResponse, error) {
	b := s.b
	if err := b.requireMaster(); err != nil {
		return nil, err
	}
	step := pb.RaftLogMoveStep_RAFT_LOG_MOVE_BEGIN
	switch place := b.fsm.groupRaftLog(); {
	case req.Abort:
		step = pb.RaftLogMoveStep_RAFT_LOG_MOVE_ABORT
		if place != pb.RaftLogPlace_RAFT_LOG_MOVING {
			return b.moveState(), nil
		}
	case place == pb.RaftLogPlace_RAFT_LOG_MOVING:
		return b.moveState(), nil
	case place != pb.RaftLogPlace_RAFT_LOG_WAL:
		return nil, errNotAWALGroup(place)
	}
	if _, err := b.propose(ctx, &pb.RaftCommand{Command: &pb.RaftCommand_MoveRaftLog{MoveRaftLog: &pb.RaftLogMove{Step: step}}}); err != nil {
		return nil, err
	}
	return b.moveState(), nil
}

func (b *Broker) moveState() *pb.MoveRaftLogResponse {
	return &pb.MoveRaftLogResponse{GroupRaftLog: b.fsm.groupRaftLog(), MoveIndex: b.fsm.moveIndex.Load()}
}

// moveSnapshotLoop snapshots this replica when it applies the move's
// entry (fsm.onMoveBegun signals moveBegun), so that a snapshot at or
// after X exists without waiting for SnapshotThreshold entries, which a
// paused group may never reach.
func (b *Broker) moveSnapshotLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-b.moveBegun:
		}
		b.snapshotForMove(ctx)
	}
}

// moveSnapshotTries bounds snapshotForMove's attempts, 100 ms apart: a
// snapshot already under way (Raft's own) fails the request.
const moveSnapshotTries = 20

func (b *Broker) snapshotForMove(ctx context.Context) {
	var err error
	for range moveSnapshotTries {
		if !b.calls.begin() {
			return
		}
		err = b.node.Raft.Snapshot().Error()
		b.calls.end()
		if err == nil || errors.Is(err, raft.ErrNothingNewToSnapshot) {
			b.log.Info("snapshot taken for the Raft log's move", "move_index", b.fsm.moveIndex.Load())
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
	b.log.Warn("no snapshot for the Raft log's move: Raft takes one at its threshold", "err", err)
}
