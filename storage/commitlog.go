package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/raftmq/raftmq/message"
	"golang.org/x/sys/unix"
)

// commitlog is the sequence of fixed-size segment files holding every record
// of every topic in arrival order. Segment i starts at commitlog offset
// i*segSize and is named by that offset. A record never spans segments: one
// that does not fit is placed at the start of the next segment, and the rest
// of the current one is marked by a blank record.
//
// One writer (Store.Append, under its mutex) appends; readers pread below
// writePos concurrently. mu guards the segment list: readers and the flusher
// hold it shared across their syscalls, so retention and rolls never close a
// file under them.
type commitlog struct {
	dir     string
	segSize int64
	recycle int // spares to keep (Config.RecycleSegments)
	log     *slog.Logger

	mu     sync.RWMutex
	segs   []*segment
	spares []string // paths of retired segments to reuse (recycle.go)

	writePos   atomic.Int64 // end of the last whole batch; nothing is read past it
	flushMu    sync.Mutex
	flushedPos atomic.Int64

	z         *preallocator // preallocation ahead of the writer; nil until started, or disabled
	fallocate bool          // preallocate with fallocate, not zeros (Config.PreallocateBy)

	fault func(op, path string) error // Config.DiskFault; nil but in tests
}

type segment struct {
	start int64
	f     *os.File
}

func segmentName(start int64) string { return fmt.Sprintf("%020d", start) }

func openCommitlog(dir string, segSize int64, recycle int, log *slog.Logger) (*commitlog, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("storage: create commitlog dir: %w", err)
	}
	c := &commitlog{dir: dir, segSize: segSize, recycle: max(recycle, 0), log: log}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("storage: read commitlog dir: %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		if strings.HasSuffix(name, preparedSuffix) {
			// A segment that was being prepared when the process stopped.
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				return nil, fmt.Errorf("storage: remove stale %s: %w", name, err)
			}
			continue
		}
		if strings.HasSuffix(name, spareSuffix) {
			if err := c.keepSpare(filepath.Join(dir, name)); err != nil {
				return nil, err
			}
			continue
		}
		start, err := strconv.ParseInt(name, 10, 64)
		if err != nil || len(name) != 20 {
			log.Warn("ignoring unknown file in commitlog dir", "file", name)
			continue
		}
		if start%segSize != 0 {
			c.closeFiles()
			return nil, fmt.Errorf("storage: segment %s does not start at a multiple of the segment size %d (was SegmentSize changed?)", name, segSize)
		}
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_RDWR, 0)
		if err != nil {
			c.closeFiles()
			return nil, fmt.Errorf("storage: open segment: %w", err)
		}
		c.segs = append(c.segs, &segment{start: start, f: f})
	}
	sort.Slice(c.segs, func(i, j int) bool { return c.segs[i].start < c.segs[j].start })
	for i, s := range c.segs {
		fi, err := s.f.Stat()
		if err != nil {
			c.closeFiles()
			return nil, fmt.Errorf("storage: stat segment: %w", err)
		}
		if fi.Size() < segSize && i == len(c.segs)-1 {
			// A file cut short (copied, or damaged): what is missing reads
			// as the end of the data.
			log.Warn("last commitlog segment is short, extending it with zeros", "segment", segmentName(s.start), "size", fi.Size())
			err = zeroRange(s.f, fi.Size(), segSize)
		} else if fi.Size() != segSize {
			err = fmt.Errorf("storage: segment %s is %d bytes, want %d (was SegmentSize changed?)", segmentName(s.start), fi.Size(), segSize)
		}
		if err != nil {
			c.closeFiles()
			return nil, err
		}
		if i > 0 && s.start != c.segs[i-1].start+segSize {
			c.closeFiles()
			return nil, fmt.Errorf("storage: commitlog has a hole before segment %s", segmentName(s.start))
		}
	}
	return c, nil
}

func (c *commitlog) closeFiles() {
	for _, s := range c.segs {
		s.f.Close()
	}
	c.segs = nil
}

// close waits for a background preparation and closes every file. The
// caller has flushed what it wants flushed.
func (c *commitlog) close() {
	if c.z != nil {
		c.z.stop()
		c.z = nil
	}
	c.mu.Lock()
	c.closeFiles()
	c.mu.Unlock()
}

// minOffset is the start of the oldest segment (0 when there is none).
func (c *commitlog) minOffset() int64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if len(c.segs) == 0 {
		return c.writePos.Load()
	}
	return c.segs[0].start
}

// lastStart is the start of the last segment, -1 when there is none.
func (c *commitlog) lastStart() int64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if n := len(c.segs); n > 0 {
		return c.segs[n-1].start
	}
	return -1
}

// segmentAt returns the segment holding off. Caller holds mu.
func (c *commitlog) segmentAt(off int64) *segment {
	if len(c.segs) == 0 || off < c.segs[0].start {
		return nil
	}
	i := (off - c.segs[0].start) / c.segSize
	if i >= int64(len(c.segs)) {
		return nil
	}
	return c.segs[i]
}

// readAt reads n bytes at commitlog offset off into dst (grown as needed).
// The range must lie below writePos and inside one segment.
func (c *commitlog) readAt(dst []byte, off int64, n int) ([]byte, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if len(c.segs) == 0 || off < c.segs[0].start {
		return dst, fmt.Errorf("%w: commitlog offset %d", ErrOffsetRemoved, off)
	}
	if n < 0 || off+int64(n) > c.writePos.Load() {
		return dst, fmt.Errorf("%w: %d bytes at commitlog offset %d pass the end %d", ErrOffsetNotFound, n, off, c.writePos.Load())
	}
	s := c.segmentAt(off)
	if s == nil || off+int64(n) > s.start+c.segSize {
		return dst, fmt.Errorf("%w: %d bytes at commitlog offset %d cross a segment end", ErrOffsetNotFound, n, off)
	}
	l := len(dst)
	dst = slices.Grow(dst, n)[:len(dst)+n]
	if _, err := s.f.ReadAt(dst[l:], off-s.start); err != nil {
		return dst[:l], fmt.Errorf("storage: read segment %s: %w", segmentName(s.start), err)
	}
	return dst, nil
}

// readRecord reads and checks the whole record starting at off.
func (c *commitlog) readRecord(off int64) ([]byte, error) {
	head, err := c.readAt(nil, off, message.BlankSize)
	if err != nil {
		return nil, err
	}
	size := int(binary.BigEndian.Uint32(head))
	if binary.BigEndian.Uint32(head[4:]) != message.Magic || size < message.MinSize || int64(size) > c.segSize {
		return nil, fmt.Errorf("%w: commitlog offset %d", ErrOffsetNotFound, off)
	}
	rec, err := c.readAt(nil, off, size)
	if err != nil {
		return nil, err
	}
	if _, err := checkRecord(rec); err != nil {
		return nil, fmt.Errorf("commitlog offset %d: %w", off, err)
	}
	if message.HeaderOffset(rec) != off {
		return nil, fmt.Errorf("%w: record at commitlog offset %d claims offset %d", ErrCorrupt, off, message.HeaderOffset(rec))
	}
	return rec, nil
}

// write writes b at commitlog offset pos; b lies inside the segment that
// holds pos, which is created (rolled to) when it does not exist yet.
func (c *commitlog) write(pos int64, b []byte) error {
	s, err := c.ensureSegment(pos - pos%c.segSize)
	if err != nil {
		return err
	}
	if c.z != nil {
		c.z.claim(pos, pos+int64(len(b)))
	}
	err = c.injected("write", s)
	if err == nil {
		_, err = s.f.WriteAt(b, pos-s.start)
	}
	if err != nil {
		return fmt.Errorf("storage: commitlog write: %w", c.pathError("write", s, err))
	}
	return nil
}

// path is where segment s is. (Its file's Name may be the name it was
// prepared under.)
func (c *commitlog) path(s *segment) string { return filepath.Join(c.dir, segmentName(s.start)) }

// pathAt is the path of the segment holding commitlog offset off, "" when
// none does.
func (c *commitlog) pathAt(off int64) string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if s := c.segmentAt(off); s != nil {
		return c.path(s)
	}
	return ""
}

// pathError is err of the system call op on segment s as an
// *os.PathError naming the segment's path.
func (c *commitlog) pathError(op string, s *segment, err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return &os.PathError{Op: op, Path: c.path(s), Err: err}
}

// injected is the error Config.DiskFault makes the system call op on
// segment s fail with; nil without a fault.
func (c *commitlog) injected(op string, s *segment) error {
	return c.injectedAt(op, c.path(s))
}

// injectedAt is injected for the file at path (the preallocator's
// <start>.alloc file is no segment yet).
func (c *commitlog) injectedAt(op, path string) error {
	if c.fault == nil {
		return nil
	}
	return c.fault(op, path)
}

// sync is the writer's and the flusher's fdatasync of a segment.
func (c *commitlog) sync(s *segment) error {
	err := c.injected("fdatasync", s)
	if err == nil {
		err = fdatasync(s.f)
	}
	if err != nil {
		return c.pathError("fdatasync", s, err)
	}
	return nil
}

// ensureSegment returns the segment starting at start, rolling to it when it
// is the one after the last. The segment being left is fdatasynced first, so
// a later segment on disk always means the earlier ones are whole.
func (c *commitlog) ensureSegment(start int64) (*segment, error) {
	c.mu.RLock()
	var last *segment
	if n := len(c.segs); n > 0 {
		last = c.segs[n-1]
	}
	c.mu.RUnlock()
	if last != nil && last.start == start {
		return last, nil
	}
	if last != nil && start != last.start+c.segSize {
		return nil, fmt.Errorf("storage: cannot write at segment %d after segment %d", start, last.start)
	}
	if last != nil {
		if err := c.sync(last); err != nil {
			return nil, fmt.Errorf("storage: sync commitlog before roll: %w", err)
		}
	}
	final := filepath.Join(c.dir, segmentName(start))
	var f *os.File
	if c.z != nil {
		c.z.lockForRoll(start)
		defer c.z.unlock()
		f = c.z.takeNext(start)
	}
	if f == nil {
		var err error
		if f, err = c.reuseSpare(start); f == nil && err == nil {
			f, err = createSparse(final+preparedSuffix, c.segSize)
		}
		if err != nil {
			return nil, err
		}
	}
	if err := os.Rename(f.Name(), final); err != nil {
		f.Close()
		return nil, fmt.Errorf("storage: install segment: %w", err)
	}
	if err := syncDir(c.dir); err != nil {
		f.Close()
		return nil, err
	}
	s := &segment{start: start, f: f}
	c.mu.Lock()
	c.segs = append(c.segs, s)
	c.mu.Unlock()
	c.log.Debug("commitlog rolled", "segment", segmentName(start))
	return s, nil
}

// zeroRange writes zeros over [from, to) of f.
func zeroRange(f *os.File, from, to int64) error {
	for off := from; off < to; off += int64(len(zeroBlock)) {
		n := min(int64(len(zeroBlock)), to-off)
		if _, err := f.WriteAt(zeroBlock[:n], off); err != nil {
			return err
		}
	}
	return nil
}

var zeroBlock = make([]byte, 1<<20)

// preallocateFirst gives a brand-new commitlog its first segment, its
// blocks allocated (allocate), before the store opens (with zeros about
// 1.5 s for 1 GiB here, once in a store's life; fallocated, a few ms):
// the preallocator only ever prepares the segment after the active one,
// so without this the whole first segment would be written into holes.
func (c *commitlog) preallocateFirst() error {
	c.mu.RLock()
	n := len(c.segs)
	c.mu.RUnlock()
	start := c.writePos.Load()
	if n > 0 || start%c.segSize != 0 {
		return nil
	}
	final := filepath.Join(c.dir, segmentName(start))
	f, err := createSparse(final+preparedSuffix, c.segSize)
	if err != nil {
		return err
	}
	if _, err = c.allocate(f, 0, c.segSize); err == nil {
		err = fdatasync(f)
	}
	if err == nil {
		err = os.Rename(f.Name(), final)
	}
	if err == nil {
		err = syncDir(c.dir)
	}
	if err != nil {
		f.Close()
		return fmt.Errorf("storage: preallocate first segment: %w", err)
	}
	c.mu.Lock()
	c.segs = append(c.segs, &segment{start: start, f: f})
	c.mu.Unlock()
	return nil
}

// inSegments calls fn for each segment holding part of [from, to), with
// that part as file offsets, under the segment list's read lock.
func (c *commitlog) inSegments(from, to int64, fn func(s *segment, off, n int64) error) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, s := range c.segs {
		lo, hi := max(from, s.start), min(to, s.start+c.segSize)
		if lo >= hi {
			continue
		}
		if err := fn(s, lo-s.start, hi-lo); err != nil {
			return err
		}
	}
	return nil
}

// dropCache asks the kernel to drop the page cache of [from, to). Dirty
// pages are left alone, so only synced bytes go. It is advice: a failure
// costs memory, not data.
func (c *commitlog) dropCache(from, to int64) {
	_ = c.inSegments(from, to, func(s *segment, off, n int64) error {
		_ = unix.Fadvise(int(s.f.Fd()), off, n, unix.FADV_DONTNEED)
		return nil // the next segment's cache may still go
	})
}

// startFlush starts the write-back of what the writer wrote since the last
// flush, without waiting for it (sync_file_range), so the disk writes while
// the caller works; flush then waits for it and flushes the disk's cache.
func (c *commitlog) startFlush() error {
	err := c.inSegments(c.flushedPos.Load(), c.writePos.Load(), func(s *segment, off, n int64) error {
		err := c.injected("sync_file_range", s)
		if err == nil {
			err = unix.SyncFileRange(int(s.f.Fd()), off, n, unix.SYNC_FILE_RANGE_WRITE)
		}
		if err != nil {
			return c.pathError("sync_file_range", s, err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("storage: start commitlog write-back: %w", err)
	}
	return nil
}

// flush fdatasyncs the commitlog up to the current write position.
func (c *commitlog) flush() error {
	c.flushMu.Lock()
	defer c.flushMu.Unlock()
	pos := c.writePos.Load()
	if pos <= c.flushedPos.Load() {
		return nil
	}
	c.mu.RLock()
	s := c.segmentAt(pos - 1)
	var err error
	if s != nil {
		err = c.sync(s)
	}
	c.mu.RUnlock()
	if err != nil {
		return fmt.Errorf("storage: flush commitlog: %w", err)
	}
	c.flushedPos.Store(pos)
	if c.z != nil {
		c.z.flushed()
	}
	return nil
}

// truncate cuts the commitlog at end: segments starting at or after it are
// deleted and the rest of the segment holding it is zeroed, so no stale
// record can ever be read back after new ones.
func (c *commitlog) truncate(end int64) error {
	if c.z != nil {
		return c.z.reset(end, func() error { return c.cut(end) })
	}
	return c.cut(end)
}

// cutBack cuts the commitlog back to end from oldEnd, where the writer
// was, while it is open: segments starting at or after end are deleted,
// and the bytes of [end, oldEnd) in the segment holding end are zeroed and
// made durable. Past oldEnd the segment holds what it held before the
// writer came (zeros, or a reused segment's old records, which name other
// offsets), as it does past any end.
//
// What was flushed past end is gone, so the flushed position comes back to
// end: a flush must sync what is written there next (under flushMu, so
// that a flush under way cannot set it past the cut after).
func (c *commitlog) cutBack(end, oldEnd int64) error {
	c.flushMu.Lock()
	defer c.flushMu.Unlock()
	var err error
	if c.z != nil {
		err = c.z.reset(end, func() error { return c.cutTo(end, oldEnd) })
	} else {
		err = c.cutTo(end, oldEnd)
	}
	if err == nil && c.flushedPos.Load() > end {
		c.flushedPos.Store(end)
	}
	return err
}

func (c *commitlog) cut(end int64) error { return c.cutTo(end, -1) }

// cutTo deletes the segments from end on and zeroes the segment holding
// end from there to zeroTo (the segment's end when zeroTo is negative or
// past it).
func (c *commitlog) cutTo(end, zeroTo int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	keep := c.segs[:0]
	for _, s := range c.segs {
		if s.start < end {
			keep = append(keep, s)
			continue
		}
		s.f.Close()
		if err := os.Remove(filepath.Join(c.dir, segmentName(s.start))); err != nil {
			return fmt.Errorf("storage: remove segment after truncation: %w", err)
		}
	}
	c.segs = keep
	if s := c.segmentAt(end); s != nil {
		to := c.segSize
		if zeroTo >= 0 {
			to = min(to, zeroTo-s.start+int64(c.tailPad(zeroTo)))
		}
		if err := zeroRange(s.f, end-s.start, to); err != nil {
			return fmt.Errorf("storage: zero segment tail: %w", err)
		}
		if err := fdatasync(s.f); err != nil {
			return err
		}
	}
	return syncDir(c.dir)
}

// deleteOldest removes the oldest segment if it is not the active one and
// decide says it may go, and whether it may be kept as a spare. It returns
// whether it removed one.
func (c *commitlog) deleteOldest(decide func(s *segment) (drop, recycle bool, err error)) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.segs) < 2 {
		return false, nil
	}
	s := c.segs[0]
	drop, recycle, err := decide(s)
	if err != nil || !drop {
		return false, err
	}
	c.segs = c.segs[1:]
	return true, c.retire(s, recycle)
}

// scanResult is where a recovery scan stopped.
type scanResult struct {
	end       int64  // end of the last whole batch
	raftIndex uint64 // Raft index of that batch (the start's when none)
	last      int64  // offset of that batch's last record (the start's when none)
	records   int    // records in whole batches
	cause     error  // why the scan stopped before a clean end of data, if it did
}

// scan walks the records from offset from.dispatched (a record boundary,
// after the batch from describes) and stops at the end of data, at the first
// record that fails its checks, or at to (-1: no limit). Batches must carry
// Raft indexes above from.raftIndex, rising. fn, if not
// nil, sees each valid record as it is read, including those of a batch torn
// at the end: pass to = the end of an earlier scan to see whole batches only.
func (c *commitlog) scan(from checkpoint, to int64, fn func(rec []byte) error) (scanResult, error) {
	c.mu.RLock()
	segs := append([]*segment(nil), c.segs...)
	c.mu.RUnlock()
	res := scanResult{end: from.dispatched, raftIndex: from.raftIndex, last: from.last}
	pending, pendingIdx := 0, uint64(0) // records of the current, unfinished batch
	stop := func(cause error) (scanResult, error) {
		if cause == nil && pending > 0 {
			cause = fmt.Errorf("%w: batch with raft index %d is torn at commitlog offset %d", ErrCorrupt, pendingIdx, res.end)
		}
		res.cause = cause
		return res, nil
	}
	pos := from.dispatched
	var buf windowReader
	for i, s := range segs {
		if s.start+c.segSize <= pos {
			continue
		}
		pos = max(pos, s.start)
		buf.reset(s.f)
		lastSeg := i == len(segs)-1
		for pos < s.start+c.segSize {
			if to >= 0 && pos >= to {
				return stop(nil)
			}
			rel := pos - s.start
			left := c.segSize - rel
			if left < message.BlankSize {
				break // the tail is too short for anything; next segment
			}
			head, err := buf.peek(rel, message.BlankSize)
			if err != nil {
				return res, err
			}
			size := int64(binary.BigEndian.Uint32(head))
			magic := binary.BigEndian.Uint32(head[4:])
			if size == 0 && magic == 0 {
				if !lastSeg {
					return stop(fmt.Errorf("%w: zeros at commitlog offset %d in a segment that is not the last", ErrCorrupt, pos))
				}
				return stop(nil)
			}
			if magic == message.BlankMagic && size == left {
				break
			}
			if magic != message.Magic || size < message.MinSize || size > left {
				return stop(fmt.Errorf("%w: commitlog offset %d: record size %d, magic %#x", ErrCorrupt, pos, size, magic))
			}
			rec, err := buf.peek(rel, int(size))
			if err != nil {
				return res, err
			}
			if _, err := checkRecord(rec); err != nil {
				return stop(fmt.Errorf("commitlog offset %d: %w", pos, err))
			}
			idx := message.HeaderRaftIndex(rec)
			switch {
			case message.HeaderOffset(rec) != pos:
				return stop(fmt.Errorf("%w: record at commitlog offset %d claims offset %d", ErrCorrupt, pos, message.HeaderOffset(rec)))
			case pending == 0 && idx <= res.raftIndex:
				return stop(fmt.Errorf("%w: commitlog offset %d: raft index %d does not rise above %d", ErrCorrupt, pos, idx, res.raftIndex))
			case pending > 0 && idx != pendingIdx:
				return stop(fmt.Errorf("%w: commitlog offset %d: batch %d ends without its last record", ErrCorrupt, pos, pendingIdx))
			}
			if fn != nil {
				if err := fn(rec); err != nil {
					return res, err
				}
			}
			pending++
			pendingIdx = idx
			if message.HeaderSysFlag(rec)&message.SysFlagBatchEnd != 0 {
				res.records += pending
				pending = 0
				res.last = pos
				res.end = pos + size
				res.raftIndex = idx
			}
			pos += size
		}
		pos = s.start + c.segSize
	}
	return stop(nil)
}

// windowReader reads a segment file through a buffer of at least 1 MiB.
type windowReader struct {
	f    *os.File
	buf  []byte
	base int64 // file offset of buf[0]
	n    int   // valid bytes in buf
}

func (w *windowReader) reset(f *os.File) { w.f, w.base, w.n = f, 0, 0 }

func (w *windowReader) peek(off int64, n int) ([]byte, error) {
	if off >= w.base && off+int64(n) <= w.base+int64(w.n) {
		return w.buf[off-w.base : off-w.base+int64(n)], nil
	}
	if size := max(n, 1<<20); len(w.buf) < size {
		w.buf = make([]byte, size)
	}
	m, err := w.f.ReadAt(w.buf, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("storage: read segment: %w", err)
	}
	w.base, w.n = off, m
	if m < n {
		return nil, fmt.Errorf("%w: segment ends inside a record at file offset %d", ErrCorrupt, off)
	}
	return w.buf[:n], nil
}

func fdatasync(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.Fdatasync(int(fd)) }); err != nil {
		return err
	}
	return serr
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("storage: open dir for sync: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("storage: sync dir %s: %w", dir, err)
	}
	return nil
}
