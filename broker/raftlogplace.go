package broker

import (
	"fmt"

	"github.com/raftmq/raftmq/cluster/pb"
)

// A group's replicas keep their Raft logs in one place: every one in its
// commitlog (entrylog.go), or every one in a WAL beside its store. The
// commitlog as the Raft log frames every entry in it, Raft's own included;
// a WAL replica's commitlog holds the records alone. Replicas compare and
// copy commitlogs byte for byte by offset (raftmq cluster check, a
// snapshot's catch-up), so a replica in the other place would diverge
// from its first entry and nothing would say so until a check.
//
// So the group declares its place in the Raft log: every new master's
// announce names its own (leaderLoop), the first one applied declares the
// group's, and snapshots carry it. A replica that applies or restores a
// declaration other than its own place stops, as when its store fails
// (storefail.go): one ERROR line naming both places, unhealthy, out of
// the voting; it needs an empty data directory and the group's flag. The
// group goes on with the others. A group from before the declaration is
// declared by its first master after the upgrade. AddReplica asks the new
// replica for its place first and refuses another (membership.go), which
// catches the common case before the replica holds anything.
//
// Where each replica begins is its own choice (raftmq broker --raft-log;
// auto, the default, takes the place its data directory holds and the
// commitlog for an empty one): the declaration is what makes a replica's
// wrong choice loud rather than silent.

// ownRaftLog is where this replica keeps its Raft log.
func (f *fsm) ownRaftLog() pb.RaftLogPlace {
	if f.dispatchMode {
		return pb.RaftLogPlace_RAFT_LOG_COMMITLOG
	}
	return pb.RaftLogPlace_RAFT_LOG_WAL
}

// groupRaftLog is the group's place as declared so far.
func (f *fsm) groupRaftLog() pb.RaftLogPlace { return pb.RaftLogPlace(f.groupLog.Load()) }

// declareRaftLog applies the place a new master announced: the first one
// declares the group's, later ones change nothing (a master announcing
// another place stopped at the first declaration it applied). The error
// says this replica is not in the group's place.
func (f *fsm) declareRaftLog(announced pb.RaftLogPlace) error {
	if f.groupRaftLog() == pb.RaftLogPlace_RAFT_LOG_UNDECLARED {
		f.groupLog.Store(int32(announced))
	}
	return f.checkRaftLog(f.groupRaftLog())
}

// restoreRaftLog takes the group's place from a snapshot, and the index
// of the move's entry while it moves (raftlogmove.go), once the place is
// known to be this replica's.
func (f *fsm) restoreRaftLog(group pb.RaftLogPlace, moveIndex uint64) error {
	if err := f.checkRaftLog(group); err != nil {
		return err
	}
	f.moveIndex.Store(moveIndex)
	f.groupLog.Store(int32(group))
	return nil
}

// checkRaftLog is nil when group is undeclared or this replica's place.
// A group moving into the commitlog (raftlogmove.go) holds replicas in
// both places: those not moved yet, and those that moved from the move's
// entry on (raftlogconvert.go).
func (f *fsm) checkRaftLog(group pb.RaftLogPlace) error {
	own := f.ownRaftLog()
	if group == pb.RaftLogPlace_RAFT_LOG_UNDECLARED || group == own || group == pb.RaftLogPlace_RAFT_LOG_MOVING {
		return nil
	}
	return &raftLogMismatch{group: group, own: own}
}

// raftLogMismatch: the group keeps its Raft log elsewhere than this
// replica.
type raftLogMismatch struct{ group, own pb.RaftLogPlace }

func (e *raftLogMismatch) Error() string {
	return fmt.Sprintf("broker: the group keeps its Raft log in %s and this replica in %s: a group's replicas keep it in one place; start this replica again on an empty data directory with --raft-log %s",
		raftLogWhere(e.group), raftLogWhere(e.own), RaftLogFlag(e.group))
}

// raftLogPlaces names each place: its flag (raftmq broker --raft-log)
// and where it is, in messages.
var raftLogPlaces = map[pb.RaftLogPlace]struct{ flag, where string }{
	pb.RaftLogPlace_RAFT_LOG_WAL:       {"wal", "a WAL"},
	pb.RaftLogPlace_RAFT_LOG_COMMITLOG: {"commitlog", "the commitlog"},
	// Its replicas keep theirs in a WAL until they move (raftlogmove.go).
	pb.RaftLogPlace_RAFT_LOG_MOVING: {"wal", "a WAL, moving into the commitlog"},
}

// RaftLogFlag is the value of raftmq broker --raft-log that chooses p.
func RaftLogFlag(p pb.RaftLogPlace) string {
	if n, ok := raftLogPlaces[p]; ok {
		return n.flag
	}
	return "undeclared"
}

func raftLogWhere(p pb.RaftLogPlace) string {
	if n, ok := raftLogPlaces[p]; ok {
		return fmt.Sprintf("%s (--raft-log %s)", n.where, n.flag)
	}
	return "no declared place"
}
