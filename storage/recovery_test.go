package storage

import (
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/raftmq/raftmq/message"
)

// history is a store written with batchFor(1..last), crashed, kept as a
// template directory that each trial copies and damages.
type history struct {
	dir      string
	cfg      Config
	last     uint64
	batchEnd map[uint64]int64 // Raft index -> end offset of its batch
	records  []AppendResult   // every record, in commitlog order
	cp       checkpoint       // the checkpoint on disk
}

// newHistory writes batches 1..last, writing a checkpoint after batch
// checkpointAt (0: none at all), then crashes the store.
func newHistory(t *testing.T, last, checkpointAt uint64) *history {
	t.Helper()
	h := &history{dir: t.TempDir(), last: last, batchEnd: map[uint64]int64{}}
	h.cfg = testConfig(h.dir)
	s := openStore(t, h.cfg)
	for idx := uint64(1); idx <= last; idx++ {
		res, err := s.Append(idx, batchFor(idx))
		if err != nil {
			t.Fatal(err)
		}
		h.records = append(h.records, res...)
		r := res[len(res)-1]
		h.batchEnd[idx] = r.Offset + int64(r.Size)
		if idx == checkpointAt {
			if err := s.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	s.crash()
	if checkpointAt == 0 {
		if err := os.Remove(filepath.Join(h.dir, checkpointFile)); err != nil {
			t.Fatal(err)
		}
	}
	cp, ok, err := readCheckpoint(h.dir)
	if err != nil || ok != (checkpointAt != 0) {
		t.Fatalf("checkpoint: %v %v", ok, err)
	}
	h.cp = cp
	return h
}

// copy returns a config for a fresh copy of the template.
func (h *history) copy(t *testing.T) Config {
	t.Helper()
	dst := t.TempDir()
	copyDir(t, h.dir, dst)
	cfg := h.cfg
	cfg.Dir = dst
	return cfg
}

// lastWholeBefore is the last Raft index whose batch ends at or before off.
func (h *history) lastWholeBefore(off int64) uint64 {
	var last uint64
	for idx := uint64(1); idx <= h.last; idx++ {
		if h.batchEnd[idx] <= off {
			last = idx
		}
	}
	return last
}

// inPadding reports whether off is in a segment's tail that no scan reads:
// past the blank marker's header, or in a tail shorter than one.
func (h *history) inPadding(off int64) bool {
	seg := off / h.cfg.SegmentSize
	var lastEnd int64 = seg * h.cfg.SegmentSize
	for _, r := range h.records {
		if r.Offset/h.cfg.SegmentSize == seg {
			lastEnd = max(lastEnd, r.Offset+int64(r.Size))
		}
	}
	segEnd := (seg + 1) * h.cfg.SegmentSize
	if lastEnd == h.batchEnd[h.last] { // the active segment: its tail is the end of data
		return false
	}
	return off >= lastEnd+message.BlankSize || (segEnd-lastEnd < message.BlankSize && off >= lastEnd)
}

func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.Walk(src, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if fi.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(target)
		if err != nil {
			return err
		}
		defer out.Close()
		_, err = io.Copy(out, in)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func segmentPath(cfg Config, off int64) string {
	return filepath.Join(cfg.Dir, commitlogDir, segmentName(off-off%cfg.SegmentSize))
}

// cutAt leaves the commitlog as a crash at byte off would: nothing from off
// on. Half the time the segment file is cut short, half the time zeroed.
func cutAt(t *testing.T, cfg Config, off int64, shorten bool) {
	t.Helper()
	path := segmentPath(cfg, off)
	rel := off % cfg.SegmentSize
	if shorten {
		if err := os.Truncate(path, rel); err != nil {
			t.Fatal(err)
		}
	} else {
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := zeroRange(f, rel, cfg.SegmentSize); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	entries, _ := os.ReadDir(filepath.Join(cfg.Dir, commitlogDir))
	for _, e := range entries {
		if p := filepath.Join(cfg.Dir, commitlogDir, e.Name()); p > path {
			os.Remove(p)
		}
	}
}

func flipByte(t *testing.T, cfg Config, off int64, rng *rand.Rand) {
	t.Helper()
	f, err := os.OpenFile(segmentPath(cfg, off), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	f.ReadAt(b, off%cfg.SegmentSize)
	b[0] ^= byte(1 + rng.IntN(255))
	if _, err := f.WriteAt(b, off%cfg.SegmentSize); err != nil {
		t.Fatal(err)
	}
}

// reopenAndCheck opens a damaged copy, checks it holds exactly batches
// 1..want, then that it takes new batches and survives another restart.
func reopenAndCheck(t *testing.T, cfg Config, want uint64) {
	t.Helper()
	s := openStore(t, cfg)
	checkHolds(t, s, want)
	appendBatches(t, s, want+1, want+5)
	checkHolds(t, s, want+5)
	s.crash()
	s = openStore(t, cfg)
	defer s.Close()
	checkHolds(t, s, want+5)
}

func TestRecoveryAfterCrash(t *testing.T) {
	for _, cpAt := range []uint64{0, 1, 150, 200} {
		h := newHistory(t, 200, cpAt)
		reopenAndCheck(t, h.copy(t), 200)
	}
}

// A crash can stop a write at any byte after the last checkpoint (which
// only ever covers written data). Recovery keeps every whole batch before
// that byte and nothing of the batch it cut.
func TestRecoveryCutAtRandomByte(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, cpAt := range []uint64{0, 120} {
		h := newHistory(t, 200, cpAt)
		end := h.batchEnd[h.last]
		from := h.cp.dispatched
		for trial := 0; trial < 25; trial++ {
			off := from + rng.Int64N(end-from+1)
			cfg := h.copy(t)
			cutAt(t, cfg, off, trial%2 == 0)
			want := h.lastWholeBefore(off)
			t.Logf("checkpoint at %d, cut at %d: expect batches 1..%d", from, off, want)
			reopenAndCheck(t, cfg, want)
		}
	}
}

// A flipped byte after the checkpoint cuts the log at the batch it
// damaged; unless it fell in a segment's unread padding, which harms
// nothing.
func TestRecoveryFlippedByteAfterCheckpoint(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, cpAt := range []uint64{0, 100} {
		h := newHistory(t, 200, cpAt)
		end := h.batchEnd[h.last]
		for trial := 0; trial < 25; trial++ {
			off := h.cp.dispatched + rng.Int64N(end-h.cp.dispatched)
			cfg := h.copy(t)
			flipByte(t, cfg, off, rng)
			want := h.lastWholeBefore(off)
			if h.inPadding(off) {
				want = h.last
			}
			t.Logf("flip at %d: expect batches 1..%d", off, want)
			reopenAndCheck(t, cfg, want)
		}
	}
}

// A flipped byte in data the checkpoint covers is not rescanned at start;
// it is found when the record is read, and reported, never returned.
func TestCorruptOldRecordIsReportedOnRead(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	h := newHistory(t, 200, 200)
	for trial := 0; trial < 10; trial++ {
		// Any record but the checkpoint's last one (recovery reads that
		// one back, and would rescan instead).
		r := h.records[rng.IntN(len(h.records)-1)]
		cfg := h.copy(t)
		flipByte(t, cfg, r.Offset+rng.Int64N(int64(r.Size)), rng)
		s := openStore(t, cfg)
		if _, err := s.ReadMessage(r.Offset); !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrOffsetNotFound) {
			t.Fatalf("ReadMessage of a damaged record: %v", err)
		}
		damaged := 0
		for q := int32(0); q < 4; q++ {
			min, max := s.QueueOffsets("T", q)
			for off := min; off < max; off++ {
				res, err := s.GetMessages(GetRequest{Topic: "T", QueueID: q, Offset: off, MaxMessages: 1, MaxBytes: 1})
				if err != nil {
					if !errors.Is(err, ErrCorrupt) {
						t.Fatalf("read error is not ErrCorrupt: %v", err)
					}
					damaged++
					continue
				}
				rec, err := decodeRecord(res.Records[0])
				if err != nil || rec.Offset == r.Offset {
					t.Fatalf("damaged record returned: %v", err)
				}
			}
		}
		if damaged != 1 {
			t.Fatalf("%d records reported damaged, want 1", damaged)
		}
		s.Close()
	}
}

// The checkpoint is ahead of the log it describes (the log was replaced or
// cut behind it): recovery notices and rebuilds from the whole log.
func TestRecoveryCheckpointAheadOfLog(t *testing.T) {
	h := newHistory(t, 200, 200)
	cfg := h.copy(t)
	off := h.batchEnd[100] + 10
	cutAt(t, cfg, off, false)
	reopenAndCheck(t, cfg, h.lastWholeBefore(off))
}

func TestRecoveryRebuildsDerivedFiles(t *testing.T) {
	h := newHistory(t, 200, 150)
	damage := map[string]func(cfg Config){
		"queues deleted": func(cfg Config) { os.RemoveAll(filepath.Join(cfg.Dir, consumeQueueDir)) },
		"index deleted":  func(cfg Config) { os.RemoveAll(filepath.Join(cfg.Dir, indexDir)) },
		"queue file cut": func(cfg Config) {
			os.Truncate(filepath.Join(cfg.Dir, consumeQueueDir, "T", "1", segmentName(0)), 33)
		},
		"index header broken": func(cfg Config) {
			names, _ := os.ReadDir(filepath.Join(cfg.Dir, indexDir))
			os.WriteFile(filepath.Join(cfg.Dir, indexDir, names[0].Name()), make([]byte, 64), 0o644)
		},
		"queue entry changed": func(cfg Config) {
			// The newest entry of queue 2, for a record past the
			// checkpoint: re-dispatch finds it differs.
			dir := filepath.Join(cfg.Dir, consumeQueueDir, "T", "2")
			names, _ := os.ReadDir(dir)
			path := filepath.Join(dir, names[len(names)-1].Name())
			buf, _ := os.ReadFile(path)
			last := 0
			for i := 0; i+cqEntrySize <= len(buf); i += cqEntrySize {
				if buf[i+8]|buf[i+9]|buf[i+10]|buf[i+11] != 0 {
					last = i
				}
			}
			buf[last+19] ^= 0xff
			os.WriteFile(path, buf, 0o644)
		},
		"checkpoint garbage": func(cfg Config) { os.WriteFile(filepath.Join(cfg.Dir, checkpointFile), []byte("garbage"), 0o644) },
	}
	names := make([]string, 0, len(damage))
	for n := range damage {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			cfg := h.copy(t)
			damage[name](cfg)
			s := openStore(t, cfg)
			checkHolds(t, s, 200)
			for _, idx := range []uint64{3, 199} {
				if recs, err := s.QueryByKey(batchFor(idx)[0].Keys[0], 5, 0, 1<<62); err != nil || len(recs) != 1 {
					t.Fatalf("key of batch %d after rebuild: %d, %v", idx, len(recs), err)
				}
			}
			s.Close()
		})
	}
}
