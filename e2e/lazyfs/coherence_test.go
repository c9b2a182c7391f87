package lazyfs

import (
	"bytes"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Every write is read back whole at once, while other readers keep reading
// the pages around it and stat the file: as the commitlog's writer, the
// consumers at its tail, and stat(2) do. Attributes are kept 5 ms, so that
// the kernel fetches them again many times a second. With FUSE's automatic
// data invalidation on, 3 of 8 runs read a write back as zeros within 3 s.
func TestAReadRightAfterAWriteSeesIt(t *testing.T) {
	m := mounted(t, Options{attrTimeout: 5 * time.Millisecond})
	path := filepath.Join(m.Dir, "seg")
	const size = 16 << 20
	writeFile(t, path, 0, make([]byte, size), true)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var pos atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pages := make([]byte, 8192)
			for {
				select {
				case <-stop:
					return
				default:
				}
				p := pos.Load()
				if _, err := f.ReadAt(pages, max(0, p-4096)); err != nil {
					t.Error(err)
					return
				}
				if _, err := os.Stat(path); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	rec := bytes.Repeat([]byte{0xab}, 137)
	got := make([]byte, len(rec))
	deadline := time.Now().Add(3 * time.Second)
	for off := int64(0); off+int64(len(rec)) < size && time.Now().Before(deadline); off += int64(len(rec)) {
		if _, err := f.WriteAt(rec, off); err != nil {
			t.Fatal(err)
		}
		pos.Store(off + int64(len(rec)))
		if _, err := f.ReadAt(got, off); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, rec) {
			t.Fatalf("the %d bytes written at %d read back as %x", len(rec), off, got)
		}
	}
}
