package broker

import (
	"errors"
	"fmt"
	"io"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/pb"
	"github.com/raftmq/raftmq/storage"
)

// A replica's move from its WAL into the commitlog, when it starts with
// --raft-log commitlog after its group began the move (raftlogmove.go;
// docs/commitlog-raft-log.md, step 3). Its newest snapshot, taken at or
// after the move's entry X, says the group moves from X, and its
// commitlog ends where X left it on every replica. The WAL's entries
// after X (none writes to the commitlog: the pause) are stored there as
// the first frames (cluster.StoreWALEntries), the same bytes on every
// replica whenever it moves, including those before its snapshot: a
// replica that snapshotted later than another frames the same range. The
// snapshot is written again saying where its entry ends in the commitlog,
// as a snapshot of a replica in the commitlog does (a replica installing
// it copies to there); then the WAL goes (cluster.FinishWALMove). A crash
// on the way leaves the move's marker, and the next start takes back what
// was stored and moves again.

// moveIntoCommitlogIfDue moves the replica's WAL into its commitlog as
// it starts, before its store opens, when it is due: the replica is to
// start in the commitlog (Store.RaftLog) and holds a WAL or a move begun;
// or it lets its directory choose (RaftLogFromDir: --raft-log auto, the
// default), holds a WAL, and its newest snapshot says its group is moving
// from an entry at or before it, so that a plain restart moves it. It
// returns cfg with Store.RaftLog saying where the replica keeps its log
// then. Under auto, a move refused before it began (its marker unwritten:
// see movable) leaves the replica on its WAL, with a warning saying why,
// rather than not started.
func moveIntoCommitlogIfDue(cfg Config) (Config, error) {
	due, err := cluster.WALToMove(cfg.Raft.Dir)
	if err != nil || !due || !cfg.Store.RaftLog && !cfg.RaftLogFromDir {
		return cfg, err
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.Raft.Dir, max(cfg.Raft.SnapshotsRetained, 2), hclog.NewNullLogger())
	if err != nil {
		return cfg, fmt.Errorf("broker: move into the commitlog: %w", err)
	}
	meta, snap, err := newestSnapshot(snaps)
	if err != nil {
		return cfg, err
	}
	if cfg.Store.RaftLog {
		return cfg, moveIntoCommitlog(cfg, snaps, meta, snap)
	}
	if !movesFrom(meta, snap) { // auto, its group not moving as its snapshot knows
		return cfg, nil
	}
	cfg.Store.RaftLog = true
	err = moveIntoCommitlog(cfg, snaps, meta, snap)
	if err == nil {
		return cfg, nil
	}
	// Only a move that left nothing behind (neither its marker nor the
	// commitlog's) can be started on the WAL.
	if inCommitlog, perr := cluster.RaftLogInCommitlog(cfg.Raft.Dir); perr != nil || inCommitlog {
		return cfg, errors.Join(err, perr)
	}
	cfg.Logger.Warn("the group is moving its Raft log into the commitlog, and this replica cannot move yet: it starts on its WAL", "err", err)
	cfg.Store.RaftLog = false
	return cfg, nil
}

// movesFrom says whether a replica's newest snapshot (nil: none) is one
// its move starts from: taken while its group moves, at or after the
// move's entry.
func movesFrom(meta *raft.SnapshotMeta, snap *pb.BrokerSnapshot) bool {
	return meta != nil && snap.GroupRaftLog == pb.RaftLogPlace_RAFT_LOG_MOVING && snap.RaftLogMoveIndex != 0 && meta.Index >= snap.RaftLogMoveIndex
}

// moveIntoCommitlog moves the replica's WAL into its commitlog, before
// its store opens for serving, from its newest snapshot (meta and snap,
// in snaps).
func moveIntoCommitlog(cfg Config, snaps *raft.FileSnapshotStore, meta *raft.SnapshotMeta, snap *pb.BrokerSnapshot) error {
	if !movesFrom(meta, snap) {
		newest := "no snapshot taken since"
		if meta != nil {
			newest = fmt.Sprintf("its newest snapshot (Raft index %d) from before", meta.Index)
		}
		return fmt.Errorf("broker: %s holds a Raft log in its WAL, and %s its group began moving into the commitlog: start it with --raft-log wal, or begin the move (raftmq group move-raft-log, which answers once every replica has the snapshot it moves from)",
			cfg.Raft.Dir, newest)
	}
	x := snap.RaftLogMoveIndex
	store, err := storage.Open(cfg.Store)
	if err != nil {
		return err
	}
	err = storeWALEntries(cfg, store, x, snap)
	if err == nil {
		err = moveStopsAfter("entries stored")
	}
	if err == nil {
		err = rewriteSnapshot(snaps, meta, snap, store, x)
	}
	if err == nil {
		err = moveStopsAfter("snapshot rewritten")
	}
	if cerr := store.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("broker: move the Raft log into the commitlog (from the move's entry %d): %w", x, err)
	}
	if err := cluster.FinishWALMove(cfg.Raft.Dir); err != nil {
		return err
	}
	cfg.Logger.Info("Raft log moved from the WAL into the commitlog", "move_index", x, "snapshot_index", meta.Index, "frames_from", snap.CommitlogMaxOffset)
	return nil
}

// moveStopsAfter is called after each step of a move: a test's error
// stops the move there, as a crash would, and fails the start. It
// returns nil outside tests.
var moveStopsAfter = func(step string) error { return nil }

// newestSnapshot is the member's newest snapshot and its state; nil
// when it has none.
func newestSnapshot(snaps *raft.FileSnapshotStore) (*raft.SnapshotMeta, *pb.BrokerSnapshot, error) {
	metas, err := snaps.List()
	if err != nil {
		return nil, nil, fmt.Errorf("broker: list snapshots: %w", err)
	}
	if len(metas) == 0 {
		return nil, nil, nil
	}
	meta, rc, err := snaps.Open(metas[0].ID)
	if err != nil {
		return nil, nil, fmt.Errorf("broker: open snapshot %s: %w", metas[0].ID, err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		return nil, nil, fmt.Errorf("broker: read snapshot %s: %w", meta.ID, err)
	}
	var s pb.BrokerSnapshot
	if err := proto.Unmarshal(data, &s); err != nil {
		return nil, nil, fmt.Errorf("broker: decode snapshot %s: %w", meta.ID, err)
	}
	return meta, &s, nil
}

// storeWALEntries stores the WAL's entries after x at the commitlog's
// end, which must be where the snapshot, taken while moving, found it.
func storeWALEntries(cfg Config, store *storage.Store, x uint64, snap *pb.BrokerSnapshot) error {
	// An earlier move cut short by a crash stored some; none is applied.
	if err := store.CutStored(store.WrittenRaftIndex()); err != nil {
		return err
	}
	if _, end := store.CommitlogOffsets(); end != snap.CommitlogMaxOffset {
		return fmt.Errorf("the commitlog ends at offset %d, and at %d in the snapshot taken while moving: it changed after the move's entry", end, snap.CommitlogMaxOffset)
	}
	rc := cfg.Raft
	rc.EntryLog, rc.RecordsAt = storeEntryLog{store}, recordsAt
	return cluster.StoreWALEntries(rc, x+1, movable)
}

// movable refuses an entry after the move's that the move cannot store:
// one that would write to the commitlog other than its frame (records, or
// a topic's deletion), which the pause keeps out of the log (writeGate)
// unless a master without it proposed one, and which stored would differ
// between replicas that applied it refused and those that dispatch it;
// or another step of a move, which says the snapshot is of a move
// aborted since.
func movable(l *raft.Log) error {
	if l.Type != raft.LogCommand {
		return nil
	}
	if at := recordsAt(l.Data); at < len(l.Data) || deletedTopic(cluster.LogEntry{Command: l.Data}) != "" {
		return fmt.Errorf("raft entry %d, after the move's entry, writes to the commitlog (a master without the pause proposed it): abort the move (raftmq group move-raft-log --abort) and begin it again", l.Index)
	}
	if cmd, err := decodeCommand(l.Data); err == nil && cmd.GetMoveRaftLog() != nil {
		return fmt.Errorf("raft entry %d is a step of the move after the one this replica's newest snapshot is of (aborted, then begun again): start it with --raft-log wal until it has a snapshot of this move (raftmq group move-raft-log answers once every replica has one), then with --raft-log commitlog", l.Index)
	}
	return nil
}

// rewriteSnapshot writes snapshot meta again, newest, saying where its
// entry ends in the commitlog: at the end of its frame, or where the
// frames begin when it is the move's entry itself.
func rewriteSnapshot(snaps *raft.FileSnapshotStore, meta *raft.SnapshotMeta, snap *pb.BrokerSnapshot, store *storage.Store, x uint64) error {
	end := snap.CommitlogMaxOffset
	if meta.Index > x {
		var err error
		if end, err = store.EntryEnd(meta.Index); err != nil {
			return fmt.Errorf("where snapshot %s's entry ends: %w", meta.ID, err)
		}
	}
	snap.RaftLogIndex, snap.RaftLogEnd = meta.Index, end
	data, err := proto.Marshal(snap)
	if err != nil {
		return err
	}
	// The transport only encodes the configuration's addresses for
	// snapshots of protocol version 0, as every transport does: the
	// address itself.
	_, peers := raft.NewInmemTransport("")
	defer peers.Close()
	sink, err := snaps.Create(meta.Version, meta.Index, meta.Term, meta.Configuration, meta.ConfigurationIndex, peers)
	if err != nil {
		return fmt.Errorf("write snapshot %s again: %w", meta.ID, err)
	}
	if _, err := sink.Write(data); err != nil {
		sink.Cancel()
		return fmt.Errorf("write snapshot %s again: %w", meta.ID, err)
	}
	return sink.Close()
}
