// Package storage owns the on-disk store of one broker replica: the
// commitlog, the consume queues, the key index, the checkpoint, recovery
// and retention, all under one directory. It knows nothing of Raft, gRPC or
// brokers; the broker's Raft state machine is its only writer.
//
// # Layout
//
//	DIR/commitlog/<20-digit start offset>          segments of Config.SegmentSize bytes
//	DIR/commitlog/<20-digit offset>.spare           retired segments kept for reuse
//	DIR/commitlog/<20-digit offset>.alloc           the next segment, being prepared
//	DIR/consumequeue/<topic>/<queue>/<first offset> 20-byte entries, QueueEntriesPerFile a file
//	DIR/index/<20-digit offset>                     key hash index files
//	DIR/checkpoint                                  how far the derived files are durable
//	DIR/LOCK                                        flock: one process per directory
//
// # Commitlog
//
// Every record of every topic, in arrival order, in fixed-size segments
// whose blocks are allocated before use: a spare that retention retired
// (recycle.go), or else a new file zero-filled (or fallocated, as
// Config.PreallocateBy asks) in the background, one segment ahead, further
// while the writer is idle (preallocate.go): an fdatasync into written
// blocks is the cheapest, and
// one that must allocate blocks, into a growing file, costs 2-3 times as
// much. A
// record, in the layout of package message (message/record.go, shared with
// producers), carries its length, a CRC32-C, the Raft index of its batch,
// its own commitlog offset, its queue id and offset, times, topic, tags,
// keys, properties and body; record.go holds how the store reads them
// (what fails to check on disk is ErrCorrupt). A record never spans
// segments: the tail of a segment that cannot take the next record is
// marked with a blank record. AppendRecords takes one Raft entry's records,
// encoded by the producer (or by the master, for older producers:
// EncodeRecord) and checked by the master (CheckRecord), and fills in only
// what the store assigns (encoded.go); Append, for callers that hold
// messages, encodes them and takes the same path. Each batch is written
// with one write per segment touched; the last record of a
// batch carries a batch-end flag, and zeros follow it to the end of its
// page: an end-of-data marker that hides whatever a reused file held
// there, and whole pages, which the kernel need not read first.
//
// Append assigns queue offsets and commitlog offsets deterministically from
// the store's state, and the caller sets store times, so replicas applying
// the same entries hold byte-identical commitlogs. Raft indexes must rise:
// an append at or below LastRaftIndex is refused with ErrStaleRaftIndex,
// which makes replaying the Raft log after a restart idempotent.
//
// # Consume queues and index
//
// Append dispatches what it writes before it returns: each record's
// consume queue entry (commitlog offset, size, tag hash) and key index
// entries (its keys and its UNIQ_KEY property), through memory-mapped
// files, while the disk writes the batch, so a message is readable
// through its queue as soon as it is stored (in FlushSync mode, a little
// before the fdatasync returns). The two halves are also apart
// (dispatch.go): StoreRecords places, numbers and writes an entry's
// records, DispatchRecords dispatches the oldest entry stored, and
// CutStored takes back stored entries not dispatched, as Raft deletes an
// uncommitted tail; what the commitlog as the Raft log needs
// (docs/commitlog-raft-log.md). The key
// index is a chain of hash-slot files in the manner of RocketMQ's
// IndexFile. Through it, a producer's retry is stored once: a record the
// broker marks (message.SysFlagDedup) whose UNIQ_KEY a record stored within
// Config.DedupWindow already has is answered with that record, and
// written dropped (dedup.go). A dropped record (message.SysFlagDropped: a
// retry, or a send the caller refused at apply) holds its place in the
// commitlog and its queue offset, so that where an entry's records go
// never depends on what apply decides (docs/commitlog-raft-log.md); its
// consume queue entry has message.DroppedTagHash, which reads step over
// without reading the record, and it has no key index entry. A drop
// decided at dispatch is written into the stored record in place. Reads
// return the raw stored records, CRC-checked, and check
// that the record is the one the consume queue entry names; damaged data is
// reported as ErrCorrupt, never returned as a message.
//
// # Durability and recovery
//
// FlushSync fdatasyncs in Append; FlushAsync leaves it to a flusher (the
// broker's Raft log already holds every acknowledged entry fsynced). Every
// CheckpointInterval the commitlog is flushed, then the consume queue and
// index mappings, then the checkpoint records the position they cover and
// the totals found there. Recovery (recovery.go) scans the commitlog from
// the checkpoint, cuts it at the end of the last whole, valid batch — a
// torn write, a CRC failure, a stale record or a batch missing its last
// record ends it, and the rest of that segment is zeroed and later segments
// deleted; a segment rolled into before a crash, with no data, goes too —
// re-dispatches from the checkpoint, and rebuilds the derived
// files from the whole commitlog when they disagree with it or are missing.
// DeleteTopic removes a topic's queues; a full rebuild would bring back
// those of its records that retention has not deleted yet.
//
// # Failure
//
// The first commitlog write or sync, consume queue or index update, or
// topic removal that fails fails the store (Store.Err, Store.Failed): from
// then on it refuses appends, flushes, checkpoints and topic deletions,
// until it is reopened and recovery cuts what the failure left half
// written. A flush is never retried: after a failed fdatasync nothing says
// which pages reached the disk, and a second one may succeed without them
// (PostgreSQL's "fsyncgate"). The error names the file (an *os.PathError).
// The store does not log its failure; its owner does. Config.DiskFault
// injects such errors into a real store, for tests.
//
// # Retention
//
// Whole segments are deleted, oldest first and never the active one, when
// last written more than RetentionAge ago or while the disk is fuller than
// RetentionDiskRatio; consume queue and index files that point only into
// deleted segments follow. A read below a queue's new minimum answers
// OffsetTooSmall with the minimum. Up to RecycleSegments segments deleted
// for age are kept as spares for the next new segments; a disk over the
// ratio gets the spares back first.
//
// # Files
//
//   - store.go: the Store, opening a directory (its lock, its files) and
//     Append/AppendRecords, and where the commitlog and a queue start and
//     end (CommitlogOffsets, QueueOffsets, QueueStart);
//   - config.go: its configuration with the documented defaults;
//   - commitlog.go: the segments, rolling from one to the next;
//   - encoded.go, record.go: records as producers encode them, the fields
//     the store fills in, records the caller drops, and how it reads and
//     checks them;
//   - preallocate.go, recycle.go: the next segment's blocks written before
//     use, by zero-filling ahead (each chunk's write-back started as it is
//     written; past PreallocateAhead only while the writer is idle) or by
//     reusing a retired segment;
//   - dispatch.go: storing an entry apart from dispatching it, drops
//     written in place, and cutting back entries stored and not dispatched;
//   - entries.go: Raft entries in the commitlog, each a frame record (the
//     entry's own fields) and its records, never across segments; the
//     in-memory index from Raft index to entry, reading one back,
//     dispatching what a snapshot covers after a restart, and the end that
//     counts Raft's own entries applied (CommittedEnd, EntryEnd: what a
//     replica reports and copies to); what a Raft log store over the
//     commitlog needs, with Config.RaftLog, whose recovery keeps the
//     entries after the checkpoint stored; at start, the newest segment's
//     entries only (IndexNewestEntries) when a snapshot covers the rest,
//     passing over the batches a WAL replica wrote before its entries;
//   - topicdelete.go: a topic's deletion as a frame in the commitlog, which
//     removes its queues wherever it is dispatched (applied, recovered,
//     rebuilt, copied), and, stored before it is applied, numbers the
//     topic's later records from 0 at once;
//   - consumequeue.go: the consume queues;
//   - index.go: the key index (keys and UNIQ_KEY);
//   - dedup.go: retries stored once, by their UNIQ_KEY within DedupWindow;
//   - mmap.go: the memory-mapped files that queues and index live in;
//   - read.go: reads through a queue (GetMessages), by offset and by key,
//     each checked;
//   - copy.go: a commitlog range read raw and appended raw, for a replica
//     catching up from a peer;
//   - checkpoint.go: how far the derived files are durable;
//   - recovery.go: the scan and cut after a crash, and rebuilding the
//     derived files;
//   - flush.go: the background flusher and retention loops;
//   - retention.go: deleting segments by age and by disk use;
//   - errors.go: the errors callers tell apart (ErrCorrupt and the like).
//
// # Figures
//
// See README.md in this folder for the benchmarks, the command that runs
// them and the figures measured on our 2-core machines.
package storage
