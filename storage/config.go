package storage

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/raftmq/raftmq/internal/defaults"
	"github.com/raftmq/raftmq/message"
)

// DefaultRetentionAge is how long commitlog segments are kept by default,
// RocketMQ's fileReservedTime.
const DefaultRetentionAge = 72 * time.Hour

// FlushMode says when appended records reach the disk.
type FlushMode int

const (
	// FlushAsync: a flusher fdatasyncs the commitlog every FlushInterval.
	// Under Raft this is the normal mode: an acknowledged entry is already
	// fsynced in the Raft log, and the store's checkpoint never runs ahead
	// of what the commitlog has flushed.
	FlushAsync FlushMode = iota
	// FlushSync: Append fdatasyncs before it returns.
	FlushSync
)

// Config configures a Store. Zero fields take the documented defaults.
type Config struct {
	// Dir holds everything the store writes. Required.
	Dir string
	// SegmentSize is the size of each commitlog segment file. Default 1 GiB
	// (as RocketMQ). Every replica of a group must use the same size, or
	// their commitlogs are not byte-identical.
	SegmentSize int64
	// PreallocateAhead is how far past the writer the next commitlog
	// segment's blocks are allocated in the background (see
	// preallocator). Default 32 MiB: zeroing the whole next segment at once
	// competed with the writer for the disk (measured: 1 KiB x 256 sync
	// appends 1.38 ms a batch with a whole segment ahead, 1.0 ms with
	// 32 MiB). Negative: none, appends go into the segment's holes
	// (the page cache is still dropped behind, PageCacheBehind).
	PreallocateAhead int64
	// PreallocateIdle is how far past the writer the next segment is
	// prepared while the writer is idle (no append for 50 ms), beyond
	// PreallocateAhead: zeros written then take the disk from no load, and
	// a burst of appends that follows runs for that long with none beside
	// it. Under load the preallocator keeps to PreallocateAhead, so a roll
	// never starts a burst of zeros this size. Default 512 MiB, at most a
	// segment: three replicas on one disk, 4 alternated pairs against
	// PreallocateAhead alone, batched publish 1.15x and send to receive at
	// a low load p50 0.64x, ahead in all 4, 16 sync senders 0.98x (ahead
	// in 1) (broker/README.md, fifteenth sitting). Negative or below
	// PreallocateAhead: PreallocateAhead only.
	PreallocateIdle int64
	// idleQuiet is how long the writer must not append for the
	// preallocator to go past PreallocateAhead (default 50 ms); tests set it.
	idleQuiet time.Duration
	// PreallocateBy is how the segments' blocks are allocated ahead of the
	// writer: PreallocateZeros (the default) or PreallocateFallocate.
	PreallocateBy Preallocation
	// PageCacheBehind is how much of the commitlog behind the writer stays
	// in the page cache: older bytes, once durable, are dropped from it
	// (posix_fadvise DONTNEED, as PostgreSQL does behind its WAL), by the
	// preallocation goroutine. Default 256 MiB, the recent messages that
	// caught-up consumers read; lagging consumers read from the disk.
	// Without it the cache grows by every byte written, and on a VM the
	// first touch of each new page of memory is slow: zero-filling the next
	// segment into fresh pages ran at about 300 MB/s here, into pages the
	// store had dropped at 3 GB/s. Negative keeps everything (the kernel
	// decides). It works with PreallocateAhead negative too.
	PageCacheBehind int64
	// RaftLog says the commitlog is the Raft log: entries are stored with
	// StoreEntries and dispatched when applied (entries.go). Recovery then
	// dispatches only what the checkpoint covers; the entries after it stay
	// stored, for Raft to apply again or to cut, and without a checkpoint
	// that matches the commitlog nothing is dispatched until
	// DispatchStored. Batches without a frame (appended before) are
	// dispatched as recovery always did. Default false.
	RaftLog bool
	// MaxMessageSize caps one encoded record. Default 4 MiB. Must fit in a
	// segment.
	MaxMessageSize int
	// DedupWindow: a record marked message.SysFlagDedup whose unique key
	// (UNIQ_KEY) a record of the same topic stored up to this long before
	// it also has (by the records' store times) is appended dropped (no read returns it);
	// its append result is the stored record's, marked Duplicate. Found through the key index, so
	// every replica decides alike. 0 (the default) disables.
	DedupWindow time.Duration
	// MaxQueuesPerTopic bounds queue ids: 0 <= id < MaxQueuesPerTopic.
	// Default 1024.
	MaxQueuesPerTopic int32
	// QueueEntriesPerFile is the number of 20-byte consume queue entries in
	// one consume queue file. Default 300,000 (6 MB files, as RocketMQ).
	QueueEntriesPerFile int64
	// IndexSlots and IndexEntries size one key index file: 4 bytes a slot,
	// 28 bytes an entry. Defaults 65,536 slots and 4,000,000 entries
	// (112 MB files). Each message adds one or two entries, each into a
	// random slot, while Append runs: a slot table that stays in the CPU's
	// caches and TLB (256 KiB) made 1 KiB x 256 sync appends 1.38 -> 1.06
	// ms a batch against 1,000,000 slots (4 MB). The price is longer
	// chains for a key lookup to walk (about 60 entries, compared by hash,
	// in a full file). A file keeps the geometry it was created with.
	IndexSlots   int
	IndexEntries int
	// MaxScanEntries caps the consume queue entries one read looks at while
	// skipping entries whose tag does not match. Default 4096.
	MaxScanEntries int
	// FlushMode and FlushInterval: see FlushMode. Default async every 200 ms.
	FlushMode     FlushMode
	FlushInterval time.Duration
	// CheckpointInterval is how often consume queues and the index are
	// flushed and the checkpoint written; recovery re-dispatches the
	// commitlog from the checkpoint on. Default 1 s.
	CheckpointInterval time.Duration
	// RetentionAge: commitlog segments last written longer ago are deleted,
	// oldest first, never the active one. Default DefaultRetentionAge.
	// Negative disables.
	RetentionAge time.Duration
	// RetentionDiskRatio: while the disk holding Dir is fuller than this
	// ratio, the oldest segments are deleted whatever their age. Default
	// 0.75. Values >= 1 disable it.
	RetentionDiskRatio float64
	// RetentionInterval is how often retention runs. Default 10 s.
	RetentionInterval time.Duration
	// RecycleSegments is how many segments that retention deletes for age
	// are kept, renamed <start>.spare, to become new segments later instead
	// of zero-filled fresh files (PostgreSQL recycles its WAL segments the
	// same way). A fresh segment costs the disk its size in zeros before
	// any message goes in: measured here, about 40% on top of the disk
	// time of the appends themselves. A spare's blocks are written
	// already; its old records are never read as new ones (every record
	// holds its own offset, and every write ends with an end-of-data
	// marker). Spares count towards disk usage: when the disk is fuller
	// than RetentionDiskRatio they are deleted first. Default 2. Negative
	// disables.
	RecycleSegments int
	// Logger receives structured logs. Default slog.Default().
	Logger *slog.Logger

	// DiskFault is for tests: it injects disk errors (EIO, ENOSPC) into
	// a real store. When set, it is called before each of the writer's
	// system calls on a commitlog segment ("write", "sync_file_range",
	// "fdatasync"), before the preallocator fallocates part of the next
	// segment or starts the write-back of the zeros it wrote there
	// ("fallocate", "sync_file_range", on its <start>.alloc file) and
	// before a topic's consume queues are removed ("remove"), with the
	// file's path; an error it returns is taken as that call's error.
	// Leave it nil in production.
	DiskFault func(op, path string) error

	// diskUsage replaces statfs in tests.
	diskUsage func(dir string) (float64, error)
}

func (c Config) withDefaults() (Config, error) {
	if c.Dir == "" {
		return c, errors.New("storage: Config.Dir is required")
	}
	defaults.IfZero(&c.SegmentSize, 1<<30)
	defaults.IfZero(&c.PreallocateAhead, min(32<<20, c.SegmentSize))
	defaults.IfZero(&c.PreallocateIdle, min(512<<20, c.SegmentSize))
	defaults.IfZero(&c.idleQuiet, 50*time.Millisecond)
	defaults.IfZero(&c.PageCacheBehind, 256<<20)
	defaults.IfZero(&c.MaxMessageSize, 4<<20)
	defaults.IfZero(&c.MaxQueuesPerTopic, 1024)
	defaults.IfZero(&c.QueueEntriesPerFile, 300_000)
	defaults.IfZero(&c.IndexSlots, 65_536)
	defaults.IfZero(&c.IndexEntries, 4_000_000)
	defaults.IfZero(&c.MaxScanEntries, 4096)
	defaults.IfZero(&c.FlushInterval, 200*time.Millisecond)
	defaults.IfZero(&c.CheckpointInterval, time.Second)
	defaults.IfZero(&c.RetentionAge, DefaultRetentionAge)
	defaults.IfZero(&c.RetentionDiskRatio, 0.75)
	defaults.IfZero(&c.RetentionInterval, 10*time.Second)
	defaults.IfZero(&c.RecycleSegments, 2)
	defaults.IfZero(&c.Logger, slog.Default())
	if c.diskUsage == nil {
		c.diskUsage = diskUsage
	}
	switch {
	case c.MaxMessageSize < message.MinSize:
		return c, fmt.Errorf("storage: MaxMessageSize %d is below the smallest record (%d)", c.MaxMessageSize, message.MinSize)
	case c.SegmentSize < int64(c.MaxMessageSize)+message.BlankSize:
		return c, fmt.Errorf("storage: SegmentSize %d must hold a record of MaxMessageSize %d", c.SegmentSize, c.MaxMessageSize)
	case c.MaxQueuesPerTopic < 0, c.QueueEntriesPerFile < 1, c.IndexSlots < 1, c.IndexEntries < 1, c.MaxScanEntries < 1:
		return c, errors.New("storage: queue, index and scan limits must be positive")
	case c.IndexEntries > maxIndexEntries, c.IndexSlots > maxIndexSlots:
		return c, fmt.Errorf("storage: IndexEntries must be at most %d and IndexSlots at most %d", maxIndexEntries, maxIndexSlots)
	case c.FlushInterval < 0, c.CheckpointInterval < 0, c.RetentionInterval < 0:
		return c, errors.New("storage: intervals must be positive")
	}
	return c, nil
}

// Preallocation is how the next commitlog segment's blocks are allocated
// ahead of the writer (preallocate.go).
type Preallocation int

const (
	// PreallocateZeros writes zeros into them, so the writer's syncs land
	// in allocated, written blocks, the cheapest sync there is; but each
	// byte is written twice, which batched publish with three replicas on
	// one disk pays for in bandwidth.
	PreallocateZeros Preallocation = iota
	// PreallocateFallocate allocates them with fallocate, which writes no
	// data; each sync into them also writes the extents it converts from
	// unwritten. Where the file system has no fallocate, zeros are
	// written.
	PreallocateFallocate
)
