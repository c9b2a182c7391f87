package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	wal "github.com/hashicorp/raft-wal"
	walfs "github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/migrate"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"
	"go.etcd.io/bbolt"
)

// The Raft log lives in a segmented write-ahead log (hashicorp/raft-wal, as
// Consul's), Raft's stable state (term, vote) in raft.db (raft-boltdb/v2).
// A bolt log appends through a copy-on-write B+tree with two fsyncs per
// commit; under batched publish its StoreLogs took 27% of the master's CPU
// and 34% of a follower's (issue #12's profiles). On the WAL, batched
// publish to a group of 3 broker processes went from 32.1k to 59-61k msgs/s
// (deploy/bench-local.sh, 2026-12-01; broker/README.md).
const (
	walDirName       = "wal"
	walMigratingName = "wal.migrating"
	boltFileName     = "raft.db"
)

// migrateBatchBytes is how much log data one StoreLogs of the migration
// carries: few fsyncs, bounded memory.
const migrateBatchBytes = 8 << 20

// memberLog is a member's Raft log as StartRaft opens it: the WAL, or a
// commitlogLog.
type memberLog interface {
	raft.LogStore
	raft.MonotonicLogStore
	Close() error
}

// openMemberLog opens the member's Raft log: the EntryLog the
// configuration names, or the WAL under Dir. name says where it is, in
// errors. claimLogPlace has checked the place.
func openMemberLog(cfg RaftConfig, bolt *raftboltdb.BoltStore, hlog hclog.Logger) (log memberLog, name string, err error) {
	if cfg.EntryLog != nil {
		return &commitlogLog{log: cfg.EntryLog, recordsAt: cfg.RecordsAt}, "the commitlog", nil
	}
	w, err := openLogStore(cfg.Dir, cfg.LogSegmentSize, bolt, hlog)
	if err != nil {
		return nil, "", err
	}
	return w, filepath.Join(cfg.Dir, walDirName), nil
}

// claimLogPlace checks, before anything of the member's is opened, that
// it keeps its log where it began it (CheckRaftLogPlace). A member
// beginning in the commitlog writes the marker first, so that a crash
// before its first entry leaves a directory that says so
// (RaftLogInCommitlog); one there already removes a WAL that a move's
// end left (walmove.go).
func claimLogPlace(cfg RaftConfig) error {
	if cfg.EntryLog != nil && cfg.RecordsAt == nil {
		return errors.New("cluster: RaftConfig.EntryLog needs RecordsAt")
	}
	marked, err := CheckRaftLogPlace(cfg.Dir, cfg.EntryLog != nil)
	switch {
	case err != nil || cfg.EntryLog == nil:
	case !marked:
		err = writeMarker(filepath.Join(cfg.Dir, inCommitlogMarker))
	default:
		err = removeMovedWAL(cfg.Dir) // a move's end cut short (FinishWALMove)
	}
	return err
}

// CheckRaftLogPlace refuses to start a member whose Dir is dir with its
// Raft log in the commitlog (inCommitlog) or in a WAL when it began with
// the other: the WAL's directory (or a bolt log from before it), or the
// commitlog's marker, says which. A WAL moves into the commitlog only
// with its group (WALToMove, walmove.go), and a move begun goes on only
// in the commitlog. A broker asks before it opens its store, which
// recovers its commitlog by the rules of the place. marked says the
// commitlog's marker is there.
func CheckRaftLogPlace(dir string, inCommitlog bool) (marked bool, err error) {
	if marked, err = markedInCommitlog(dir); err != nil {
		return false, err
	}
	if !inCommitlog {
		if moving, err := moveBegun(dir); err != nil {
			return marked, err
		} else if moving {
			return marked, fmt.Errorf("cluster: %s began moving its Raft log into the commitlog (%s): start it with its log in the commitlog to finish the move", dir, movingMarker)
		}
	}
	switch {
	case inCommitlog && !marked:
		if held, err := holdsWALorBoltLog(dir); err != nil {
			return false, err
		} else if held != "" {
			return false, fmt.Errorf("cluster: %s holds a Raft log in its WAL (%s): it starts with its log in the commitlog only once its group's move has begun (raftmq group move-raft-log)", dir, held)
		}
	case !inCommitlog && marked:
		return true, fmt.Errorf("cluster: %s keeps its Raft log in the commitlog (%s): start it that way again", dir, inCommitlogMarker)
	}
	return marked, nil
}

// RaftLogInCommitlog says where a member whose Dir is dir keeps its Raft
// log, for a broker that lets the directory choose (raftmq broker
// --raft-log auto): in the commitlog when its marker is there, in a WAL
// when the directory holds one or a bolt log (raftmq before the WAL, whose
// first start moves it into the WAL), and in the commitlog for a new
// member, whose directory holds neither.
func RaftLogInCommitlog(dir string) (bool, error) {
	marked, err := markedInCommitlog(dir)
	if err != nil || marked {
		return marked, err
	}
	if moving, err := moveBegun(dir); err != nil || moving {
		return moving, err // a move to finish (walmove.go)
	}
	held, err := holdsWALorBoltLog(dir)
	return held == "", err
}

// markedInCommitlog says whether dir holds the commitlog's marker.
func markedInCommitlog(dir string) (bool, error) {
	return fileExists(filepath.Join(dir, inCommitlogMarker))
}

// holdsWALorBoltLog names what of a WAL member's dir holds: its WAL's
// directory, or raft.db (a bolt log, or a WAL member that stopped before
// it made its WAL's directory). "" when neither is there.
func holdsWALorBoltLog(dir string) (string, error) {
	for _, name := range []string{walDirName, walMigratingName, boltFileName} {
		if held, err := fileExists(filepath.Join(dir, name)); err != nil || held {
			return name, err
		}
	}
	return "", nil
}

// inCommitlogMarker, in a member's Dir, says its Raft log is in the
// commitlog (RaftConfig.EntryLog).
const inCommitlogMarker = "raft-log-in-commitlog"

// writeMarker creates the empty file path durably: the file and its
// directory's entry.
func writeMarker(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("cluster: raft log marker: %w", err)
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = syncDir(filepath.Dir(path))
	}
	if err != nil {
		return fmt.Errorf("cluster: raft log marker: %w", err)
	}
	return nil
}

// openLogStore opens the WAL in dir/wal. A member whose log is still in
// bolt (raftmq before the WAL) has it copied into the WAL first; the copy
// is built aside in dir/wal.migrating and renamed into place only once it
// is whole and synced, so a crash during the copy leaves the bolt log in
// charge and the next start copies again. The bolt log is emptied only
// after the WAL is in place (again on every start, until it is empty).
func openLogStore(dir string, segmentSize int, bolt *raftboltdb.BoltStore, hlog hclog.Logger) (*wal.WAL, error) {
	walDir := filepath.Join(dir, walDirName)
	if _, err := os.Stat(walDir); errors.Is(err, os.ErrNotExist) {
		if err := migrateBoltLog(dir, segmentSize, bolt, hlog); err != nil {
			return nil, fmt.Errorf("cluster: move the raft log from %s to %s: %w", boltFileName, walDirName, err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("cluster: raft log dir: %w", err)
	}
	w, err := openWAL(walDir, segmentSize, hlog)
	if err != nil {
		return nil, err
	}
	if err := dropBoltLog(bolt); err != nil {
		w.Close()
		return nil, fmt.Errorf("cluster: empty the old raft log in %s: %w", boltFileName, err)
	}
	return w, nil
}

// openWAL opens the WAL in walDir, first completing a segment rotation
// that a crash interrupted (walFiler).
func openWAL(walDir string, segmentSize int, hlog hclog.Logger) (*wal.WAL, error) {
	if err := os.MkdirAll(walDir, 0o755); err != nil {
		return nil, fmt.Errorf("cluster: create raft log dir: %w", err)
	}
	if err := checkWALMeta(walDir); err != nil {
		return nil, err
	}
	for attempt := 0; ; attempt++ {
		filer := &walFiler{SegmentFiler: segment.NewFiler(walDir, walfs.New())}
		w, err := wal.Open(walDir, wal.WithSegmentSize(segmentSize), wal.WithLogger(hlog.Named("wal")), wal.WithSegmentFiler(filer))
		if err != nil {
			return nil, fmt.Errorf("cluster: open raft log %s: %w", walDir, err)
		}
		if filer.sealed == nil {
			return w, nil
		}
		if err := w.Close(); err != nil {
			return nil, fmt.Errorf("cluster: close raft log %s: %w", walDir, err)
		}
		if attempt > 0 {
			return nil, fmt.Errorf("cluster: raft log %s: tail segment %d still sealed after its rotation was completed", walDir, filer.sealed.info.ID)
		}
		hlog.Warn("raft log: completing a segment rotation that a crash interrupted",
			"dir", walDir, "segment", filer.sealed.info.ID, "last", filer.sealed.last)
		if err := completeRotation(walDir, segmentSize, *filer.sealed); err != nil {
			return nil, fmt.Errorf("cluster: raft log %s: complete the interrupted rotation: %w", walDir, err)
		}
		sealedTailRepairs.Add(1)
	}
}

// checkWALMeta refuses a wal-meta.db that is there but empty or without
// raft-wal's buckets. raft-wal creates it whole and fsynced before it
// renames it into place, so only a disk that lost synced data leaves one
// like that; raft-wal's Open would then dereference the missing bucket
// (a nil pointer panic in metadb.Load, seen under lazyfs with fsync
// ignored). A missing file is a new log, for raft-wal to create.
func checkWALMeta(walDir string) error {
	path := filepath.Join(walDir, metadb.FileName)
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cluster: raft log metadata: %w", err)
	}
	damaged := func(why string) error {
		return fmt.Errorf("cluster: raft log metadata %s is damaged: %s (the disk lost data it had synced?); the replica cannot start on it: replace it from its peers", path, why)
	}
	if fi.Size() == 0 {
		return damaged("it is empty")
	}
	db, err := bbolt.Open(path, 0o644, &bbolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
	if err != nil {
		return damaged(err.Error())
	}
	defer db.Close()
	return db.View(func(tx *bbolt.Tx) error {
		for _, b := range []string{metadb.MetaBucket, metadb.StableBucket} {
			if tx.Bucket([]byte(b)) == nil {
				return damaged("bucket " + b + " is missing")
			}
		}
		return nil
	})
}

// checkLogHolds refuses a Raft log that ends before an entry the state
// machine already applied from it. Every replica writes an entry to its
// own log, synced, before it applies it (a follower before it even
// acknowledges it; the master before it applies it, leaderlog.go), so the
// log, or its newest snapshot, always reaches the applied index; one that
// does not lost entries it had synced: a truncated or damaged segment (a
// tail segment's last batch failing raft-wal's CRC is cut as a torn write
// would be), or a disk that lost synced writes. Such a member must not
// start: it would vote, and be counted, as holding less than it
// acknowledged, and its state machine would skip the entries a new leader
// put in their place (issue #16 item 2).
func checkLogHolds(walDir string, logs raft.LogStore, snaps raft.SnapshotStore, applied uint64) error {
	if applied == 0 {
		return nil
	}
	last, err := logs.LastIndex()
	if err != nil {
		return fmt.Errorf("cluster: raft log %s: %w", walDir, err)
	}
	var snap uint64
	if metas, err := snaps.List(); err == nil && len(metas) > 0 {
		snap = metas[0].Index // newest first
	}
	if max(last, snap) >= applied {
		return nil
	}
	return fmt.Errorf("cluster: raft log %s ends at entry %d (newest snapshot: %d), but the state machine applied entries up to %d from it: "+
		"the log lost entries it had synced (a truncated or damaged segment?); the replica cannot start on it: replace it from its peers",
		walDir, last, snap, applied)
}

// completeRotation commits to wal-meta.db what the interrupted rotation
// would have: the tail sealed at its last entry and index, and a new, empty
// tail after it (whose file Open creates).
func completeRotation(walDir string, segmentSize int, t sealedTail) error {
	var meta metadb.BoltMetaDB
	state, err := meta.Load(walDir)
	if err != nil {
		return err
	}
	n := len(state.Segments)
	if n == 0 || state.Segments[n-1].ID != t.info.ID {
		meta.Close()
		return fmt.Errorf("segment %d is not the tail in the metadata", t.info.ID)
	}
	now := time.Now()
	tail := &state.Segments[n-1]
	tail.SealTime, tail.MaxIndex, tail.IndexStart = now, t.last, t.indexStart
	state.Segments = append(state.Segments, types.SegmentInfo{
		ID:         state.NextSegmentID,
		BaseIndex:  t.last + 1,
		MinIndex:   t.last + 1,
		Codec:      tail.Codec,
		SizeLimit:  uint32(segmentSize),
		CreateTime: now,
	})
	state.NextSegmentID++
	err = meta.CommitState(state)
	if cerr := meta.Close(); err == nil {
		err = cerr
	}
	return err
}

// sealedTailRepairs counts completed rotations, for tests.
var sealedTailRepairs atomic.Int64

// migrateBoltLog copies the entries of bolt's log, if it has any, into a
// new WAL and moves that WAL into place. With an empty bolt log (a new
// member) it only creates the WAL's directory.
func migrateBoltLog(dir string, segmentSize int, bolt *raftboltdb.BoltStore, hlog hclog.Logger) error {
	walDir := filepath.Join(dir, walDirName)
	last, err := bolt.LastIndex()
	if err != nil {
		return err
	}
	if last == 0 {
		return os.MkdirAll(walDir, 0o755)
	}
	tmp := filepath.Join(dir, walMigratingName)
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	w, err := openWAL(tmp, segmentSize, hlog)
	if err != nil {
		return err
	}
	first, _ := bolt.FirstIndex()
	hlog.Info("moving the raft log into a write-ahead log", "from", boltFileName, "to", walDirName, "first", first, "last", last)
	err = migrate.CopyLogs(context.Background(), w, bolt, migrateBatchBytes, nil)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	// Every StoreLogs fsynced its segment; the directory entries of the
	// segments and of the WAL's own directory must be durable before the
	// rename makes the WAL the log.
	if err := syncDir(tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, walDir); err != nil {
		return err
	}
	return syncDir(dir)
}

// dropBoltLog deletes the entries left in bolt's log once the WAL holds
// them. bolt keeps the file's size; its pages are reused by nothing else,
// which costs disk but no time (the stable store is a few keys).
func dropBoltLog(bolt *raftboltdb.BoltStore) error {
	last, err := bolt.LastIndex()
	if err != nil || last == 0 {
		return err
	}
	first, err := bolt.FirstIndex()
	if err != nil {
		return err
	}
	return bolt.DeleteRange(first, last)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

var _ raft.LogStore = (*wal.WAL)(nil)
