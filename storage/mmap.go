package storage

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// mappedFile is a fixed-size file mapped shared and writable. Consume queue
// and index entries are small and many; writing them through a mapping
// costs no syscall, which keeps dispatch off the append path's budget.
type mappedFile struct {
	path  string
	first int64 // what the file's name says it starts at
	f     *os.File
	data  []byte
	dirty atomic.Bool

	// syncMu lets sync run without the owner's lock (an msync of a large
	// index takes tens of ms, and the writer must not wait on it): close
	// takes it too, so a file is never unmapped under a running msync.
	syncMu sync.Mutex
}

// openMapped opens (creating when asked) path as a file of exactly size
// bytes and maps it. A new file is sparse: it reads as zeros.
func openMapped(path string, first, size int64, create bool) (*mappedFile, error) {
	flags := os.O_RDWR
	if create {
		flags |= os.O_CREATE
	}
	f, err := os.OpenFile(path, flags, 0o644)
	if err != nil {
		return nil, fmt.Errorf("storage: open %s: %w", path, err)
	}
	fi, err := f.Stat()
	if err == nil && fi.Size() != size {
		if fi.Size() != 0 {
			err = fmt.Errorf("%w: %s is %d bytes, want %d (was the store configured differently?)", ErrCorrupt, path, fi.Size(), size)
		} else {
			err = f.Truncate(size)
		}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("storage: mmap %s: %w", path, err)
	}
	return &mappedFile{path: path, first: first, f: f, data: data}, nil
}

// sync writes the mapping's dirty pages to disk. It may run while the
// owner writes entries (they are past what the checkpoint will claim); a
// file closed meanwhile has nothing left worth writing.
func (m *mappedFile) sync() error {
	m.syncMu.Lock()
	defer m.syncMu.Unlock()
	if m.data == nil || !m.dirty.Swap(false) {
		return nil
	}
	if err := unix.Msync(m.data, unix.MS_SYNC); err != nil {
		m.dirty.Store(true)
		return fmt.Errorf("storage: msync %s: %w", m.path, err)
	}
	return nil
}

func (m *mappedFile) close() error {
	m.syncMu.Lock()
	defer m.syncMu.Unlock()
	err := unix.Munmap(m.data)
	m.data = nil
	if cerr := m.f.Close(); err == nil {
		err = cerr
	}
	return err
}

func (m *mappedFile) remove() error {
	m.close()
	return os.Remove(m.path)
}
