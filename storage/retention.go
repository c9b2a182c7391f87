package storage

import (
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// DeleteExpired runs one retention pass: it deletes whole commitlog
// segments, oldest first and never the active one, while the oldest was
// last written more than RetentionAge before now or the disk is fuller than
// RetentionDiskRatio; then the consume queue and index files that only
// point into deleted segments. It returns how many segments it deleted.
// Segments deleted for age are kept as spares (Config.RecycleSegments);
// on a disk too full, spares go first, then segments for good.
// Reads of a queue below its new minimum answer OffsetTooSmall.
func (s *Store) DeleteExpired(now time.Time) (int, error) {
	if s.closed.Load() {
		return 0, ErrClosed
	}
	used := 0.0
	overFull := func() (bool, error) {
		if s.cfg.RetentionDiskRatio >= 1 {
			return false, nil
		}
		var err error
		used, err = s.cfg.diskUsage(s.cfg.Dir)
		return used > s.cfg.RetentionDiskRatio, err
	}
	if full, err := overFull(); err != nil || full {
		if err == nil {
			err = s.cl.dropSpares() // the cheapest space to give back
		}
		if err != nil {
			return 0, err
		}
	}
	deleted := 0
	for {
		ok, err := s.cl.deleteOldest(func(seg *segment) (drop, recycle bool, err error) {
			fi, err := seg.f.Stat()
			if err != nil {
				return false, false, fmt.Errorf("storage: stat segment: %w", err)
			}
			full, err := overFull()
			if err != nil {
				return false, false, err
			}
			if full {
				s.log.Warn("disk usage over the retention ratio, deleting the oldest segment", "used", used, "ratio", s.cfg.RetentionDiskRatio)
				return true, false, nil
			}
			if s.cfg.RetentionAge > 0 && now.Sub(fi.ModTime()) > s.cfg.RetentionAge {
				return true, true, nil
			}
			return false, false, nil
		})
		if err != nil {
			return deleted, err
		}
		if !ok {
			break
		}
		deleted++
	}
	if deleted == 0 {
		return 0, nil
	}
	clMin := s.cl.minOffset()
	for _, q := range s.queueList() {

		if err := q.deleteBelow(clMin); err != nil {
			return deleted, err
		}
	}
	return deleted, s.index.deleteBelow(clMin)
}

// diskUsage is the used fraction of the file system holding dir.
func diskUsage(dir string) (float64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("storage: statfs %s: %w", dir, &os.PathError{Op: "statfs", Path: dir, Err: err})
	}
	if st.Blocks == 0 {
		return 0, nil
	}
	return 1 - float64(st.Bavail)/float64(st.Blocks), nil
}
