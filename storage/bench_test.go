package storage

import (
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/raftmq/raftmq/message"
	"golang.org/x/sys/unix"
)

// Benchmarks of the store's append and read paths.
//
// Units: one benchmark op is one Append call (one batch) or one GetMessages
// call. b.SetBytes is the body bytes of the messages of that op (batch ×
// body size), so MB/s is payload throughput; "msgs/s" counts messages and
// "logMB/s" the encoded record bytes written to the commitlog.
//
// Each append benchmark opens a fresh store with the configuration of
// benchConfig and appends one warm-up batch before the timer starts (the
// first Append of a new store creates segment 0 and the index and queue
// files), then waits for the store's background preallocation to go quiet,
// so the timed part is the steady state. It still pays for segment rolls
// and for the background preallocation of what it writes.
//
// The benchmarks use only the store's exported API (and openStore), so
// they keep compiling while its internals change.

const (
	benchTopic    = "BenchTopic"
	benchQueues   = 8
	benchSegSize  = 256 << 20
	benchPoolMsgs = 16384 // distinct messages cycled through; a multiple of every batch size
)

// benchConfig is a production-like store: 256 MiB segments, default queue
// and index file sizes, default flush and checkpoint intervals, retention
// disabled.
func benchConfig(dir string, mode FlushMode) Config {
	return Config{
		Dir:                dir,
		SegmentSize:        benchSegSize,
		FlushMode:          mode,
		RetentionAge:       -1,
		RetentionDiskRatio: 2,
		Logger:             slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

// benchMessages returns n messages as a producer would send them, spread
// round-robin over benchQueues queues of benchTopic: a key, a UNIQ_KEY
// property, a tag alternating along each queue ("TagA" at even queue
// offsets of a fresh store, "TagB" at odd ones) and a random body of
// bodySize bytes. Keys and unique keys have a fixed width, so every record
// has the same encoded size.
func benchMessages(n, bodySize int) []message.Message {
	rng := rand.New(rand.NewPCG(1, 2))
	bodies := make([]byte, bodySize+4096)
	for i := range bodies {
		bodies[i] = byte(rng.Uint32())
	}
	now := time.Now().UnixMilli()
	msgs := make([]message.Message, n)
	for i := range msgs {
		tag := "TagA"
		if (i/benchQueues)%2 == 1 {
			tag = "TagB"
		}
		start := rng.IntN(4096)
		msgs[i] = message.Message{
			Topic:      benchTopic,
			QueueID:    int32(i % benchQueues),
			Tags:       tag,
			Keys:       []string{fmt.Sprintf("order-%010d", i)},
			Properties: map[string]string{message.PropertyUniqKey: fmt.Sprintf("7F00000100002A9F%016X", uint64(now)<<20|uint64(i))},
			Body:       bodies[start : start+bodySize : start+bodySize],
			BornTime:   now,
			StoreTime:  now,
		}
	}
	return msgs
}

// resultBytes is the total record size of an Append's results.
func resultBytes(res []AppendResult) int64 {
	var n int64
	for _, r := range res {
		n += int64(r.Size)
	}
	return n
}

// openBenchStore opens a store closed by b's cleanup.
func openBenchStore(b *testing.B, cfg Config) *Store {
	s := openStore(b, cfg)
	b.Cleanup(func() {
		if err := s.Close(); err != nil {
			b.Errorf("close store: %v", err)
		}
	})
	return s
}

// settle waits until no file under dir changes its allocated size for
// 300 ms (at most 60 s): background preallocation of commitlog blocks is
// done, so setup I/O does not run into the timed part.
func settle(b *testing.B, dir string) {
	b.Helper()
	last, stable := int64(-1), 0
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		var n int64
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return nil // files come and go under us
			}
			var st unix.Stat_t
			if unix.Stat(path, &st) == nil {
				n += st.Blocks * 512
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		if n != last {
			last, stable = n, 0
		} else if stable++; stable >= 6 {
			return
		}
	}
	b.Logf("store under %s still allocating after 60 s", dir)
}

// reportRates adds msgs/s and, when logBytesPerOp > 0, logMB/s.
func reportRates(b *testing.B, msgsPerOp int, logBytesPerOp int64) {
	sec := b.Elapsed().Seconds()
	if sec <= 0 {
		return
	}
	b.ReportMetric(float64(b.N)*float64(msgsPerOp)/sec, "msgs/s")
	if logBytesPerOp > 0 {
		b.ReportMetric(float64(b.N)*float64(logBytesPerOp)/sec/1e6, "logMB/s")
	}
}

// benchAppend appends batches of batch messages of bodySize bytes, one
// Append call (one Raft entry) per op.
func benchAppend(b *testing.B, bodySize, batch int, mode FlushMode) {
	benchAppendTo(b, benchConfig(b.TempDir(), mode), bodySize, batch)
}

// benchAppendTo runs the append benchmark on the store in cfg.Dir, new or
// not.
func benchAppendTo(b *testing.B, cfg Config, bodySize, batch int) {
	s := openBenchStore(b, cfg)
	pool := benchMessages(benchPoolMsgs, bodySize)

	// Warm-up: creates segment 0, the index and the queue files.
	idx := s.LastRaftIndex() + 1
	res, err := s.Append(idx, pool[:batch])
	if err != nil {
		b.Fatal(err)
	}
	logBytes := resultBytes(res) // every batch encodes to the same size
	if err := s.Flush(); err != nil {
		b.Fatal(err)
	}
	settle(b, cfg.Dir)
	next := batch

	b.SetBytes(int64(batch * bodySize))
	b.ReportAllocs()
	for b.Loop() {
		idx++
		if _, err := s.Append(idx, pool[next:next+batch]); err != nil {
			b.Fatal(err)
		}
		if next += batch; next == len(pool) {
			next = 0
		}
	}
	reportRates(b, batch, logBytes)
}

// BenchmarkAppend: body=128B|1KiB, batch=1|16|256 messages per Append,
// flush=async (flusher every 200 ms) | sync (fdatasync per Append).
func BenchmarkAppend(b *testing.B) {
	bodies := []struct {
		name string
		size int
	}{{"128B", 128}, {"1KiB", 1024}}
	modes := []struct {
		name string
		mode FlushMode
	}{{"async", FlushAsync}, {"sync", FlushSync}}
	for _, body := range bodies {
		for _, batch := range []int{1, 16, 256} {
			for _, mode := range modes {
				b.Run(fmt.Sprintf("body=%s/batch=%d/flush=%s", body.name, batch, mode.name), func(b *testing.B) {
					benchAppend(b, body.size, batch, mode.mode)
				})
			}
		}
	}
}

// BenchmarkStoreAppend1KiBBatch256 is the store half of the store/raw pair:
// FlushSync, 256 messages of 1 KiB body per Append (one fdatasync each),
// on a store in its steady state: retention has retired old segments,
// which become the new ones (Config.RecycleSegments), as the raw loop
// rewrites one file whose blocks are written already. The spares are out
// of the page cache, as old segments are. The same append on a fresh
// store, whose every new segment is zero-filled first, is
// BenchmarkAppend/body=1KiB/batch=256/flush=sync.
func BenchmarkStoreAppend1KiBBatch256(b *testing.B) {
	cfg := benchConfig(b.TempDir(), FlushSync)
	cfg.RetentionAge = time.Hour
	cfg.RecycleSegments = benchSpares
	fillAndRetire(b, cfg, benchSpares+1)
	benchAppendTo(b, cfg, 1024, 256)
}

// benchSpares is how many retired segments BenchmarkStoreAppend1KiBBatch256
// starts with: enough for the rolls of a few seconds of appends, as
// retention keeps supplying them in a store that runs at its limit.
const benchSpares = 4

// fillAndRetire appends to the store in cfg.Dir (fast: FlushAsync, 4 MiB
// batches) until it holds retire+1 segments, retires all but the active
// one through retention, drops the spares from the page cache, and closes
// the store.
func fillAndRetire(b *testing.B, cfg Config, retire int) {
	fill := cfg
	fill.FlushMode = FlushAsync
	s := openStore(b, fill)
	pool := benchMessages(4096, 1024)
	idx := uint64(0)
	for {
		_, end := s.CommitlogOffsets()
		if end >= int64(retire)*cfg.SegmentSize+1<<20 {
			break
		}
		idx++
		if _, err := s.Append(idx, pool); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.Flush(); err != nil {
		b.Fatal(err)
	}
	ageSegments(b, cfg, 1)
	if n, err := s.DeleteExpired(time.Now()); err != nil || n != retire {
		b.Fatalf("retention retired %d segments (%v), want %d", n, err, retire)
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	spares, _ := filepath.Glob(filepath.Join(cfg.Dir, commitlogDir, "*"+spareSuffix))
	for _, p := range spares {
		f, err := os.Open(p)
		if err != nil {
			b.Fatal(err)
		}
		unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
		f.Close()
	}
}

// BenchmarkRawAppend1KiBBatch256 is the I/O floor for the store half: per
// op, the bytes the store writes for one batch (the 256 encoded records,
// read back from a scratch store) go to a file with one WriteAt and one
// fdatasync. The file is preallocated as the store's segments end up (every
// block written with zeros and synced before use) and is written
// sequentially, wrapping to offset 0 when full.
func BenchmarkRawAppend1KiBBatch256(b *testing.B) {
	const batch, bodySize = 256, 1024
	buf := encodeBatch(b, benchMessages(batch, bodySize))

	f, err := os.OpenFile(filepath.Join(b.TempDir(), "raw"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	zeros := make([]byte, 1<<20)
	for off := int64(0); off < benchSegSize; off += int64(len(zeros)) {
		if _, err := f.WriteAt(zeros, off); err != nil {
			b.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	rc, err := f.SyscallConn()
	if err != nil {
		b.Fatal(err)
	}
	var fd int
	if err := rc.Control(func(d uintptr) { fd = int(d) }); err != nil {
		b.Fatal(err)
	}

	var off int64
	b.SetBytes(batch * bodySize)
	b.ReportAllocs()
	for b.Loop() {
		if off+int64(len(buf)) > benchSegSize {
			off = 0
		}
		if _, err := f.WriteAt(buf, off); err != nil {
			b.Fatal(err)
		}
		if err := unix.Fdatasync(fd); err != nil {
			b.Fatal(err)
		}
		off += int64(len(buf))
	}
	reportRates(b, batch, int64(len(buf)))
}

// encodeBatch returns the bytes a store writes for msgs appended as one
// batch to an empty store: it appends them to a scratch store and reads the
// records back.
func encodeBatch(b *testing.B, msgs []message.Message) []byte {
	s := openStore(b, benchConfig(b.TempDir(), FlushAsync))
	defer s.Close()
	res, err := s.Append(1, msgs)
	if err != nil {
		b.Fatal(err)
	}
	var buf []byte
	for _, r := range res {
		rec, err := s.ReadMessage(r.Offset)
		if err != nil {
			b.Fatal(err)
		}
		buf = append(buf, rec...)
	}
	if int64(len(buf)) != resultBytes(res) || res[len(res)-1].Offset+int64(res[len(res)-1].Size) != int64(len(buf)) {
		b.Fatalf("batch reads back as %d bytes, the store wrote %d", len(buf), resultBytes(res))
	}
	return buf
}

// BenchmarkGetMessages reads 32 messages of 1 KiB body per GetMessages call
// from a store whose data is in the page cache, going round the queues.
// filter=none reads every message; filter=half asks for TagA, which half the
// messages of each queue carry, so a call scans 64 entries for its 32.
func BenchmarkGetMessages(b *testing.B) {
	const (
		bodySize = 1024
		perQueue = 8192
		perCall  = 32
	)
	cfg := benchConfig(b.TempDir(), FlushAsync)
	s := openBenchStore(b, cfg)
	pool := benchMessages(benchQueues*perQueue, bodySize)
	for i := 0; i < len(pool); i += 256 {
		if _, err := s.Append(uint64(i/256+1), pool[i:i+256]); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.Flush(); err != nil {
		b.Fatal(err)
	}
	settle(b, cfg.Dir)
	for q := int32(0); q < benchQueues; q++ {
		if min, max := s.QueueOffsets(benchTopic, q); min != 0 || max != perQueue {
			b.Fatalf("queue %d holds [%d, %d), want [0, %d)", q, min, max, perQueue)
		}
	}

	for _, v := range []struct {
		name string
		tags []int64
	}{{"filter=none", nil}, {"filter=half", []int64{message.TagHash("TagA")}}} {
		b.Run(v.name, func(b *testing.B) {
			var offs [benchQueues]int64
			q := 0
			b.SetBytes(perCall * bodySize)
			b.ReportAllocs()
			for b.Loop() {
				res, err := s.GetMessages(GetRequest{
					Topic: benchTopic, QueueID: int32(q), Offset: offs[q],
					MaxMessages: perCall, MaxBytes: 1 << 20, TagHashes: v.tags,
				})
				if err != nil {
					b.Fatal(err)
				}
				if res.Status != Found || len(res.Records) != perCall {
					b.Fatalf("queue %d at %d: %v, %d records", q, offs[q], res.Status, len(res.Records))
				}
				// Wrap at the queue's end. With the filter a call stops after
				// its 32nd match, so the queue's last entry (a TagB) is left
				// over: skip it rather than read it alone.
				if offs[q] = res.NextOffset; offs[q] >= perQueue-1 {
					offs[q] = 0
				}
				q = (q + 1) % benchQueues
			}
			reportRates(b, perCall, 0)
		})
	}
}

// BenchmarkConcurrentSyncs is what a small append and its fsync cost when
// other files on the same disk are synced at the same moment, as the
// three replicas of a group on one machine sync their Raft logs for each
// entry: writers=N runs N goroutines, each appending 1.1 KB to a file of
// its own and fsyncing it, and reports the p50 and p90 of one append and
// fsync. On a disk that serializes syncs the p50 grows with N: a commit
// waits for the second of three.
//
//	go test ./storage -run '^$' -bench ConcurrentSyncs -benchtime 2000x
func BenchmarkConcurrentSyncs(b *testing.B) {
	for _, writers := range []int{1, 2, 3} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			dir := b.TempDir()
			took := make([][]time.Duration, writers)
			errs := make(chan error, writers)
			b.ResetTimer()
			for w := range writers {
				go func() {
					errs <- appendAndSync(filepath.Join(dir, fmt.Sprint(w)), b.N, &took[w])
				}()
			}
			for range writers {
				if err := <-errs; err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			var all []time.Duration
			for _, t := range took {
				all = append(all, t...)
			}
			slices.Sort(all)
			b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-us")
			b.ReportMetric(float64(all[len(all)*9/10].Microseconds()), "p90-us")
		})
	}
}

// appendAndSync appends n records of 1.1 KB to a new file at path, each
// fsynced, and notes how long each took.
func appendAndSync(path string, n int, took *[]time.Duration) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	rec := make([]byte, 1100)
	for i := range n {
		start := time.Now()
		if _, err := f.WriteAt(rec, int64(i*len(rec))); err != nil {
			return err
		}
		if err := f.Sync(); err != nil {
			return err
		}
		*took = append(*took, time.Since(start))
	}
	return nil
}
