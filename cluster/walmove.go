package cluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// A member's move from its WAL into the commitlog, at its start
// (docs/commitlog-raft-log.md, step 3; the broker's side is
// broker/raftlogconvert.go). The group paused its writes at the move's
// entry X, so every replica's commitlog ends where X left it; the entries
// after X (Raft's own, metadata) are stored there as the commitlog's
// first frames, the same on every replica, and the WAL goes. A marker
// (movingMarker) is written before the first entry is stored and removed
// after the commitlog's own marker is written: a start that finds it goes
// through the move again from the beginning, in the commitlog, and a
// start on the WAL is refused.

// movingMarker, in a member's Dir, says a move of its WAL into the
// commitlog began and did not finish.
const movingMarker = "raft-log-moving"

// WALToMove says whether a member whose Dir is dir, started with its
// Raft log in the commitlog, first moves its WAL there: dir holds a WAL
// and not the commitlog's marker, or a move that did not finish.
func WALToMove(dir string) (bool, error) {
	moving, err := moveBegun(dir)
	if err != nil || moving {
		return moving, err
	}
	if marked, err := markedInCommitlog(dir); err != nil || marked {
		return false, err
	}
	return fileExists(filepath.Join(dir, walDirName))
}

// StoreWALEntries begins the move of the WAL under cfg.Dir into
// cfg.EntryLog: the WAL's entries from index from to its last, each
// accepted by check, are stored through the log store a member in the
// commitlog runs on, as it would have stored them from Raft. The move is
// marked begun only once every entry is accepted: a refusal leaves the
// member to start on its WAL again. The WAL must hold from (unless it
// ends before it). It does not finish the move (FinishWALMove).
func StoreWALEntries(cfg RaftConfig, from uint64, check func(*raft.Log) error) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	if cfg.EntryLog == nil || cfg.RecordsAt == nil {
		return errors.New("cluster: moving a WAL needs RaftConfig.EntryLog and RecordsAt")
	}
	walDir := filepath.Join(cfg.Dir, walDirName)
	w, err := openWAL(walDir, cfg.LogSegmentSize, hclog.NewNullLogger())
	if err != nil {
		return err
	}
	defer w.Close()
	first, err := w.FirstIndex()
	if err != nil {
		return fmt.Errorf("cluster: %s: %w", walDir, err)
	}
	last, err := w.LastIndex()
	if err != nil {
		return fmt.Errorf("cluster: %s: %w", walDir, err)
	}
	if last < from {
		return nil
	}
	if first > from {
		return fmt.Errorf("cluster: %s begins at Raft entry %d, after entry %d, the first the move stores: this replica cannot move; replace it (an empty data directory, raftmq group add-replica)", walDir, first, from)
	}
	read := func(i uint64) (*raft.Log, error) {
		l := new(raft.Log)
		if err := w.GetLog(i, l); err != nil {
			return nil, fmt.Errorf("cluster: %s: read entry %d: %w", walDir, i, err)
		}
		return l, nil
	}
	for i := from; i <= last; i++ {
		l, err := read(i)
		if err == nil {
			err = check(l)
		}
		if err != nil {
			return err
		}
	}
	if err := writeMarker(filepath.Join(cfg.Dir, movingMarker)); err != nil {
		return err
	}
	store := &commitlogLog{log: cfg.EntryLog, recordsAt: cfg.RecordsAt}
	var batch []*raft.Log
	size := 0
	for i := from; i <= last; i++ {
		l, err := read(i)
		if err != nil {
			return err
		}
		batch, size = append(batch, l), size+len(l.Data)
		if size >= migrateBatchBytes || len(batch) >= cfg.MaxAppendEntries || i == last {
			if err := store.StoreLogs(batch); err != nil {
				return fmt.Errorf("cluster: store raft entries %d-%d in the commitlog: %w", batch[0].Index, i, err)
			}
			batch, size = batch[:0], 0
		}
	}
	return nil
}

// FinishWALMove ends the move of dir's WAL once its entries are stored
// (StoreWALEntries) and the member's snapshot says where they begin: the
// commitlog's marker, the move's removed, then the WAL. A start after a
// crash before the WAL is gone finds the member in the commitlog, and
// claimLogPlace removes the WAL.
func FinishWALMove(dir string) error {
	if err := writeMarker(filepath.Join(dir, inCommitlogMarker)); err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(dir, movingMarker)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("cluster: %w", err)
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	return removeMovedWAL(dir)
}

// removeMovedWAL removes the WAL of a member in the commitlog, which
// only a move leaves (FinishWALMove).
func removeMovedWAL(dir string) error {
	if err := os.RemoveAll(filepath.Join(dir, walDirName)); err != nil {
		return fmt.Errorf("cluster: remove the moved WAL: %w", err)
	}
	return nil
}

// moveBegun says whether dir holds the marker of a move begun and not
// finished: the member starts in the commitlog only, to finish it.
func moveBegun(dir string) (bool, error) {
	return fileExists(filepath.Join(dir, movingMarker))
}

func fileExists(path string) (bool, error) {
	_, err := os.Stat(path)
	if err == nil || errors.Is(err, os.ErrNotExist) {
		return err == nil, nil
	}
	return false, fmt.Errorf("cluster: %w", err)
}
