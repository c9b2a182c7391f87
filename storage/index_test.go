package storage

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/raftmq/raftmq/message"
)

// checkKeys fails unless every key and unique key of batches [from, to] is
// found, exactly once.
func checkKeys(t *testing.T, s *Store, from, to uint64) {
	t.Helper()
	for idx := from; idx <= to; idx++ {
		for _, m := range batchFor(idx) {
			for _, k := range []string{m.Keys[0], m.Properties[message.PropertyUniqKey]} {
				if recs, err := s.QueryByKey(k, 10, 0, 1<<62); err != nil || len(recs) != 1 {
					t.Fatalf("key %s: %d records, %v", k, len(recs), err)
				}
			}
		}
	}
}

// indexGeometries returns the slots and entries of every index file, oldest
// first, as the store has them mapped.
func indexGeometries(s *Store) [][2]int {
	s.index.mu.RLock()
	defer s.index.mu.RUnlock()
	var g [][2]int
	for _, f := range s.index.files {
		g = append(g, [2]int{f.slots, f.entries})
	}
	return g
}

// A changed IndexSlots or IndexEntries applies to new index files; the old
// ones keep the geometry their header records, and stay readable.
func TestIndexFileKeepsItsGeometry(t *testing.T) {
	cfg := testConfig(t.TempDir())
	s := openStore(t, cfg)
	appendBatches(t, s, 1, 150)
	old := indexGeometries(s)
	if len(old) < 3 {
		t.Fatalf("%d index files; the test must cross files", len(old))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	cfg.IndexSlots, cfg.IndexEntries = 7, 40
	s = openStore(t, cfg)
	defer s.Close()
	if got := indexGeometries(s); len(got) != len(old) || got[0] != [2]int{61, 100} {
		t.Fatalf("reopened index files have geometries %v, want those of %v", got, old)
	}
	checkKeys(t, s, 1, 150)
	appendBatches(t, s, 151, 250)
	got := indexGeometries(s)
	if last := got[len(got)-1]; last != [2]int{7, 40} {
		t.Fatalf("new index file has geometry %v, want the configured [7 40]", last)
	}
	checkKeys(t, s, 1, 250)
}

// setIndexGeometry overwrites the geometry in the header of every index
// file under dir.
func setIndexGeometry(t *testing.T, dir string, slots, entries uint32) {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, indexDir, "*"))
	if err != nil || len(names) == 0 {
		t.Fatalf("no index files: %v", err)
	}
	for _, name := range names {
		f, err := os.OpenFile(name, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		var b [8]byte
		binary.BigEndian.PutUint32(b[:], slots)
		binary.BigEndian.PutUint32(b[4:], entries)
		if _, err := f.WriteAt(b[:], 44); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
}

// Index files written before the header held their geometry open with the
// configured one, or else with the defaults of that time (1,000,000 slots,
// 4,000,000 entries); a header with an impossible geometry is corruption.
func TestIndexFileWithoutGeometry(t *testing.T) {
	t.Run("configured", func(t *testing.T) {
		cfg := testConfig(t.TempDir())
		s := openStore(t, cfg)
		appendBatches(t, s, 1, 150)
		s.Close()
		setIndexGeometry(t, cfg.Dir, 0, 0)
		s = openStore(t, cfg)
		defer s.Close()
		checkKeys(t, s, 1, 150)
	})
	t.Run("old defaults", func(t *testing.T) {
		cfg := testConfig(t.TempDir())
		cfg.IndexSlots, cfg.IndexEntries = legacyIndexSlots, legacyIndexEntries // sparse files
		s := openStore(t, cfg)
		appendBatches(t, s, 1, 20)
		s.Close()
		setIndexGeometry(t, cfg.Dir, 0, 0)
		cfg.IndexSlots, cfg.IndexEntries = 61, 100
		s = openStore(t, cfg)
		defer s.Close()
		if got := indexGeometries(s); got[0] != [2]int{legacyIndexSlots, legacyIndexEntries} {
			t.Fatalf("geometry %v", got)
		}
		checkKeys(t, s, 1, 20)
	})
	t.Run("impossible", func(t *testing.T) {
		cfg := testConfig(t.TempDir())
		s := openStore(t, cfg)
		appendBatches(t, s, 1, 10)
		s.Close()
		setIndexGeometry(t, cfg.Dir, 1<<31, 100)
		if _, err := openKeyIndex(filepath.Join(cfg.Dir, indexDir), cfg.IndexSlots, cfg.IndexEntries); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("open an index with an impossible geometry: %v, want ErrCorrupt", err)
		}
		// The store rebuilds a damaged index from the commitlog.
		s = openStore(t, cfg)
		defer s.Close()
		if got := indexGeometries(s); len(got) != 1 || got[0] != [2]int{61, 100} {
			t.Fatalf("rebuilt index has geometries %v", got)
		}
		checkKeys(t, s, 1, 10)
	})
}

// Checkpoints msync the queue and index files without their locks, so
// appends go on meanwhile; files that retention removes under a running
// checkpoint must neither break it nor be written after they are unmapped.
// (Run with -race.)
func TestCheckpointBesideAppendsAndRetention(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.RetentionAge = time.Hour
	s := openStore(t, cfg)
	defer s.Close()

	stop := make(chan struct{})
	errs := make(chan error, 2)
	var wg sync.WaitGroup
	// repeat runs fn until stop is closed or fn fails.
	repeat := func(fn func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := fn(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	repeat(s.checkpoint)
	repeat(func() error {
		_, err := s.DeleteExpired(time.Now().Add(24 * time.Hour))
		return err
	})
	appendBatches(t, s, 1, 600)
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	// The newest batch is in the active segment, which retention keeps.
	checkKeys(t, s, 600, 600)
}
