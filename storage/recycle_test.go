package storage

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/raftmq/raftmq/message"
)

// logBuffer collects a store's log lines, for tests that assert what
// recovery had to do.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

// spareFiles lists the spare segments in the commitlog dir.
func spareFiles(t *testing.T, cfg Config) []string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(cfg.Dir, commitlogDir, "*"+spareSuffix))
	if err != nil {
		t.Fatal(err)
	}
	return names
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// allocFiles lists the segments being prepared.
func allocFiles(t *testing.T, cfg Config) []string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(cfg.Dir, commitlogDir, "*.alloc"))
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// retireAllButTwo ages every segment but the last two and runs retention.
// With a preallocator, it first waits for the next segment to be prepared, so
// that the spares stay spares until the next roll.
func retireAllButTwo(t *testing.T, s *Store, cfg Config) {
	t.Helper()
	if cfg.PreallocateAhead >= 0 {
		waitFor(t, func() bool { return len(allocFiles(t, cfg)) == 1 })
	}
	if len(segmentFiles(t, cfg)) < 5 {
		t.Fatalf("only %d segments", len(segmentFiles(t, cfg)))
	}
	aged := ageSegments(t, cfg, 2)
	if n, err := s.DeleteExpired(time.Now()); err != nil || n != len(aged) {
		t.Fatalf("DeleteExpired deleted %d segments (%v), want %d", n, err, len(aged))
	}
}

// Segments retention deletes for age are kept as spares, up to
// RecycleSegments, and become the next segments: same files, not zeroed.
// Their old records are never read as new ones, after a clean close or a
// crash.
func TestRetiredSegmentsBecomeNewSegments(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.RetentionAge = time.Hour
	var logs logBuffer
	cfg.Logger = logs.logger()
	s := openStore(t, cfg)
	appendBatches(t, s, 1, 300)
	retireAllButTwo(t, s, cfg)
	spares := spareFiles(t, cfg)
	if len(spares) != 2 {
		t.Fatalf("%d spares after retention, want RecycleSegments = 2", len(spares))
	}
	reused := map[uint64]bool{inode(t, spares[0]): true, inode(t, spares[1]): true}

	appendBatches(t, s, 301, 600)
	if left := spareFiles(t, cfg); len(left) != 0 {
		t.Fatalf("spares %v left after several rolls", left)
	}
	found := 0
	for _, n := range segmentFiles(t, cfg) {
		if reused[inode(t, filepath.Join(cfg.Dir, commitlogDir, n))] {
			found++
		}
	}
	if found != 2 {
		t.Fatalf("%d of the 2 spares became segments", found)
	}
	checkAfterRetention(t, s, 600)

	for _, how := range []string{"crash", "close"} {
		if how == "crash" {
			s.crash()
		} else if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s = openStore(t, cfg)
		if got := s.LastRaftIndex(); got != 600 {
			t.Fatalf("after a %s: last raft index %d, want 600", how, got)
		}
		checkAfterRetention(t, s, 600)
		if l := logs.String(); strings.Contains(l, "level=WARN") {
			t.Fatalf("after a %s, recovery warned:\n%s", how, l)
		}
	}
	s.Close()
}

// A crash after a roll, before the batch that rolled reached the new
// segment (its blank record ending the previous segment did), leaves a
// segment with no data: for a spare, old records the marker at its start
// hides. Recovery removes that segment, and appends go on from the end of
// the data.
func TestCrashAfterRollBeforeTheBatch(t *testing.T) {
	for _, recycle := range []int{2, -1} {
		t.Run(map[int]string{2: "spare", -1: "fresh"}[recycle], func(t *testing.T) {
			cfg := testConfig(t.TempDir())
			cfg.RetentionAge = time.Hour
			cfg.RecycleSegments = recycle
			cfg.PreallocateAhead = -1 // the roll itself takes the spare
			var logs logBuffer
			cfg.Logger = logs.logger()
			s := openStore(t, cfg)
			appendBatches(t, s, 1, 300)
			retireAllButTwo(t, s, cfg)
			_, end := s.CommitlogOffsets()
			next := end - end%cfg.SegmentSize + cfg.SegmentSize
			if err := s.cl.write(end, appendBlank(nil, next-end)); err != nil {
				t.Fatal(err)
			}
			if _, err := s.cl.ensureSegment(next); err != nil {
				t.Fatal(err)
			}
			s.crash()
			s = openStore(t, cfg)
			defer s.Close()
			if got := s.LastRaftIndex(); got != 300 {
				t.Fatalf("last raft index %d, want 300", got)
			}
			checkAfterRetention(t, s, 300)
			if l := logs.String(); strings.Contains(l, "level=WARN") {
				t.Fatalf("recovery warned:\n%s", l)
			}
			appendBatches(t, s, 301, 320)
			checkAfterRetention(t, s, 320)
		})
	}
}

// A lost end marker (a power cut that kept the records but not the page
// after them) exposes the file's old life: a whole, CRC-valid record at
// the wrong offset. Recovery keeps every batch before it and cuts there.
func TestStaleRecordAfterTheEndIsCut(t *testing.T) {
	cfg := testConfig(t.TempDir())
	s := openStore(t, cfg)
	appendBatches(t, s, 1, 40)
	old, err := s.ReadMessage(0)
	if err != nil {
		t.Fatal(err)
	}
	_, end := s.CommitlogOffsets()
	seg := s.cl.segmentAt(end)
	if _, err := seg.f.WriteAt(old, end-seg.start); err != nil {
		t.Fatal(err)
	}
	s.crash()
	s = openStore(t, cfg)
	defer s.Close()
	checkHolds(t, s, 40)
	if _, got := s.CommitlogOffsets(); got != end {
		t.Fatalf("commitlog ends at %d, want %d", got, end)
	}
	appendBatches(t, s, 41, 60)
	checkHolds(t, s, 60)
}

// Spares are disk space held back: a disk over RetentionDiskRatio gets them
// back first, and segments deleted for space are not kept as spares.
func TestSparesGoFirstOnAFullDisk(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.RetentionAge = time.Hour
	full := false
	var mu sync.Mutex
	cfg.RetentionDiskRatio = 0.75
	cfg.diskUsage = func(string) (float64, error) {
		mu.Lock()
		defer mu.Unlock()
		if full {
			return 0.9, nil
		}
		return 0.5, nil
	}
	s := openStore(t, cfg)
	defer s.Close()
	appendBatches(t, s, 1, 300)
	retireAllButTwo(t, s, cfg)
	if n := len(spareFiles(t, cfg)); n != 2 {
		t.Fatalf("%d spares", n)
	}
	mu.Lock()
	full = true
	mu.Unlock()
	if n, err := s.DeleteExpired(time.Now()); err != nil || n != 1 {
		t.Fatalf("deleted %d segments (%v), want 1 (all but the active one)", n, err)
	}
	if left := spareFiles(t, cfg); len(left) != 0 {
		t.Fatalf("spares %v kept on a full disk", left)
	}
	checkAfterRetention(t, s, 300)
}

// On open, spares beyond RecycleSegments and spares of another segment
// size are deleted.
func TestOpenKeepsOnlyUsableSpares(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.RecycleSegments = 1
	cfg.PreallocateAhead = -1 // no preallocator to take the spare at once
	dir := filepath.Join(cfg.Dir, commitlogDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, size := range map[string]int64{
		segmentName(0) + spareSuffix:                 cfg.SegmentSize,
		segmentName(cfg.SegmentSize) + spareSuffix:   cfg.SegmentSize,
		segmentName(2*cfg.SegmentSize) + spareSuffix: cfg.SegmentSize / 2,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), make([]byte, size), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := openStore(t, cfg)
	defer s.Close()
	if left := spareFiles(t, cfg); len(left) != 1 || !strings.HasSuffix(left[0], segmentName(0)+spareSuffix) && !strings.HasSuffix(left[0], segmentName(cfg.SegmentSize)+spareSuffix) {
		t.Fatalf("spares kept: %v, want one of the right size", left)
	}
}

// Every write of records ends with zeros to the end of its page (at least
// an end marker's worth, unless the segment ends first), never past its
// segment, and none at a segment's start.
func TestTailPad(t *testing.T) {
	c := &commitlog{segSize: 64 << 10}
	for pos := int64(0); pos < 3*c.segSize; pos += 1 {
		n := int64(c.tailPad(pos))
		rel, left := pos%c.segSize, c.segSize-pos%c.segSize
		switch {
		case rel == 0 && n != 0:
			t.Fatalf("pad %d at a segment's start %d", n, pos)
		case rel == 0:
		case n > left:
			t.Fatalf("pad %d at %d crosses the segment's end", n, pos)
		case n < left && (n < message.BlankSize || (pos+n)%pageSize != 0):
			t.Fatalf("pad %d at %d: ends at %d, not a page end with a marker's room", n, pos, pos+n)
		case n == left && left >= message.BlankSize && left > 2*pageSize:
			t.Fatalf("pad %d at %d runs to the segment's end for no reason", n, pos)
		}
	}
}

// A spare the preallocator prepared as the next segment goes back to the spares
// when the store closes, not to waste.
func TestPreparedSpareReturnsOnClose(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.RetentionAge = time.Hour
	s := openStore(t, cfg)
	appendBatches(t, s, 1, 300)
	retireAllButTwo(t, s, cfg)
	// After the next roll the preallocator takes a spare as the next segment.
	idx, segs := uint64(300), len(segmentFiles(t, cfg))
	for len(segmentFiles(t, cfg)) == segs {
		idx++
		appendBatches(t, s, idx, idx)
	}
	waitFor(t, func() bool { return len(spareFiles(t, cfg)) == 1 && len(allocFiles(t, cfg)) == 1 })
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := len(spareFiles(t, cfg)); n != 2 {
		t.Fatalf("%d spares after close, want 2", n)
	}
	s = openStore(t, cfg)
	defer s.Close()
	appendBatches(t, s, idx+1, 500)
	checkAfterRetention(t, s, 500)
}
