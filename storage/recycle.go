package storage

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/raftmq/raftmq/message"
)

// Segment recycling. Retention retires the oldest segment by renaming it
// <start>.spare, up to Config.RecycleSegments of them, instead of deleting
// it; the next new segment is then a spare renamed, not a fresh file to
// zero-fill. A spare's blocks are allocated and written, which is what the
// preallocator otherwise spends the disk's time on (measured here:
// zero-filling a 256 MiB segment took 256-262 ms, about 40% of the time
// its appends take at 300 KB and one fdatasync a batch).
//
// A reused file still holds the records of its old life. None of them is
// ever taken for a new one: every record holds its commitlog offset, which
// recovery checks; every write of records ends with an end-of-data marker
// (zeros, which recovery stops at, up to the end of the page: tailPad)
// where the segment has room for it; and a spare gets that marker at its
// start, durably, before it becomes a segment, so a crash right after a
// roll finds an empty segment, not old records.

const spareSuffix = ".spare"

// keepSpare adds the spare file at path found when opening the commitlog,
// or deletes it when it has the wrong size or there are enough spares.
func (c *commitlog) keepSpare(path string) error {
	fi, err := os.Stat(path)
	if err == nil && fi.Size() == c.segSize && len(c.spares) < c.recycle {
		c.spares = append(c.spares, path)
		return nil
	}
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("storage: remove spare segment: %w", err)
	}
	return nil
}

// retire takes segment s, just removed from the list, out of the commitlog:
// kept as a spare when recycle is set and there is room, else deleted.
// Caller holds mu.
func (c *commitlog) retire(s *segment, recycle bool) error {
	s.f.Close()
	path := filepath.Join(c.dir, segmentName(s.start))
	if recycle && len(c.spares) < c.recycle {
		spare := path + spareSuffix
		if err := os.Rename(path, spare); err == nil {
			c.spares = append(c.spares, spare)
			c.log.Info("commitlog segment retired as a spare", "segment", segmentName(s.start))
			return nil
		}
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("storage: remove segment: %w", err)
	}
	c.log.Info("commitlog segment deleted by retention", "segment", segmentName(s.start))
	return nil
}

// returnSpare takes back the prepared next segment f, a reused spare that
// did not become a segment (the store closes, or the log was cut), as a
// spare again, or deletes it when there is no room.
func (c *commitlog) returnSpare(f *os.File) {
	f.Close()
	path := strings.TrimSuffix(f.Name(), preparedSuffix) + spareSuffix
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.spares) < c.recycle && os.Rename(f.Name(), path) == nil {
		c.spares = append(c.spares, path)
		return
	}
	os.Remove(f.Name())
}

// dropSpares deletes every spare: the disk is too full to keep them.
func (c *commitlog) dropSpares() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.spares) > 0 {
		if err := os.Remove(c.spares[0]); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("storage: remove spare segment: %w", err)
		}
		c.spares = c.spares[1:]
	}
	return nil
}

// reuseSpare renames a spare to the temporary name of the segment at start
// (<start>.alloc, as the preallocator prepares segments) and makes an
// end-of-data marker at its start durable. It returns nil when there is no
// spare.
func (c *commitlog) reuseSpare(start int64) (*os.File, error) {
	c.mu.Lock()
	if len(c.spares) == 0 {
		c.mu.Unlock()
		return nil, nil
	}
	spare := c.spares[0]
	c.spares = c.spares[1:]
	c.mu.Unlock()
	path := filepath.Join(c.dir, segmentName(start)+preparedSuffix)
	if err := os.Rename(spare, path); err != nil {
		return nil, fmt.Errorf("storage: reuse spare segment: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("storage: reuse spare segment: %w", err)
	}
	if _, err = f.WriteAt(endMarker[:], 0); err == nil {
		err = fdatasync(f)
	}
	if err != nil {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("storage: reuse spare segment: %w", err)
	}
	c.log.Debug("commitlog spare reused", "segment", segmentName(start))
	return f, nil
}

// endMarker follows the last record written: recovery reads it as the end
// of the data, whatever an older life of the file left after it.
var endMarker [message.BlankSize]byte

// tailZeros is the most tailPad asks for.
var tailZeros = make([]byte, 2*pageSize)

const pageSize = 4096

// tailPad is how many zero bytes go after a write of records that ends at
// commitlog offset pos: the end marker, and zeros to the end of its page,
// so that the write covers whole pages. A page written in part that is
// not in the page cache is first read from the disk, inside the append:
// the first page of a write is the last of the previous one, cached, and
// the padding makes the last page whole. None at a segment's start (the
// marker belongs to the next segment, which reuseSpare or zeroing
// prepared); never past the segment's end, where fewer than message.BlankSize
// bytes left are skipped by recovery anyway.
func (c *commitlog) tailPad(pos int64) int {
	rel := pos % c.segSize
	if rel == 0 {
		return 0
	}
	n := pageSize - rel%pageSize
	if n < message.BlankSize {
		n += pageSize
	}
	return int(min(n, c.segSize-rel))
}
