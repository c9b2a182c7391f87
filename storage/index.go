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

	"github.com/raftmq/raftmq/message"
)

// keyIndex finds messages by key. It is a chain of hash-index files in the
// manner of RocketMQ's IndexFile: a header, a table of slots each holding
// the number of the newest entry whose key hashes there, and entries linked
// to the previous entry of the same slot. Files are named by the commitlog
// offset of their first entry; a full file is followed by a new one.
//
//	header  64 bytes: magic 4, pad 4, begin store time 8, end store time 8,
//	        pad 16, entry count 4, slots 4, entries 4 (the file's geometry)
//	slots   4 bytes each: entry number (1-based), 0 for none
//	entries 28 bytes each: key hash 8, commitlog offset 8, store time 8, previous entry 4
//
// Hashes collide and chains cross keys: callers read the records found and
// compare their keys.
type keyIndex struct {
	dir     string
	slots   int // geometry of new files (Config.IndexSlots, IndexEntries)
	entries int

	mu    sync.RWMutex
	files []*indexFile
}

// indexFile is one mapped index file with its geometry, read from its
// header: a change of Config.IndexSlots or IndexEntries applies to new
// files only.
type indexFile struct {
	*mappedFile
	slots   int
	entries int
}

// The geometry of index files written before it was kept in the header:
// the defaults of that time, or the configuration.
const (
	legacyIndexSlots   = 1_000_000
	legacyIndexEntries = 4_000_000

	maxIndexSlots   = 1 << 28 // a 1 GiB slot table
	maxIndexEntries = 1<<31 - 1
)

const (
	indexMagic      uint32 = 0x52514958 // "RQIX"
	indexHeaderSize        = 64
	indexEntrySize         = 28
)

func keyHash[T string | []byte](key T) uint64 { return message.FNV64a(key) }

func indexFileSize(slots, entries int) int64 {
	return indexHeaderSize + int64(slots)*4 + int64(entries)*indexEntrySize
}

func openKeyIndex(dir string, slots, entries int) (*keyIndex, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("storage: create index dir: %w", err)
	}
	x := &keyIndex{dir: dir, slots: slots, entries: entries}
	names, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("storage: read index dir: %w", err)
	}
	var firsts []int64
	for _, e := range names {
		if first, err := strconv.ParseInt(e.Name(), 10, 64); err == nil && len(e.Name()) == 20 {
			firsts = append(firsts, first)
		}
	}
	sort.Slice(firsts, func(i, j int) bool { return firsts[i] < firsts[j] })
	for _, first := range firsts {
		f, err := x.openFile(first)
		if err != nil {
			x.close()
			return nil, err
		}
		x.files = append(x.files, f)
	}
	return x, nil
}

// openFile maps the existing index file named first, sized by the geometry
// its header gives.
func (x *keyIndex) openFile(first int64) (*indexFile, error) {
	path := filepath.Join(x.dir, segmentName(first))
	bad := fmt.Errorf("%w: index file %s has a bad header", ErrCorrupt, segmentName(first))
	fd, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("storage: open %s: %w", path, err)
	}
	var h [indexHeaderSize]byte
	_, err = fd.ReadAt(h[:], 0)
	fi, serr := fd.Stat()
	fd.Close()
	if err != nil || serr != nil || binary.BigEndian.Uint32(h[:]) != indexMagic {
		return nil, bad
	}
	be := binary.BigEndian
	slots, entries := int(be.Uint32(h[44:])), int(be.Uint32(h[48:]))
	if slots == 0 && entries == 0 { // written before the header kept them
		slots, entries = x.slots, x.entries
		if fi.Size() != indexFileSize(slots, entries) {
			slots, entries = legacyIndexSlots, legacyIndexEntries
		}
	}
	if slots <= 0 || entries <= 0 || slots > maxIndexSlots || entries > maxIndexEntries {
		return nil, bad
	}
	m, err := openMapped(path, first, indexFileSize(slots, entries), false)
	if err != nil {
		return nil, err
	}
	f := &indexFile{mappedFile: m, slots: slots, entries: entries}
	if f.count() > entries {
		m.close()
		return nil, bad
	}
	return f, nil
}

func (x *keyIndex) close() {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, f := range x.files {
		f.close()
	}
	x.files = nil
}

// Header and entry accessors on a mapped index file.
func (f *indexFile) count() int { return int(binary.BigEndian.Uint32(f.data[40:])) }
func (f *indexFile) slotAt(s int) int {
	return int(binary.BigEndian.Uint32(f.data[indexHeaderSize+4*s:]))
}
func (f *indexFile) setSlot(s, n int) {
	binary.BigEndian.PutUint32(f.data[indexHeaderSize+4*s:], uint32(n))
}
func (f *indexFile) entry(n int) []byte {
	off := indexHeaderSize + 4*f.slots + (n-1)*indexEntrySize
	return f.data[off : off+indexEntrySize]
}

// indexKey is one key of a record, to index.
type indexKey struct {
	hash      uint64 // keyHash of the key
	off       int64  // commitlog offset of the record
	storeTime int64
}

// put indexes keys, in order, under one lock (a batch of 256 messages
// brings 512 keys). Caller is the single dispatcher.
func (x *keyIndex) put(keys []indexKey) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	be := binary.BigEndian
	for len(keys) > 0 {
		f, err := x.fileWithRoom(keys[0])
		if err != nil {
			return err
		}
		n := f.count()
		fits := keys[:min(len(keys), f.entries-n)]
		newest := int64(be.Uint64(f.data[16:]))
		for _, k := range fits {
			n++
			slot := int(k.hash % uint64(f.slots))
			e := f.entry(n)
			be.PutUint64(e, k.hash)
			be.PutUint64(e[8:], uint64(k.off))
			be.PutUint64(e[16:], uint64(k.storeTime))
			be.PutUint32(e[24:], uint32(f.slotAt(slot)))
			f.setSlot(slot, n)
			newest = max(newest, k.storeTime)
		}
		be.PutUint64(f.data[16:], uint64(newest))
		be.PutUint32(f.data[40:], uint32(n))
		f.dirty.Store(true)
		keys = keys[len(fits):]
	}
	return nil
}

// fileWithRoom returns the newest index file, or a new one when it is full
// or there is none; k is the first key to go in. Caller holds mu.
func (x *keyIndex) fileWithRoom(k indexKey) (*indexFile, error) {
	if n := len(x.files); n > 0 && x.files[n-1].count() < x.files[n-1].entries {
		return x.files[n-1], nil
	}
	first := k.off
	if n := len(x.files); n > 0 && first <= x.files[n-1].first {
		first = x.files[n-1].first + 1 // names must stay unique and rising
	}
	m, err := openMapped(filepath.Join(x.dir, segmentName(first)), first, indexFileSize(x.slots, x.entries), true)
	if err != nil {
		return nil, err
	}
	f := &indexFile{mappedFile: m, slots: x.slots, entries: x.entries}
	be := binary.BigEndian
	be.PutUint32(f.data, indexMagic)
	be.PutUint32(f.data[44:], uint32(f.slots))
	be.PutUint32(f.data[48:], uint32(f.entries))
	be.PutUint64(f.data[8:], uint64(k.storeTime))
	x.files = append(x.files, f)
	return f, nil
}

// newest is the commitlog offset of the newest entry, -1 when empty.
func (x *keyIndex) newest() int64 {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if len(x.files) == 0 {
		return -1
	}
	f := x.files[len(x.files)-1]
	n := f.count()
	if n == 0 {
		return -1
	}
	return int64(binary.BigEndian.Uint64(f.entry(n)[8:]))
}

// lookup returns up to limit commitlog offsets of entries whose key hash is
// key's and whose store time is in [begin, end], newest first.
func (x *keyIndex) lookup(key string, limit int, begin, end int64) []int64 {
	return x.walk(keyHash(key), limit, begin, end, false)
}

// recent is lookup for deduplication: it stops at the first entry older
// than begin, in a chain or across files, where lookup walks whole chains
// (entries go in by store time, which the master stamps; a clock stepped
// back may hide an older copy, never invent one). Walking whole chains
// cost the master 10% more CPU per message (deploy/bench-local.sh,
// batched, --dedup-window 2m against off).
func (x *keyIndex) recent(key []byte, limit int, begin, end int64) []int64 {
	return x.walk(keyHash(key), limit, begin, end, true)
}

// walk follows hash h's chain through the files, newest first; stopOld:
// no further than the first entry older than begin.
func (x *keyIndex) walk(h uint64, limit int, begin, end int64, stopOld bool) []int64 {
	x.mu.RLock()
	defer x.mu.RUnlock()
	be := binary.BigEndian
	var offs []int64
	for i := len(x.files) - 1; i >= 0 && len(offs) < limit; i-- {
		f := x.files[i]
		if fileEnd := int64(be.Uint64(f.data[16:])); fileEnd < begin && stopOld {
			break // this file and the older ones end before the window
		} else if fileEnd < begin || int64(be.Uint64(f.data[8:])) > end {
			continue
		}
		count := f.count()
		for n := f.slotAt(int(h % uint64(f.slots))); n > 0 && n <= count && len(offs) < limit; {
			e := f.entry(n)
			t := int64(be.Uint64(e[16:]))
			if t < begin && stopOld {
				break
			}
			if be.Uint64(e) == h && t >= begin && t <= end {
				offs = append(offs, int64(be.Uint64(e[8:])))
			}
			prev := int(be.Uint32(e[24:]))
			if prev >= n {
				break // a chain only points backwards; anything else is damage
			}
			n = prev
		}
	}
	return offs
}

// truncate forgets every entry for a record at or past commitlog offset off
// (recovery re-dispatches them).
func (x *keyIndex) truncate(off int64) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	be := binary.BigEndian
	for len(x.files) > 0 {
		f := x.files[len(x.files)-1]
		count := f.count()
		keep := count
		for keep > 0 && int64(be.Uint64(f.entry(keep)[8:])) >= off {
			keep--
		}
		if keep == count {
			return nil
		}
		if keep == 0 {
			if err := f.remove(); err != nil {
				return fmt.Errorf("storage: remove index file: %w", err)
			}
			x.files = x.files[:len(x.files)-1]
			continue
		}
		for s := 0; s < f.slots; s++ {
			n := f.slotAt(s)
			for n > keep {
				prev := int(be.Uint32(f.entry(n)[24:]))
				if prev >= n || n > count {
					prev = 0 // damage: drop the chain
				}
				n = prev
			}
			f.setSlot(s, n)
		}
		clear(f.data[indexHeaderSize+4*f.slots+keep*indexEntrySize:])
		be.PutUint32(f.data[40:], uint32(keep))
		f.dirty.Store(true)
		return nil
	}
	return nil
}

// deleteBelow removes whole files, never the last, whose entries all point
// below the commitlog's minimum.
func (x *keyIndex) deleteBelow(clMin int64) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	for len(x.files) > 1 {
		f := x.files[0]
		if n := f.count(); n > 0 && int64(binary.BigEndian.Uint64(f.entry(n)[8:])) >= clMin {
			break
		}
		if err := f.remove(); err != nil {
			return fmt.Errorf("storage: retention of index file: %w", err)
		}
		x.files = x.files[1:]
	}
	return nil
}

// reset deletes every index file (a full rebuild follows).
func (x *keyIndex) reset() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, f := range x.files {
		if err := f.remove(); err != nil {
			return fmt.Errorf("storage: reset index: %w", err)
		}
	}
	x.files = nil
	return nil
}

// sync writes the index files' dirty pages without holding x.mu: puts go
// on meanwhile (a checkpoint's msync took 45-50 ms, and every Append
// waited for it).
func (x *keyIndex) sync() error {
	x.mu.RLock()
	files := slices.Clone(x.files)
	x.mu.RUnlock()
	for _, f := range files {
		if err := f.sync(); err != nil {
			return err
		}
	}
	return nil
}
