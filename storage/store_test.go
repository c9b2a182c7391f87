package storage

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/raftmq/raftmq/message"
	"golang.org/x/sys/unix"
)

func TestAppendReadAcrossSegmentsAndReopen(t *testing.T) {
	cfg := testConfig(t.TempDir())
	s := openStore(t, cfg)
	appendBatches(t, s, 1, 300)
	checkHolds(t, s, 300)
	if _, max := s.CommitlogOffsets(); max < 3*cfg.SegmentSize {
		t.Fatalf("test wrote %d bytes; it must cross several segments", max)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	s = openStore(t, cfg)
	defer s.Close()
	checkHolds(t, s, 300)
	// Appending goes on where it stopped.
	appendBatches(t, s, 301, 320)
	checkHolds(t, s, 320)
}

func TestBatchSpanningSegmentsIsOneWritePerSegment(t *testing.T) {
	cfg := testConfig(t.TempDir())
	s := openStore(t, cfg)
	defer s.Close()
	// 100 messages of ~1.1 KiB: about 110 KiB, so the batch spans two
	// segment boundaries of 64 KiB.
	msgs := make([]message.Message, 100)
	for i := range msgs {
		msgs[i] = message.Message{Topic: "big", QueueID: int32(i % 3), Body: bytes.Repeat([]byte{byte(i)}, 1000), StoreTime: 5}
	}
	res, err := s.Append(1, msgs)
	if err != nil {
		t.Fatal(err)
	}
	segs := map[int64]bool{}
	for i, r := range res {
		segs[r.Offset/cfg.SegmentSize] = true
		if (r.Offset+int64(r.Size)-1)/cfg.SegmentSize != r.Offset/cfg.SegmentSize {
			t.Fatalf("record %d spans a segment boundary: offset %d size %d", i, r.Offset, r.Size)
		}
		if r.QueueOffset != int64(i/3) {
			t.Fatalf("record %d: queue offset %d, want %d", i, r.QueueOffset, i/3)
		}
		raw, err := s.ReadMessage(r.Offset)
		if err != nil {
			t.Fatal(err)
		}
		rec, _ := decodeRecord(raw)
		if !bytes.Equal(rec.Body, msgs[i].Body) || rec.RaftIndex != 1 {
			t.Fatalf("record %d reads back wrong", i)
		}
		if (i == len(res)-1) != (rec.SysFlag&message.SysFlagBatchEnd != 0) {
			t.Fatalf("record %d: batch-end flag %v", i, rec.SysFlag&message.SysFlagBatchEnd != 0)
		}
	}
	if len(segs) < 2 {
		t.Fatalf("batch stayed in %d segment", len(segs))
	}
}

func TestGetMessagesStatusesAndLimits(t *testing.T) {
	s := openStore(t, testConfig(t.TempDir()))
	defer s.Close()
	var msgs []message.Message
	for i := 0; i < 10; i++ {
		tag := "A"
		if i%3 == 0 {
			tag = "B"
		}
		msgs = append(msgs, message.Message{Topic: "q", QueueID: 1, Tags: tag, Body: []byte(fmt.Sprintf("body-%d", i))})
	}
	if _, err := s.Append(7, msgs); err != nil {
		t.Fatal(err)
	}
	get := func(r GetRequest) GetResult {
		t.Helper()
		r.Topic, r.QueueID = "q", 1
		if r.MaxMessages == 0 {
			r.MaxMessages = 32
		}
		if r.MaxBytes == 0 {
			r.MaxBytes = 1 << 20
		}
		res, err := s.GetMessages(r)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	res := get(GetRequest{Offset: 0, MaxMessages: 4})
	if res.Status != Found || len(res.Records) != 4 || res.NextOffset != 4 || res.MinOffset != 0 || res.MaxOffset != 10 {
		t.Fatalf("first 4: %v %d next %d min %d max %d", res.Status, len(res.Records), res.NextOffset, res.MinOffset, res.MaxOffset)
	}
	// Tag filter: B is at 0, 3, 6, 9.
	res = get(GetRequest{Offset: 1, TagHashes: []int64{message.TagHash("B")}})
	if res.Status != Found || len(res.Records) != 3 || res.NextOffset != 10 {
		t.Fatalf("tag B from 1: %v %d next %d", res.Status, len(res.Records), res.NextOffset)
	}
	for _, raw := range res.Records {
		if r, _ := decodeRecord(raw); r.Tags != "B" {
			t.Fatalf("tag filter returned %q", r.Tags)
		}
	}
	res = get(GetRequest{Offset: 1, TagHashes: []int64{message.TagHash("C")}})
	if res.Status != NoMatchedMessage || res.NextOffset != 10 {
		t.Fatalf("tag C: %v next %d", res.Status, res.NextOffset)
	}
	// Byte cap: the first record always comes, then only what fits.
	res = get(GetRequest{Offset: 0, MaxBytes: 1})
	if res.Status != Found || len(res.Records) != 1 || res.NextOffset != 1 {
		t.Fatalf("1-byte cap: %v %d next %d", res.Status, len(res.Records), res.NextOffset)
	}
	one := len(res.Records[0])
	res = get(GetRequest{Offset: 0, MaxBytes: 2*one + one/2})
	if len(res.Records) != 2 {
		t.Fatalf("cap of 2.5 records returned %d", len(res.Records))
	}
	if res = get(GetRequest{Offset: 10}); res.Status != NoNewMessage || res.NextOffset != 10 {
		t.Fatalf("at end: %v next %d", res.Status, res.NextOffset)
	}
	if res = get(GetRequest{Offset: 11}); res.Status != OffsetOverflow || res.NextOffset != 10 {
		t.Fatalf("past end: %v next %d", res.Status, res.NextOffset)
	}
	if res = get(GetRequest{Offset: -1}); res.Status != OffsetTooSmall || res.NextOffset != 0 {
		t.Fatalf("negative: %v next %d", res.Status, res.NextOffset)
	}
	// A queue never written is empty at 0.
	res, err := s.GetMessages(GetRequest{Topic: "other", QueueID: 0, Offset: 0, MaxMessages: 1, MaxBytes: 1})
	if err != nil || res.Status != NoNewMessage {
		t.Fatalf("unknown queue: %v %v", res.Status, err)
	}
}

func TestBadInputWritesNothing(t *testing.T) {
	cfg := testConfig(t.TempDir())
	s := openStore(t, cfg)
	defer s.Close()
	appendBatches(t, s, 1, 3)
	_, before := s.CommitlogOffsets()
	good := message.Message{Topic: "ok", QueueID: 0, Body: []byte("x")}
	cases := []struct {
		name string
		bad  message.Message
		want error
	}{
		{"empty topic", message.Message{Topic: "", Body: []byte("x")}, ErrInvalidMessage},
		{"illegal topic", message.Message{Topic: "a/b", Body: []byte("x")}, ErrInvalidMessage},
		{"long topic", message.Message{Topic: strings.Repeat("t", 128), Body: []byte("x")}, ErrInvalidMessage},
		{"negative queue", message.Message{Topic: "ok", QueueID: -1}, ErrInvalidMessage},
		{"queue out of range", message.Message{Topic: "ok", QueueID: cfg.MaxQueuesPerTopic}, ErrInvalidMessage},
		{"too large", message.Message{Topic: "ok", Body: make([]byte, cfg.MaxMessageSize)}, ErrMessageTooLarge},
		{"long key", message.Message{Topic: "ok", Keys: []string{strings.Repeat("k", 70000)}}, ErrInvalidMessage},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// The bad message comes second: the good one before it must not
			// be written either.
			_, err := s.Append(100, []message.Message{good, c.bad})
			if !errors.Is(err, c.want) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
			if _, after := s.CommitlogOffsets(); after != before {
				t.Fatalf("commitlog grew from %d to %d", before, after)
			}
			if _, max := s.QueueOffsets("ok", 0); max != 0 {
				t.Fatalf("queue ok@0 has %d entries", max)
			}
		})
	}
	if _, err := s.Append(4, nil); !errors.Is(err, ErrInvalidMessage) {
		t.Fatalf("empty batch: %v", err)
	}
	if _, err := s.Append(3, batchFor(3)); !errors.Is(err, ErrStaleRaftIndex) {
		t.Fatalf("re-applied raft index: %v", err)
	}
	for _, r := range []GetRequest{
		{Topic: "", MaxMessages: 1, MaxBytes: 1},
		{Topic: "T", QueueID: -1, MaxMessages: 1, MaxBytes: 1},
		{Topic: "T", QueueID: 99, MaxMessages: 1, MaxBytes: 1},
		{Topic: "T", MaxMessages: 0, MaxBytes: 1},
		{Topic: "T", MaxMessages: 1, MaxBytes: -5},
	} {
		if _, err := s.GetMessages(r); !errors.Is(err, ErrInvalidMessage) {
			t.Fatalf("GetMessages(%+v) = %v", r, err)
		}
	}
	for _, off := range []int64{-1, 1, before, before + 100, 1 << 40} {
		if _, err := s.ReadMessage(off); err == nil {
			t.Fatalf("ReadMessage(%d) found a record", off)
		}
	}
	checkHolds(t, s, 3)
}

func TestSyncFlushMode(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.FlushMode = FlushSync
	s := openStore(t, cfg)
	appendBatches(t, s, 1, 20)
	if got, want := s.cl.flushedPos.Load(), s.cl.writePos.Load(); got != want {
		t.Fatalf("sync mode: flushed %d of %d", got, want)
	}
	s.crash()
	s = openStore(t, cfg)
	defer s.Close()
	checkHolds(t, s, 20)
}

func TestAsyncFlusherFlushes(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.FlushInterval = 5 * time.Millisecond
	cfg.CheckpointInterval = 10 * time.Millisecond
	s := openStore(t, cfg)
	defer s.Close()
	appendBatches(t, s, 1, 20)
	want := s.cl.writePos.Load()
	waitFor(t, func() bool {
		cp, ok, _ := readCheckpoint(cfg.Dir)
		return s.cl.flushedPos.Load() == want && ok && cp.dispatched == want && cp.raftIndex == 20
	})
}

func TestMessageIDAndKeyQueries(t *testing.T) {
	s := openStore(t, testConfig(t.TempDir()))
	defer s.Close()
	// 150 batches put more keys than one index file holds (100 entries).
	appendBatches(t, s, 1, 150)
	if len(s.index.files) < 3 {
		t.Fatalf("index has %d files; the test must cross files", len(s.index.files))
	}
	for _, idx := range []uint64{1, 77, 150} {
		for i, m := range batchFor(idx) {
			recs, err := s.QueryByKey(m.Keys[0], 10, 0, 1<<62)
			if err != nil || len(recs) != 1 {
				t.Fatalf("key %s: %d records, %v", m.Keys[0], len(recs), err)
			}
			r, _ := decodeRecord(recs[0])
			if !bytes.Equal(r.Body, m.Body) {
				t.Fatalf("key %s returned another message", m.Keys[0])
			}
			if recs, _ := s.QueryByKey("u-"+m.Keys[0], 10, 0, 1<<62); len(recs) != 1 {
				t.Fatalf("unique key of %d/%d: %d records", idx, i, len(recs))
			}
			// Out of the time range.
			if recs, _ := s.QueryByKey(m.Keys[0], 10, m.StoreTime+1, 1<<62); len(recs) != 0 {
				t.Fatalf("key %s found outside its time range", m.Keys[0])
			}
			id := message.FormatID("broker-a", r.Offset)
			g, off, err := message.ParseID(id)
			if err != nil || g != "broker-a" || off != r.Offset {
				t.Fatalf("message id %q parses to %q %d %v", id, g, off, err)
			}
			raw, err := s.ReadMessage(off)
			if err != nil || !bytes.Equal(raw, recs[0]) {
				t.Fatalf("message id %s: %v", id, err)
			}
		}
	}
	if recs, err := s.QueryByKey("no-such-key", 10, 0, 1<<62); err != nil || len(recs) != 0 {
		t.Fatalf("unknown key: %d, %v", len(recs), err)
	}
}

func TestOffsetForTime(t *testing.T) {
	s := openStore(t, testConfig(t.TempDir()))
	defer s.Close()
	for i := 0; i < 50; i++ {
		if _, err := s.Append(uint64(i+1), []message.Message{{Topic: "time", QueueID: 2, StoreTime: int64(1000 + 10*i)}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct{ ts, want int64 }{{0, 0}, {1000, 0}, {1001, 1}, {1250, 25}, {1490, 49}, {1491, 50}, {99999, 50}} {
		got, err := s.OffsetForTime("time", 2, c.ts)
		if err != nil || got != c.want {
			t.Fatalf("OffsetForTime(%d) = %d, %v; want %d", c.ts, got, err, c.want)
		}
	}
}

func TestDeleteTopic(t *testing.T) {
	cfg := testConfig(t.TempDir())
	s := openStore(t, cfg)
	appendBatches(t, s, 1, 10)
	if _, err := s.Append(11, []message.Message{{Topic: "gone", Body: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteTopic(12, "gone"); err != nil {
		t.Fatal(err)
	}
	if _, max := s.QueueOffsets("gone", 0); max != 0 {
		t.Fatalf("deleted topic still has %d", max)
	}
	if _, err := os.Stat(filepath.Join(cfg.Dir, consumeQueueDir, "gone")); !os.IsNotExist(err) {
		t.Fatalf("deleted topic's files remain: %v", err)
	}
	s.Close()
	s = openStore(t, cfg)
	defer s.Close()
	checkQueues(t, s, 10)
	if _, max := s.QueueOffsets("gone", 0); max != 0 {
		t.Fatalf("deleted topic came back with %d", max)
	}
}

func TestOneStorePerDirectory(t *testing.T) {
	cfg := testConfig(t.TempDir())
	s := openStore(t, cfg)
	defer s.Close()
	if s2, err := Open(cfg); err == nil {
		s2.Close()
		t.Fatal("a second Open of the same directory succeeded")
	}
}

func TestConfigValidation(t *testing.T) {
	for _, c := range []Config{
		{},
		{Dir: "x", SegmentSize: 1000, MaxMessageSize: 4000},
		{Dir: "x", MaxMessageSize: 10},
		{Dir: "x", IndexEntries: 1 << 31},
		{Dir: "x", FlushInterval: -1},
	} {
		if _, err := c.withDefaults(); err == nil {
			t.Fatalf("config %+v accepted", c)
		}
	}
}

// Readers run against a writer; with -race this checks the publication of
// commitlog and consume queue writes.
func TestConcurrentReadsDuringAppends(t *testing.T) {
	s := openStore(t, testConfig(t.TempDir()))
	defer s.Close()
	var wg sync.WaitGroup
	done := make(chan struct{})
	errs := make(chan error, 4)
	for q := int32(0); q < 4; q++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var off int64
			for {
				select {
				case <-done:
					return
				default:
				}
				res, err := s.GetMessages(GetRequest{Topic: "T", QueueID: q, Offset: off, MaxMessages: 16, MaxBytes: 1 << 20})
				if err != nil {
					errs <- err
					return
				}
				for _, raw := range res.Records {
					r, err := decodeRecord(raw)
					if err != nil || r.QueueOffset != off || r.QueueID != q {
						errs <- fmt.Errorf("queue %d offset %d: got %d/%d %v", q, off, r.QueueID, r.QueueOffset, err)
						return
					}
					off++
				}
			}
		}()
	}
	appendBatches(t, s, 1, 400)
	close(done)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	checkHolds(t, s, 400)
}

// allocated is how many bytes of a file have blocks on disk.
func allocated(t *testing.T, path string) int64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

// preparedPath is the file the preallocator prepares the segment starting at
// start in, before the writer rolls into it.
func preparedPath(cfg Config, start int64) string { return segmentPath(cfg, start) + preparedSuffix }

// waitForPrepared waits for the prepared file at path to exist with at least
// n bytes allocated.
func waitForPrepared(t *testing.T, path string, n int64) {
	t.Helper()
	waitFor(t, func() bool {
		_, err := os.Stat(path)
		return err == nil && allocated(t, path) >= n
	})
}

// Segments are created sparse; the preallocator writes the next segment's blocks
// ahead of the writer, never the active one's, the writer then rolls into
// the prepared file, and Close removes a prepared file it left.
func TestPreallocationRunsAheadOfWriter(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.SegmentSize = 4 << 20
	cfg.PreallocateAhead = 6 << 20
	s := openStore(t, cfg)
	appendBatches(t, s, 1, 3)
	next := preparedPath(cfg, cfg.SegmentSize)
	waitForPrepared(t, next, 2<<20)
	// (How far ahead the preallocator goes is TestPreallocationCompletesTheNext
	// SegmentBeforeTheRoll's: with PreallocateAhead over a segment, the
	// whole next one is due at once.)
	// Fill past the first segment: the writer takes the prepared one.
	big := megabyteBatch()
	for idx := uint64(4); idx < 10; idx++ {
		if _, err := s.Append(idx, big); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(segmentPath(cfg, cfg.SegmentSize)); err != nil {
		t.Fatalf("second segment: %v", err)
	}
	if _, err := os.Stat(next); !os.IsNotExist(err) {
		t.Fatalf("the prepared file was not the one rolled into: %v", err)
	}
	s.Close()
	if _, err := os.Stat(preparedPath(cfg, 2*cfg.SegmentSize)); !os.IsNotExist(err) {
		t.Fatalf("a prepared segment outlived Close: %v", err)
	}
	// With preallocation off, appends go into sparse blocks and all is well.
	cfg.PreallocateAhead = -1
	s = openStore(t, cfg)
	defer s.Close()
	appendBatches(t, s, 10, 20)
	if got := readQueue(t, s, "T", 0); len(got) == 0 {
		t.Fatal("queue 0 empty")
	}
}

// The preallocator paces the next segment by the writer's position in the active
// one (plus PreallocateAhead), so it is whole before the writer rolls into
// it, not only its first PreallocateAhead bytes.
func TestPreallocationCompletesTheNextSegmentBeforeTheRoll(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.SegmentSize = 4 << 20
	cfg.PreallocateAhead = 512 << 10
	cfg.PreallocateIdle = -1 // the pace under load only (TestPreallocationGoesFurtherWhileTheWriterIsIdle)
	s := openStore(t, cfg)
	defer s.Close()
	batch := megabyteBatch()
	next := preparedPath(cfg, cfg.SegmentSize)
	if _, err := s.Append(1, batch); err != nil {
		t.Fatal(err)
	}
	waitForPrepared(t, next, 1<<20)
	// About 1 MiB into the active segment: the next is zeroed about as far,
	// plus ahead (in 1 MiB steps), not all at once.
	if got := allocated(t, next); got > 5<<19 {
		t.Fatalf("next segment has %d bytes allocated with the writer 1 MiB into the active one", got)
	}
	for idx := uint64(2); idx <= 4; idx++ { // to about 3.8 MiB: no roll yet
		if _, err := s.Append(idx, batch); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(segmentPath(cfg, cfg.SegmentSize)); err == nil {
		t.Fatal("rolled already; the test writes too much")
	}
	waitFor(t, func() bool { return allocated(t, next) >= cfg.SegmentSize })
}

// While the writer is idle the preallocator goes past PreallocateAhead, up to
// PreallocateIdle; while it appends, it keeps to PreallocateAhead.
func TestPreallocationGoesFurtherWhileTheWriterIsIdle(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.SegmentSize = 16 << 20
	cfg.PreallocateAhead = 1 << 20
	cfg.PreallocateIdle = 8 << 20
	cfg.idleQuiet = time.Second // far above an append's time (and a store's opening), even under -race
	s := openStore(t, cfg)
	defer s.Close()
	next := preparedPath(cfg, cfg.SegmentSize)
	// Appending every 10 ms for 2 s (twice idleQuiet), about 1.5 MiB in all:
	// the next segment stays within PreallocateAhead of the writer, in chunks.
	small := megabyteBatch()[:2]
	deadline := time.Now().Add(2 * cfg.idleQuiet)
	for idx := uint64(1); time.Now().Before(deadline); idx++ {
		if _, err := s.Append(idx, small); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(next); err == nil { // (created by the preallocator's first step)
			if got, limit := allocated(t, next), s.cl.writePos.Load()+cfg.PreallocateAhead+prepareChunk; got > limit {
				t.Fatalf("a busy writer at %d, the next segment has %d bytes allocated, over ahead (%d)", s.cl.writePos.Load(), got, limit)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Idle: it goes on to PreallocateIdle past the writer, and stops there.
	pos := s.cl.writePos.Load()
	waitForPrepared(t, next, pos+cfg.PreallocateIdle)
	z := s.cl.z
	waitFor(t, func() bool {
		z.mu.Lock()
		defer z.mu.Unlock()
		return z.busyTo == 0 && !z.short(z.idleAhead)
	})
	if got := allocated(t, next); got > pos+cfg.PreallocateIdle+prepareChunk {
		t.Fatalf("the writer idle at %d, the next segment has %d bytes allocated, past PreallocateIdle", pos, got)
	}
}

// The zeros the preallocator writes into the next segment go to the disk as it
// writes them, not when the kernel's dirty pages expire (30 s by default):
// the zeroed part of the next segment holds no dirty page well before its
// final fdatasync, which comes only once the whole segment is zeroed.
func TestPreallocationWritesItsZerosBackAsItGoes(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.SegmentSize = 16 << 20
	cfg.PreallocateAhead = 4 << 20
	cfg.PreallocateIdle = -1 // or the idle writer has the whole segment zeroed and synced
	s := openStore(t, cfg)
	defer s.Close()
	batch := megabyteBatch()
	if _, err := s.Append(1, batch); err != nil {
		t.Fatal(err)
	}
	next := preparedPath(cfg, cfg.SegmentSize)
	waitForPrepared(t, next, 4<<20)
	if got := allocated(t, next); got >= cfg.SegmentSize {
		t.Fatalf("the next segment is whole (%d bytes): its final fdatasync, not the write-back under test, would clean it", got)
	}
	waitFor(t, func() bool { return dirtyPages(t, next) == 0 }) // the zeros' pages clean within 5 s
}

// With PreallocateFallocate the next segment's blocks are allocated with
// fallocate: they are allocated, yet no data was written, so the prepared
// file has no page in the page cache (zeros written would be there, dirty
// or clean).
func TestPreallocationFallocatesWithoutWriting(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.SegmentSize = 4 << 20
	cfg.PreallocateAhead = 6 << 20 // the whole next segment at once
	cfg.PreallocateBy = PreallocateFallocate
	s := openStore(t, cfg)
	defer s.Close()
	appendBatches(t, s, 1, 3)
	next := preparedPath(cfg, cfg.SegmentSize)
	waitForPrepared(t, next, cfg.SegmentSize)
	if got := cachedPages(t, next); got != 0 {
		t.Fatalf("the fallocated next segment has %d pages in the page cache, want none (no zeros written)", got)
	}
	if got := allocated(t, segmentPath(cfg, 0)); got < cfg.SegmentSize {
		t.Fatalf("the first segment has %d bytes allocated, want it whole (%d) before the first append", got, cfg.SegmentSize)
	}
}

// Where the file system has no fallocate (EOPNOTSUPP, injected here), a
// preallocator asked for it writes zeros instead, and appends go on.
func TestPreallocationWritesZerosWithoutFallocate(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.SegmentSize = 4 << 20
	cfg.PreallocateAhead = 6 << 20
	cfg.PreallocateBy = PreallocateFallocate
	var refused atomic.Int32
	refuseStep(&cfg, "fallocate", syscall.EOPNOTSUPP, &refused, func(string) bool { return true })
	s := openStore(t, cfg)
	defer s.Close()
	appendBatches(t, s, 1, 3)
	next := preparedPath(cfg, cfg.SegmentSize)
	waitForPrepared(t, next, cfg.SegmentSize)
	if refused.Load() == 0 {
		t.Fatal("fallocate was never tried")
	}
	if got := cachedPages(t, next); got == 0 {
		t.Fatal("the next segment is allocated, yet no zeros went through the page cache: fallocate was not refused")
	}
	big := megabyteBatch()
	for idx := uint64(4); idx < 10; idx++ { // into the prepared segment
		if _, err := s.Append(idx, big); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(segmentPath(cfg, cfg.SegmentSize)); err != nil {
		t.Fatalf("second segment: %v", err)
	}
}

// refuseStep makes the store of cfg fail each op on the files that on
// picks with errno, counting them in n.
func refuseStep(cfg *Config, op string, errno syscall.Errno, n *atomic.Int32, on func(path string) bool) {
	cfg.DiskFault = func(o, path string) error {
		if o != op || !on(path) {
			return nil
		}
		n.Add(1)
		return errno
	}
}

// cachedPages counts the pages of the file at path in the page cache
// (cachestat, Linux 6.5).
func cachedPages(t *testing.T, path string) uint64 {
	t.Helper()
	return cachestat(t, path).Cache
}

// dirtyPages counts the dirty pages of the file at path in the page cache
// (cachestat, Linux 6.5).
func dirtyPages(t *testing.T, path string) uint64 {
	t.Helper()
	return cachestat(t, path).Dirty
}

// cachestat is the page cache's count of the file at path's pages.
func cachestat(t *testing.T, path string) unix.Cachestat_t {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var st unix.Cachestat_t
	if err := unix.Cachestat(uint(f.Fd()), &unix.CachestatRange{}, &st, 0); err != nil {
		t.Fatalf("cachestat %s: %v (the kernel needs Linux 6.5 or later)", path, err)
	}
	return st
}

// A preallocation step that fails (a write-back of zeros that will not
// start; a fallocate refused for want of space, not of support) stops
// preallocation at the first failure: appends go on, into the holes past
// the prepared part, and the store stays healthy.
func TestPreallocationStopsWhenItFails(t *testing.T) {
	for _, tc := range []struct {
		name  string
		by    Preallocation
		op    string // the step refused
		errno syscall.Errno
	}{
		{"zeros' write-back", PreallocateZeros, "sync_file_range", syscall.EIO},
		{"fallocate", PreallocateFallocate, "fallocate", syscall.ENOSPC},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t.TempDir())
			cfg.SegmentSize = 4 << 20
			cfg.PreallocateAhead = 6 << 20
			cfg.PreallocateBy = tc.by
			var failed atomic.Int32
			refuseStep(&cfg, tc.op, tc.errno, &failed, func(path string) bool {
				// The first segment's, prepared before the store opens, would fail the open.
				return strings.HasSuffix(path, preparedSuffix) && path != preparedPath(cfg, 0)
			})
			s := openStore(t, cfg)
			defer s.Close()
			appendBatches(t, s, 1, 3)
			waitFor(t, func() bool { return failed.Load() > 0 })
			big := megabyteBatch()
			for idx := uint64(4); idx < 10; idx++ { // past the first segment
				if _, err := s.Append(idx, big); err != nil {
					t.Fatalf("append %d after preallocation stopped: %v", idx, err)
				}
			}
			if _, err := os.Stat(segmentPath(cfg, cfg.SegmentSize)); err != nil {
				t.Fatalf("second segment: %v", err)
			}
			if n := failed.Load(); n != 1 {
				t.Fatalf("the preallocator tried %s %d times after it failed, want it stopped at the first", tc.op, n-1)
			}
			if got := readQueue(t, s, "T", 0); len(got) == 0 {
				t.Fatal("queue 0 empty")
			}
		})
	}
}

// The page cache is dropped behind the writer whether the next segment is
// zero-filled ahead of it or not.
func TestPageCacheDroppedBehindTheWriter(t *testing.T) {
	for name, ahead := range map[string]int64{"allocated ahead": 1 << 20, "none ahead": -1} {
		t.Run(name, func(t *testing.T) { testPageCacheDroppedBehindTheWriter(t, ahead) })
	}
}

func testPageCacheDroppedBehindTheWriter(t *testing.T, ahead int64) {
	cfg := testConfig(t.TempDir())
	cfg.SegmentSize = 16 << 20
	cfg.PreallocateAhead = ahead
	cfg.PageCacheBehind = 2 << 20
	cfg.FlushMode = FlushSync
	s := openStore(t, cfg)
	defer s.Close()
	batch := megabyteBatch()
	for idx := uint64(1); idx <= 8; idx++ { // to about 7.6 MiB
		if _, err := s.Append(idx, batch); err != nil {
			t.Fatal(err)
		}
	}
	_, end := s.CommitlogOffsets()
	seg := segmentPath(cfg, 0)
	// Everything more than PageCacheBehind (2 MiB) behind the durable end,
	// in whole MiB, leaves the page cache: at least the first 4 MiB.
	waitFor(t, func() bool { return residentPages(t, seg, 0, 4<<20) == 0 })
	// The last MiB written, well inside the window, stays.
	if n := residentPages(t, seg, end-(1<<20), end); n == 0 {
		t.Fatalf("none of the last MiB written is in the page cache")
	}
	// The records dropped from the cache still read back from the disk.
	res, err := s.GetMessages(GetRequest{Topic: "T", QueueID: 0, Offset: 0, MaxMessages: 4, MaxBytes: 1 << 20})
	if err != nil || res.Status != Found || len(res.Records) != 4 {
		t.Fatalf("read of dropped records: %v, %+v", err, res.Status)
	}
}

// megabyteBatch is 64 messages of 15 KiB to queue 0 of topic T, about
// 0.95 MiB encoded.
func megabyteBatch() []message.Message {
	batch := make([]message.Message, 64)
	for i := range batch {
		batch[i] = message.Message{Topic: "T", QueueID: 0, Body: bytes.Repeat([]byte{'z'}, 15<<10)}
	}
	return batch
}

// residentPages counts the pages of [from, to) of the file at path that
// are in the page cache.
func residentPages(t *testing.T, path string, from, to int64) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	page := int64(os.Getpagesize())
	from -= from % page
	m, err := unix.Mmap(int(f.Fd()), from, int(to-from), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	vec := make([]byte, (int64(len(m))+page-1)/page)
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		t.Fatal(e)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}

// QueueStart finds a queue's first message while the queue holds it, and
// says so once retention has deleted it.
func TestQueueStart(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.RetentionAge = time.Hour
	s := openStore(t, cfg)
	defer s.Close()
	if _, ok := s.QueueStart("T", 0); ok {
		t.Fatal("a queue never written has a start")
	}
	appendBatches(t, s, 1, 300)
	for q := int32(0); q < 4; q++ {
		pos, ok := s.QueueStart("T", q)
		if first := readQueue(t, s, "T", q)[0]; !ok || first.QueueOffset != 0 || pos != first.Offset {
			t.Fatalf("queue %d starts at %d (%v), want its first message's commitlog offset %d", q, pos, ok, first.Offset)
		}
	}
	if _, ok := s.QueueStart("T", 7); ok {
		t.Fatal("queue 7, never written, has a start")
	}
	ageSegments(t, cfg, 2)
	if _, err := s.DeleteExpired(time.Now()); err != nil {
		t.Fatal(err)
	}
	for q := int32(0); q < 4; q++ {
		if pos, ok := s.QueueStart("T", q); ok {
			t.Fatalf("queue %d starts at %d after retention deleted its first messages", q, pos)
		}
	}
}
