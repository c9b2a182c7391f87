package lazyfs

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// undoLog keeps, for every backing file changed since its last fsync, what
// each change replaced. One lock serializes recording with changing, so a
// record always holds the bytes its change overwrote.
type undoLog struct {
	mu          sync.Mutex
	files       map[uint64]*fileUndo // by the backing file's inode number
	order       []*undoRecord        // every record kept, oldest first
	held        int64                // bytes of replaced data kept
	live        int                  // records in order not yet durable
	limit       int64
	ignoreFsync bool
	cut         bool // the power is off: changes are acknowledged and dropped
}

// fileUndo is one backing file's kept changes, oldest first, and a
// descriptor of its own for reading what a change replaces and putting it
// back: a handle's descriptor may be write-only, or closed by the time of
// the power cut, and the file may have been renamed.
type fileUndo struct {
	f       *os.File
	records []*undoRecord
}

// undoRecord is one change: before it, the file was oldSize bytes long
// and held old at off. write is the length of a write (0 for a size
// change), which a tear cuts in half.
type undoRecord struct {
	file    *fileUndo
	off     int64
	write   int64
	old     []byte
	oldSize int64
	durable bool // let go of: written back before the power cut
}

func newUndoLog(limit int64, ignoreFsync bool) *undoLog {
	return &undoLog{files: map[uint64]*fileUndo{}, limit: limit, ignoreFsync: ignoreFsync}
}

// change records what [off, end) of the file open as fd holds and its size,
// then runs apply, which changes that range or the size. write is the
// write's length, 0 for a change of size. With the power cut, apply does
// not run and the change is acknowledged: after a power cut nothing more
// reaches the disk, and the process that sent it is gone.
func (l *undoLog) change(fd int, off, end, write int64, apply func() error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cut {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("lazyfs: fstat: %w", err)
	}
	fu := l.files[st.Ino]
	if fu == nil {
		// A descriptor of its own, read-write whatever the handle's mode.
		f, err := os.OpenFile("/proc/self/fd/"+strconv.Itoa(fd), os.O_RDWR, 0)
		if err != nil {
			return fmt.Errorf("lazyfs: reopen: %w", err)
		}
		fu = &fileUndo{f: f}
		l.files[st.Ino] = fu
	}
	rec := &undoRecord{file: fu, off: off, write: write, oldSize: st.Size}
	if end = min(end, st.Size); end > off {
		rec.old = make([]byte, end-off)
		if _, err := fu.f.ReadAt(rec.old, off); err != nil {
			return fmt.Errorf("lazyfs: read what a change replaces: %w", err)
		}
	}
	fu.records = append(fu.records, rec)
	l.order = append(l.order, rec)
	l.held += int64(len(rec.old))
	l.live++
	l.writeBack()
	// A failed change is still undone at the power cut: the record holds
	// what the range held before, whatever part of the change landed.
	return apply()
}

// writeBack makes the oldest kept changes durable until what is kept fits
// the limit.
func (l *undoLog) writeBack() {
	for l.held > l.limit && len(l.order) > 0 {
		rec := l.order[0]
		l.order[0] = nil
		l.order = l.order[1:]
		if rec.durable {
			continue
		}
		// A file's records are in order, so its oldest is this one.
		fu := rec.file
		fu.records[0] = nil
		fu.records = fu.records[1:]
		l.forget(rec)
	}
}

func (l *undoLog) forget(rec *undoRecord) {
	rec.durable = true
	l.held -= int64(len(rec.old))
	rec.old = nil
	l.live--
	// Records made durable by an fsync stay in order until passed; drop
	// them once they are most of it, so that order stays the size of what
	// is kept, not of every write since the mount.
	if len(l.order) > 1024 && l.live < len(l.order)/4 {
		live := l.order[:0]
		for _, r := range l.order {
			if !r.durable {
				live = append(live, r)
			}
		}
		clear(l.order[len(live):])
		l.order = live
	}
}

// synced makes every kept change of the file open as fd durable: it was
// fsynced. A disk that ignores fsync keeps them.
func (l *undoLog) synced(fd int) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ignoreFsync || l.cut {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("lazyfs: fstat: %w", err)
	}
	l.drop(st.Ino)
	return nil
}

// unlinked lets go of a file's kept changes once no name links it: they
// can no longer be seen.
func (l *undoLog) unlinked(ino uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fu := l.files[ino]
	if fu == nil {
		return
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(fu.f.Fd()), &st); err == nil && st.Nlink == 0 {
		l.drop(ino)
	}
}

func (l *undoLog) drop(ino uint64) {
	fu := l.files[ino]
	if fu == nil {
		return
	}
	for _, rec := range fu.records {
		l.forget(rec)
	}
	fu.f.Close()
	delete(l.files, ino)
}

// cutPower stops every change from landing from now on.
func (l *undoLog) cutPower() {
	l.mu.Lock()
	l.cut = true
	l.mu.Unlock()
}

// Loss is what a power cut undid.
type Loss struct {
	Files   int   // files that lost changes
	Changes int   // changes undone (a torn one counts)
	Bytes   int64 // bytes put back
}

// undoAll puts back, newest first, what every kept change replaced, and
// restores the power. With tear, the oldest undone write of each file
// keeps its first half (whole 512-byte sectors of it).
func (l *undoLog) undoAll(tear bool) (Loss, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var loss Loss
	var errs []error
	for ino, fu := range l.files {
		if len(fu.records) > 0 {
			loss.Files++
		}
		for i := len(fu.records) - 1; i >= 0; i-- {
			rec := fu.records[i]
			keep := int64(0)
			if tear && i == 0 && rec.write > 0 {
				keep = rec.write / 2 &^ 511
			}
			n, err := rec.undo(fu.f, keep)
			loss.Changes++
			loss.Bytes += n
			errs = append(errs, err)
		}
		fu.f.Close()
		delete(l.files, ino)
	}
	clear(l.order)
	l.order, l.held, l.live, l.cut = l.order[:0], 0, 0, false
	return loss, errors.Join(errs...)
}

// undo puts back what the change replaced, but for its first keep bytes,
// and the size the file had (or, for a write that grew it, the size that
// its kept part gives).
func (rec *undoRecord) undo(f *os.File, keep int64) (int64, error) {
	old := rec.old[min(keep, int64(len(rec.old))):]
	if len(old) > 0 {
		if _, err := f.WriteAt(old, rec.off+int64(len(rec.old)-len(old))); err != nil {
			return 0, fmt.Errorf("lazyfs: undo a write to %s: %w", f.Name(), err)
		}
	}
	size := rec.oldSize
	if keep > 0 && rec.off+keep > size {
		size = rec.off + keep
	}
	if err := f.Truncate(size); err != nil {
		return 0, fmt.Errorf("lazyfs: undo a size change of %s: %w", f.Name(), err)
	}
	return int64(len(old)), nil
}
