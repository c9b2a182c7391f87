package storage

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
)

// cqEntrySize is the size of a consume queue entry: commitlog offset (8),
// record size (4), tag hash (8).
const cqEntrySize = 20

type queueKey struct {
	topic string
	id    int32
}

type cqEntry struct {
	offset  int64
	size    int32
	tagHash int64
}

// consumeQueue is the index of one topic's queue into the commitlog: entry
// n is the message at queue offset n. Files hold perFile entries each, are
// named by their first queue offset, and start at multiples of perFile.
// Entries are written by the single dispatcher (Store.Append and recovery),
// then published by raising max; readers copy entries below max under mu.
type consumeQueue struct {
	key     queueKey
	dir     string
	perFile int64

	mu    sync.RWMutex // guards files; held shared while entries are copied
	files []*mappedFile

	min atomic.Int64 // first readable queue offset
	max atomic.Int64 // next queue offset to be written
}

func queueDir(root string, k queueKey) string {
	return filepath.Join(root, k.topic, strconv.Itoa(int(k.id)))
}

// openConsumeQueue opens the files of a queue as they are on disk; recover
// then decides where its data ends.
func openConsumeQueue(root string, k queueKey, perFile int64) (*consumeQueue, error) {
	q := &consumeQueue{key: k, dir: queueDir(root, k), perFile: perFile}
	entries, err := os.ReadDir(q.dir)
	if err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("storage: read consume queue dir: %w", err)
	}
	var firsts []int64
	for _, e := range entries {
		first, err := strconv.ParseInt(e.Name(), 10, 64)
		if err != nil || len(e.Name()) != 20 || first%perFile != 0 {
			continue
		}
		firsts = append(firsts, first)
	}
	sort.Slice(firsts, func(i, j int) bool { return firsts[i] < firsts[j] })
	for i, first := range firsts {
		if i > 0 && first != firsts[i-1]+perFile {
			q.close()
			return nil, fmt.Errorf("storage: consume queue %s@%d has a hole before file %s", k.topic, k.id, segmentName(first))
		}
		f, err := openMapped(filepath.Join(q.dir, segmentName(first)), first, perFile*cqEntrySize, false)
		if err != nil {
			q.close()
			return nil, err
		}
		q.files = append(q.files, f)
	}
	return q, nil
}

func (q *consumeQueue) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, f := range q.files {
		f.close()
	}
	q.files = nil
}

// fileFor returns the file holding queue offset off. Caller holds mu.
func (q *consumeQueue) fileFor(off int64) *mappedFile {
	if len(q.files) == 0 || off < q.files[0].first {
		return nil
	}
	i := (off - q.files[0].first) / q.perFile
	if i >= int64(len(q.files)) {
		return nil
	}
	return q.files[i]
}

// pathFor is the path of the file holding queue offset off, "" when none
// does.
func (q *consumeQueue) pathFor(off int64) string {
	q.mu.RLock()
	defer q.mu.RUnlock()
	if f := q.fileFor(off); f != nil {
		return f.path
	}
	return ""
}

// at reads the entry at off. Caller holds mu.
func (q *consumeQueue) at(off int64) (cqEntry, bool) {
	f := q.fileFor(off)
	if f == nil {
		return cqEntry{}, false
	}
	b := f.data[(off-f.first)*cqEntrySize:]
	return cqEntry{
		offset:  int64(binary.BigEndian.Uint64(b)),
		size:    int32(binary.BigEndian.Uint32(b[8:])),
		tagHash: int64(binary.BigEndian.Uint64(b[12:])),
	}, true
}

func (q *consumeQueue) writeAt(f *mappedFile, off int64, e cqEntry) {
	b := f.data[(off-f.first)*cqEntrySize:]
	binary.BigEndian.PutUint64(b, uint64(e.offset))
	binary.BigEndian.PutUint32(b[8:], uint32(e.size))
	binary.BigEndian.PutUint64(b[12:], uint64(e.tagHash))
	f.dirty.Store(true)
}

// put records the message at queue offset off. Re-putting an entry the
// queue already holds (recovery re-dispatching past the checkpoint) is a
// no-op when it matches; a mismatch or a gap is an error that makes
// recovery rebuild the queues from the commitlog. With fresh (a rebuild),
// an empty queue may start at any offset: retention may have deleted the
// records before it.
func (q *consumeQueue) put(off int64, e cqEntry, fresh bool) error {
	max := q.max.Load()
	if off < max {
		q.mu.RLock()
		got, ok := q.at(off)
		q.mu.RUnlock()
		if ok && got == e {
			return nil
		}
		return fmt.Errorf("%w: consume queue %s@%d offset %d holds %+v, commitlog says %+v", ErrCorrupt, q.key.topic, q.key.id, off, got, e)
	}
	if off > max {
		if !fresh || q.min.Load() != max {
			return fmt.Errorf("%w: consume queue %s@%d: gap from %d to %d", ErrCorrupt, q.key.topic, q.key.id, max, off)
		}
		if err := q.reset(off); err != nil {
			return err
		}
	}
	q.mu.RLock()
	f := q.fileFor(off)
	q.mu.RUnlock()
	if f == nil {
		var err error
		if f, err = q.addFile(off - off%q.perFile); err != nil {
			return err
		}
	}
	q.writeAt(f, off, e)
	q.max.Store(off + 1)
	return nil
}

func (q *consumeQueue) addFile(first int64) (*mappedFile, error) {
	if err := os.MkdirAll(q.dir, 0o755); err != nil {
		return nil, fmt.Errorf("storage: create consume queue dir: %w", err)
	}
	f, err := openMapped(filepath.Join(q.dir, segmentName(first)), first, q.perFile*cqEntrySize, true)
	if err != nil {
		return nil, err
	}
	q.mu.Lock()
	q.files = append(q.files, f)
	q.mu.Unlock()
	return f, nil
}

// reset empties the queue and makes off its next offset.
func (q *consumeQueue) reset(off int64) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, f := range q.files {
		if err := f.remove(); err != nil {
			return fmt.Errorf("storage: reset consume queue: %w", err)
		}
	}
	q.files = nil
	q.min.Store(off)
	q.max.Store(off)
	return nil
}

// entries copies up to n entries from off (min <= off < max) into dst.
func (q *consumeQueue) entries(dst []cqEntry, off int64, n int) []cqEntry {
	q.mu.RLock()
	defer q.mu.RUnlock()
	end := min(q.max.Load(), off+int64(n))
	for ; off < end; off++ {
		e, ok := q.at(off)
		if !ok {
			break
		}
		dst = append(dst, e)
	}
	return dst
}

// recover finds where the queue's data ends, drops entries that point at or
// past the commitlog's end clEnd (their records were cut), and sets min to
// the first entry whose record is still in the commitlog (at or past clMin).
func (q *consumeQueue) recover(clMin, clEnd int64) error {
	q.mu.Lock()
	if len(q.files) == 0 {
		q.mu.Unlock()
		return nil
	}
	last := q.files[len(q.files)-1]
	max := last.first
	for max < last.first+q.perFile {
		if e, _ := q.at(max); e.size == 0 {
			break
		}
		max++
	}
	for max > q.files[0].first {
		e, _ := q.at(max - 1)
		if e.size != 0 && e.offset+int64(e.size) <= clEnd {
			break
		}
		max--
		q.writeAt(q.fileFor(max), max, cqEntry{})
	}
	keep := q.files[:0]
	for _, f := range q.files {
		if f.first > max || (f.first == max && f != q.files[0]) {
			if err := f.remove(); err != nil {
				q.mu.Unlock()
				return fmt.Errorf("storage: remove consume queue file: %w", err)
			}
			continue
		}
		keep = append(keep, f)
	}
	q.files = keep
	q.max.Store(max)
	if len(q.files) > 0 {
		q.min.Store(q.files[0].first)
	} else {
		q.min.Store(max)
	}
	q.mu.Unlock()
	q.skipRemoved(clMin)
	return nil
}

// skipRemoved raises min past entries whose records retention deleted, or
// that are zero (the head of a queue rebuilt from a later offset).
func (q *consumeQueue) skipRemoved(clMin int64) {
	q.mu.RLock()
	defer q.mu.RUnlock()
	min, max := q.min.Load(), q.max.Load()
	for min < max {
		e, ok := q.at(min)
		if ok && e.size != 0 && e.offset >= clMin {
			break
		}
		min++
	}
	q.min.Store(min)
}

// deleteBelow removes whole files, never the last, whose entries all point
// below the commitlog's minimum clMin, then raises min.
func (q *consumeQueue) deleteBelow(clMin int64) error {
	q.mu.Lock()
	var err error
	for len(q.files) > 1 {
		f := q.files[0]
		e, _ := q.at(f.first + q.perFile - 1)
		if e.offset >= clMin {
			break
		}
		if err = f.remove(); err != nil {
			break
		}
		q.files = q.files[1:]
	}
	if len(q.files) > 0 && q.min.Load() < q.files[0].first {
		q.min.Store(q.files[0].first)
	}
	q.mu.Unlock()
	q.skipRemoved(clMin)
	if err != nil {
		return fmt.Errorf("storage: retention of consume queue %s@%d: %w", q.key.topic, q.key.id, err)
	}
	return nil
}

// sync writes the queue files' dirty pages without holding q.mu, so the
// writer's puts do not wait for the msync (see keyIndex.sync).
func (q *consumeQueue) sync() error {
	q.mu.RLock()
	files := slices.Clone(q.files)
	q.mu.RUnlock()
	for _, f := range files {
		if err := f.sync(); err != nil {
			return err
		}
	}
	return nil
}
