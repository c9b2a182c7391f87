package storage

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// preallocator allocates the blocks of the next commitlog segment, ahead
// of the writer, in the background (RocketMQ prepares its next mapped file
// the same way), so that the writer's fdatasyncs do not allocate blocks: a
// sync into a growing or sparse file costs 2-3 times one into allocated
// blocks (256 KiB appends + fdatasync: 0.8 k/s growing against 2.0-2.6
// k/s). Segments are created sparse, so creating one costs nothing
// whatever its size, and the preallocator never works in the segment the
// writer is appending to: zeroing there competed with the writer's own
// writes and syncs (measured: sync appends 1.8x slower).
//
// By default it writes zeros into them, through the page cache; with
// Config.PreallocateBy PreallocateFallocate it allocates them with
// fallocate instead (unwritten extents: no data is written, and the blocks
// read as zeros until the writer writes them). Each has its price, measured
// in alternated pairs of deploy/bench-local.sh on a group of three
// replicas sharing one disk (broker/README.md, fourteenth sitting): zeros
// double what each replica writes to the disk, and batched publish ran
// near the disk's bandwidth, 1.20-1.21x faster fallocated (ahead in 7 pairs of
// 8); but a sync into fallocated blocks also writes the extents it
// converts, and small synchronous sends paid that: send to receive at a
// low load had its p50 1.46x as long fallocated (4 pairs of 4), 16 sync
// senders were behind in 5 pairs of 8. Zeros stay the default.
//
// The next segment is prepared under a temporary name (<start>.alloc) and
// renamed when the writer rolls into it, so an empty next segment never
// appears in the commitlog. The preallocator keeps the next segment
// allocated up to the writer's offset in the active one plus
// PreallocateAhead, so its work spreads out as the writer advances and the
// next segment is whole by the time the writer reaches it. (An earlier
// version stopped at PreallocateAhead past the writer's commitlog offset:
// it prepared only the first PreallocateAhead bytes of each segment after
// the first, the rest was appended into holes, and sync appends took 1.4x
// as long.)
//
// Zeros, when written, go through the page cache with no sync per chunk: a
// sync per MiB put a device cache flush between the writer's own (sync
// appends 1.15 ms a batch against 0.93–1.09 ms without). Each chunk's
// write-back is started as soon as it is written, though (startWriteBack:
// no flush, no wait), or the zeros pile up dirty and go to the disk in one
// burst. The segment is fdatasynced once, when it is whole, so its blocks
// (and, fallocated, its extents) are on the disk before the writer rolls
// into it; a crash before that leaves only a <start>.alloc file, which
// opening the store deletes.
//
// The preallocator also drops the page cache behind the writer (behind
// and commitlog.dropCache; every flush wakes it for that), which bounds
// the commitlog's share of the page cache, and the zeros it writes next go
// into pages the kernel hands back, not fresh ones. With
// Config.PreallocateAhead off it runs for that alone (ahead 0).
//
// While the writer is idle (no append for Config's idleQuiet, 50 ms) the
// preallocator goes on past ahead, up to idleAhead (Config.PreallocateIdle):
// the zeros then take a disk that has nothing else to do, and appends
// that come after run into blocks already written, with no zeros beside
// them, for as long as that lead lasts. An append stops it after the chunk
// in progress; then it keeps to ahead again, so under load a roll asks for
// no more than ahead at once (a whole segment at once competed with the
// writer: see Config.PreallocateAhead). Over a sustained load the zeros
// are the same; what moves is when they are written.
//
// The writer and the preallocator never work on the same bytes at once:
// the writer claims the range it writes (waiting if the preallocator is
// inside it) and so moves the preallocator past it.
type preallocator struct {
	c         *commitlog
	ahead     int64         // how far past the writer to keep the next segment prepared
	idleAhead int64         // how far while the writer is idle (never less than ahead)
	quiet     time.Duration // no append for this long: the writer is idle
	log       *slog.Logger

	mu         sync.Mutex
	cond       *sync.Cond
	preparedTo int64 // commitlog offset up to which the files are allocated
	writeHigh  int64 // the writer's highest written offset
	busyFrom   int64 // [busyFrom, busyTo): being allocated now, outside mu
	busyTo     int64
	next       *os.File // the following segment, as <start>.alloc
	nextStart  int64
	nextReady  bool // next is a reused spare: nothing to allocate
	stopped    bool

	// The writer's idleness: appends counts the writer's claims; the
	// timer (watchForIdle) sets idle when none came while it ran.
	appends uint64
	quietT  *time.Timer // armed; nil when not
	idle    bool        // no append since quietT was armed, quiet ago
	done    chan struct{}

	keep    int64 // page cache kept behind the writer; negative: all
	dropped int64 // commitlog offset below which the page cache was dropped
}

const prepareChunk = 1 << 20

// preparedSuffix names a segment being prepared: <start>.alloc until the
// writer rolls into it (a start removes one it finds).
const preparedSuffix = ".alloc"

func startPreallocator(c *commitlog, ahead, idleAhead int64, quiet time.Duration, keep int64, log *slog.Logger) *preallocator {
	pos := c.writePos.Load()
	z := &preallocator{c: c, ahead: ahead, idleAhead: max(ahead, idleAhead), quiet: quiet, log: log, preparedTo: pos, writeHigh: pos, done: make(chan struct{}), keep: keep, dropped: pos}
	z.cond = sync.NewCond(&z.mu)
	go z.run()
	return z
}

func (z *preallocator) run() {
	defer close(z.done)
	for {
		z.mu.Lock()
		for !z.stopped && !z.prepareDue() && !z.dropDue() {
			z.watchForIdle()
			z.cond.Wait()
		}
		if z.stopped {
			z.mu.Unlock()
			return
		}
		dropFrom, dropTo := z.behind()
		if !z.prepareDue() {
			z.mu.Unlock()
			z.c.dropCache(dropFrom, dropTo)
			continue
		}
		from := z.preparedTo
		segStart := from - from%z.c.segSize
		to := min(from+prepareChunk, segStart+z.c.segSize)
		f, err := z.fileFor(segStart)
		if err == nil && f == z.next && z.nextReady { // a spare: nothing to allocate
			z.preparedTo = segStart + z.c.segSize
			z.cond.Broadcast()
			z.mu.Unlock()
			z.c.dropCache(dropFrom, dropTo)
			continue
		}
		if err != nil || f == nil {
			if err != nil {
				z.log.Warn("commitlog preallocation stopped", "err", err)
			}
			z.stopped = true // appends go on, into sparse blocks
			z.mu.Unlock()
			return
		}
		// The next segment is synced once, when whole; the active one (only
		// before the first roll) is synced by the writer's own flushes.
		syncNow := f == z.next && to == segStart+z.c.segSize
		z.busyFrom, z.busyTo = from, to
		z.mu.Unlock()

		z.c.dropCache(dropFrom, dropTo)
		zeros, err := z.c.allocate(f, from-segStart, to-segStart)
		if err == nil {
			switch {
			case syncNow:
				err = fdatasync(f)
			case zeros:
				err = z.startWriteBack(f, from-segStart, to-from)
			}
		}

		z.mu.Lock()
		z.busyFrom, z.busyTo = 0, 0
		if err == nil {
			z.preparedTo = max(z.preparedTo, to)
		} else {
			z.log.Warn("commitlog preallocation failed", "err", err)
			z.stopped = true
		}
		z.cond.Broadcast()
		z.mu.Unlock()
	}
}

// startWriteBack starts writing the zeros just written to [off, off+n)
// of f to the disk, without waiting for them and without a device cache
// flush (sync_file_range SYNC_FILE_RANGE_WRITE), so that they leave the
// page cache at the pace they are written. Left to the kernel, they stayed
// dirty until its 30 s expiry (vm.dirty_expire_centisecs): 15 s of batched
// publish left 2.3 GB of dirty zeros on three replicas, written back all
// at once some 25 s later, inside what ran then. A sync16 run at that
// moment had a second of 96-137 msgs/s and a send of 399-476 ms; with each
// chunk's write-back started here, its worst second was 7114-7202 msgs/s,
// its slowest send 45-83 ms, the dirty pages peaked at 8 MB, and the 30 s
// run's rate went from 8285-8359 to 9165-9391 msgs/s (2 pairs, hand-started
// clusters, 2026-12-05, broker/README.md). The batched publish itself kept
// its rate.
func (z *preallocator) startWriteBack(f *os.File, off, n int64) error {
	err := z.c.injectedAt("sync_file_range", f.Name())
	if err == nil {
		err = unix.SyncFileRange(int(f.Fd()), off, n, unix.SYNC_FILE_RANGE_WRITE)
	}
	if err != nil {
		return &os.PathError{Op: "sync_file_range", Path: f.Name(), Err: err}
	}
	return nil
}

// prepareDue reports whether there is allocating to do in the segment
// after the active one: the preallocator keeps it allocated up to the
// writer's position in the active segment plus ahead, so its work runs at
// the writer's pace and the next segment is whole when the writer rolls
// into it, and while the writer is idle up to idleAhead. (Before the
// first segment exists, the first, up to ahead past the writer.) Caller
// holds mu.
func (z *preallocator) prepareDue() bool {
	return z.short(z.ahead) || (z.idle && z.short(z.idleAhead))
}

// watchForIdle arms the timer that finds the writer idle, when there is
// work past ahead for an idle writer and none is armed. Caller holds mu.
func (z *preallocator) watchForIdle() {
	if z.quietT != nil || z.idle || z.idleAhead <= z.ahead || !z.short(z.idleAhead) {
		return
	}
	from := z.appends
	z.quietT = time.AfterFunc(z.quiet, func() {
		z.mu.Lock()
		defer z.mu.Unlock()
		z.quietT = nil
		z.idle = z.appends == from && !z.stopped
		z.cond.Broadcast() // idle or not: the loop arms the next timer
	})
}

// short reports whether the segment to prepare is prepared less than
// ahead past the writer. Caller holds mu.
func (z *preallocator) short(ahead int64) bool {
	if ahead <= 0 { // dropping the page cache only
		return false
	}
	z.c.mu.RLock()
	var next, target int64
	if n := len(z.c.segs); n > 0 {
		next = z.c.segs[n-1].start + z.c.segSize
		target = z.writeHigh + z.c.segSize + ahead // writeHigh is in the active segment
	} else {
		next = z.writeHigh - z.writeHigh%z.c.segSize
		target = z.writeHigh + ahead
	}
	z.c.mu.RUnlock()
	z.preparedTo = max(z.preparedTo, next) // never the active segment
	return z.preparedTo < next+z.c.segSize && z.preparedTo < target
}

// fileFor returns the file of the segment starting at segStart: the active
// segment, or the next one (created sparse under its temporary name).
// Caller holds mu.
func (z *preallocator) fileFor(segStart int64) (*os.File, error) {
	z.c.mu.RLock()
	var last *segment
	if n := len(z.c.segs); n > 0 {
		last = z.c.segs[n-1]
	}
	z.c.mu.RUnlock()
	if last != nil && last.start == segStart {
		return last.f, nil
	}
	if last != nil && segStart != last.start+z.c.segSize {
		return nil, fmt.Errorf("storage: nothing to preallocate at %d after segment %d", segStart, last.start)
	}
	if z.next != nil && z.nextStart != segStart {
		z.dropNext()
	}
	if z.next == nil {
		f, err := z.c.reuseSpare(segStart)
		if err != nil {
			z.log.Warn("commitlog spare not reused", "err", err)
		}
		z.nextReady = f != nil
		if f == nil {
			if f, err = createSparse(filepath.Join(z.c.dir, segmentName(segStart)+preparedSuffix), z.c.segSize); err != nil {
				return nil, err
			}
		}
		z.next, z.nextStart = f, segStart
	}
	return z.next, nil
}

// claim is called by the writer before it writes [pos, end).
func (z *preallocator) claim(pos, end int64) {
	z.mu.Lock()
	for pos < z.busyTo && z.busyFrom < end {
		z.cond.Wait()
	}
	z.preparedTo = max(z.preparedTo, end)
	z.writeHigh = max(z.writeHigh, end)
	z.appends++
	z.idle = false
	switch {
	case z.ahead > 0 && z.mayPrepare(z.ahead):
		z.cond.Broadcast()
	case z.quietT == nil && z.idleAhead > z.ahead && z.mayPrepare(z.idleAhead):
		z.cond.Broadcast() // it may have work once the writer is idle: it arms the timer
	}
	z.mu.Unlock()
}

// mayPrepare is short(ahead) for the writer's side, without the segment
// list's lock and in whole chunks: whether the next segment is prepared
// less than a chunk short of ahead past the writer, or short of its end.
// A whole next segment wakes no one: with PreallocateIdle a segment,
// every append would otherwise wake the preallocator for nothing. Caller
// holds mu.
func (z *preallocator) mayPrepare(ahead int64) bool {
	nextEnd := z.writeHigh - z.writeHigh%z.c.segSize + 2*z.c.segSize
	return z.preparedTo < min(nextEnd, z.writeHigh+z.c.segSize+ahead-prepareChunk)
}

// lockForRoll is taken by the writer around rolling into the segment at
// start: it waits for allocating in that segment to finish and keeps the
// preallocator out until unlocked. takeNext, under it, hands over the
// prepared file of that segment, or nil.
func (z *preallocator) lockForRoll(start int64) {
	z.mu.Lock()
	for z.busyTo > start && z.busyFrom < start+z.c.segSize {
		z.cond.Wait()
	}
}

// unlock ends a roll; the preallocator may now work on the segment after it.
func (z *preallocator) unlock() {
	z.cond.Broadcast()
	z.mu.Unlock()
}

func (z *preallocator) takeNext(start int64) *os.File {
	if z.next == nil || z.nextStart != start {
		return nil
	}
	f := z.next
	z.next, z.nextReady = nil, false
	return f
}

// reset is called when the commitlog is cut at end: what the preallocator
// prepared past it no longer fits.
func (z *preallocator) reset(end int64, cut func() error) error {
	z.mu.Lock()
	defer z.mu.Unlock()
	for z.busyTo != 0 {
		z.cond.Wait()
	}
	z.dropNext()
	z.writeHigh = end
	z.preparedTo = end - end%z.c.segSize + z.c.segSize // cut zeroes the rest of the segment
	err := cut()
	z.cond.Broadcast()
	return err
}

func (z *preallocator) dropNext() {
	switch {
	case z.next == nil:
		return
	case z.nextReady:
		z.c.returnSpare(z.next)
	default:
		z.next.Close()
		os.Remove(z.next.Name())
	}
	z.next, z.nextReady = nil, false
}

func (z *preallocator) stop() {
	z.mu.Lock()
	z.stopped = true
	if z.quietT != nil {
		z.quietT.Stop()
		z.quietT = nil
	}
	z.cond.Broadcast()
	z.mu.Unlock()
	<-z.done
	z.mu.Lock()
	z.dropNext()
	z.mu.Unlock()
}

// allocate gives [from, to) of f, a segment being prepared, its blocks:
// with zeros written through the page cache, or with fallocate, which
// writes none, where Config.PreallocateBy asks for it and the file system
// has it (EOPNOTSUPP: zeros after all; ext4, XFS and tmpfs have it). zeros
// says which: zeros' pages are dirty in the page cache.
func (c *commitlog) allocate(f *os.File, from, to int64) (zeros bool, err error) {
	if c.fallocate {
		err = c.injectedAt("fallocate", f.Name())
		if err == nil {
			err = unix.Fallocate(int(f.Fd()), 0, from, to-from)
		}
		if !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.ENOSYS) {
			if err != nil {
				return false, &os.PathError{Op: "fallocate", Path: f.Name(), Err: err}
			}
			return false, nil
		}
	}
	return true, zeroRange(f, from, to)
}

// createSparse creates path as a file of size bytes, all holes.
func createSparse(path string, size int64) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("storage: create segment: %w", err)
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("storage: size segment %s: %w", filepath.Base(path), err)
	}
	return f, nil
}

// flushed is called by the commitlog after a flush: cache behind the
// writer may now be dropped.
func (z *preallocator) flushed() {
	z.mu.Lock()
	if z.dropDue() {
		z.cond.Broadcast()
	}
	z.mu.Unlock()
}

// dropDue reports whether behind has a range to drop. Caller holds mu.
func (z *preallocator) dropDue() bool {
	return z.keep >= 0 && z.dropLimit() > z.dropped
}

// dropLimit is where dropping may reach: keep behind the durable end of
// the writer's bytes, rounded down to a chunk. Caller holds mu.
func (z *preallocator) dropLimit() int64 {
	to := min(z.c.flushedPos.Load(), z.writeHigh) - z.keep
	return to - to%prepareChunk
}

// behind returns the range of the commitlog whose page cache is to be
// dropped now: durable bytes more than keep (Config.PageCacheBehind)
// behind the writer, in whole chunks, not dropped before. Caller holds mu.
func (z *preallocator) behind() (from, to int64) {
	if !z.dropDue() {
		return 0, 0
	}
	from, to = z.dropped, z.dropLimit()
	z.dropped = to
	return from, to
}
