package storage

import (
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

func countFiles(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			n++
		}
		return nil
	})
	return n
}

// segmentFiles lists the commitlog's segments (not one being prepared).
func segmentFiles(t testing.TB, cfg Config) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(cfg.Dir, commitlogDir))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if len(e.Name()) == 20 {
			names = append(names, e.Name())
		}
	}
	return names
}

// ageSegments makes every segment but the last keep look last written two
// hours ago (the tests' RetentionAge is an hour), and returns the names of
// the aged ones.
func ageSegments(t testing.TB, cfg Config, keep int) []string {
	t.Helper()
	names := segmentFiles(t, cfg)
	if len(names) <= keep {
		t.Fatalf("only %d segments", len(names))
	}
	old := time.Now().Add(-2 * time.Hour)
	for _, n := range names[:len(names)-keep] {
		if err := os.Chtimes(filepath.Join(cfg.Dir, commitlogDir, n), old, old); err != nil {
			t.Fatal(err)
		}
	}
	return names[:len(names)-keep]
}

// checkAfterRetention verifies that the queues of topic T start at or past
// the first record still in the commitlog, that reads below a queue's
// minimum answer OffsetTooSmall with the minimum, and that every record
// from the minimum on is batchFor's.
func checkAfterRetention(t *testing.T, s *Store, last uint64) {
	t.Helper()
	clMin, _ := s.CommitlogOffsets()
	want := wantByQueue(last)
	for q := int32(0); q < 4; q++ {
		min, max := s.QueueOffsets("T", q)
		if min == 0 || max != int64(len(want[q])) {
			t.Fatalf("queue %d: offsets [%d, %d), want a raised minimum and max %d", q, min, max, len(want[q]))
		}
		res, err := s.GetMessages(GetRequest{Topic: "T", QueueID: q, Offset: min - 1, MaxMessages: 1, MaxBytes: 1})
		if err != nil || res.Status != OffsetTooSmall || res.NextOffset != min {
			t.Fatalf("queue %d below its minimum: %v next %d, %v", q, res.Status, res.NextOffset, err)
		}
		got := readQueue(t, s, "T", q)
		for i, r := range got {
			w := want[q][min+int64(i)]
			if r.Offset < clMin || r.QueueOffset != min+int64(i) || string(r.Body) != string(w.Body) {
				t.Fatalf("queue %d offset %d after retention: got %s", q, min+int64(i), r.Keys)
			}
		}
	}
}

func TestRetentionByAge(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.RetentionAge = time.Hour
	s := openStore(t, cfg)
	appendBatches(t, s, 1, 300)
	names := segmentFiles(t, cfg)
	if len(names) < 4 {
		t.Fatalf("only %d segments", len(names))
	}
	ageSegments(t, cfg, 2)
	oldest := names[0]
	queueFiles := countFiles(t, filepath.Join(cfg.Dir, consumeQueueDir))
	indexFiles := countFiles(t, filepath.Join(cfg.Dir, indexDir))
	firstKey := batchFor(1)[0].Keys[0]
	if recs, _ := s.QueryByKey(firstKey, 1, 0, 1<<62); len(recs) != 1 {
		t.Fatal("first key not found before retention")
	}

	n, err := s.DeleteExpired(time.Now())
	if err != nil || n != len(names)-2 {
		t.Fatalf("DeleteExpired deleted %d segments (%v), want %d", n, err, len(names)-2)
	}
	if _, err := os.Stat(filepath.Join(cfg.Dir, commitlogDir, oldest)); !os.IsNotExist(err) {
		t.Fatal("oldest segment still there")
	}
	if got := countFiles(t, filepath.Join(cfg.Dir, consumeQueueDir)); got >= queueFiles {
		t.Fatalf("consume queue files %d -> %d: none followed the commitlog", queueFiles, got)
	}
	if got := countFiles(t, filepath.Join(cfg.Dir, indexDir)); got >= indexFiles {
		t.Fatalf("index files %d -> %d: none followed the commitlog", indexFiles, got)
	}
	if recs, err := s.QueryByKey(firstKey, 1, 0, 1<<62); err != nil || len(recs) != 0 {
		t.Fatalf("key of a deleted message: %d records, %v", len(recs), err)
	}
	if _, err := s.ReadMessage(0); !errors.Is(err, ErrOffsetRemoved) {
		t.Fatalf("ReadMessage in a deleted segment: %v", err)
	}
	checkAfterRetention(t, s, 300)
	// Nothing more is old enough.
	if n, err := s.DeleteExpired(time.Now()); n != 0 || err != nil {
		t.Fatalf("second pass deleted %d, %v", n, err)
	}
	// Appends go on; a restart, clean or not, keeps the new minimums.
	appendBatches(t, s, 301, 310)
	s.crash()
	s = openStore(t, cfg)
	checkAfterRetention(t, s, 310)
	s.Close()
	// A rebuild of the derived files after retention starts queues at the
	// first offset the commitlog still holds.
	os.RemoveAll(filepath.Join(cfg.Dir, consumeQueueDir))
	s = openStore(t, cfg)
	defer s.Close()
	checkAfterRetention(t, s, 310)
}

func TestRetentionByDiskUsageNeverDeletesActiveSegment(t *testing.T) {
	cfg := testConfig(t.TempDir())
	var usage atomic.Value
	usage.Store(0.5)
	cfg.RetentionDiskRatio = 0.75
	cfg.diskUsage = func(string) (float64, error) { return usage.Load().(float64), nil }
	s := openStore(t, cfg)
	defer s.Close()
	appendBatches(t, s, 1, 300)
	segs := len(segmentFiles(t, cfg))
	if n, _ := s.DeleteExpired(time.Now()); n != 0 {
		t.Fatalf("deleted %d segments under the ratio", n)
	}
	usage.Store(0.99) // a disk that never frees up
	n, err := s.DeleteExpired(time.Now())
	if err != nil || n != segs-1 {
		t.Fatalf("deleted %d of %d segments, %v", n, segs, err)
	}
	checkAfterRetention(t, s, 300)
	appendBatches(t, s, 301, 305)
	checkAfterRetention(t, s, 305)
}

func TestRetentionLoopRuns(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.RetentionInterval = 5 * time.Millisecond
	var full atomic.Bool
	cfg.RetentionDiskRatio = 0.5
	cfg.diskUsage = func(string) (float64, error) {
		if full.Load() {
			return 0.9, nil
		}
		return 0.1, nil
	}
	s := openStore(t, cfg)
	defer s.Close()
	appendBatches(t, s, 1, 200)
	full.Store(true)
	waitFor(t, func() bool { return len(segmentFiles(t, cfg)) == 1 })
	min, _ := s.CommitlogOffsets()
	if min == 0 {
		t.Fatal("commitlog minimum did not move")
	}
}
