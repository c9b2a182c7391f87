package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
)

// The Raft log over a broker's commitlog (docs/commitlog-raft-log.md,
// step 2): a raft.LogStore that keeps every entry in the store an
// EntryLog is, its records where consumers read them and the rest of the
// entry (its term, type, time, extensions and the data before its
// records) in the frame before them, so that each byte a producer sends is
// written once on every replica. A member runs on it when its
// RaftConfig names an EntryLog (a broker with --raft-log commitlog).

// LogEntry is one Raft entry as an EntryLog keeps it: Meta is what
// commitlogLog encodes of it, Records the records its data ends with.
type LogEntry struct {
	Index   uint64
	Meta    []byte
	Records []byte
	// Command is, for an entry to store, a command entry's data before
	// its records (in Meta too), for the EntryLog to read what it must
	// know of the entry as it stores it: the broker, which topic a
	// deletion deletes. Not kept apart; nil from ReadEntry.
	Command []byte
}

// ErrNoEntry is what an EntryLog answers for an entry it does not hold.
var ErrNoEntry = errors.New("no such raft entry")

// EntryLog is what commitlogLog needs of a store: the broker's
// storage.Store behind a small adapter (cluster imports no store).
type EntryLog interface {
	StoreEntries([]LogEntry) error
	// ReadEntry answers ErrNoEntry (wrapped) for an entry it does not hold.
	ReadEntry(index uint64) (LogEntry, error)
	// EntryIndexes: the first and last entries held, ok false for none.
	EntryIndexes() (first, last uint64, ok bool)
	// CutStored takes back the entries above after not applied yet.
	CutStored(after uint64) error
	// ForgetEntries stops holding the entries below index for Raft.
	ForgetEntries(index uint64)
	// IndexAtStart readies the entries Raft reads as the member starts,
	// before anything else: every one when the member has no snapshot
	// (Raft replays them all), else the newest (Raft's last entry), the
	// state machine's restore of the snapshot holding the rest from
	// where the snapshot says (as the broker's does): a start need not
	// read a whole commitlog.
	IndexAtStart(snapshot bool) error
}

// RecordsAt says where the records of an entry's data begin: len(data)
// when it holds none (the broker knows its entries' layouts).
type RecordsAt func(data []byte) int

// commitlogLog is the raft.LogStore over an EntryLog.
type commitlogLog struct {
	log       EntryLog
	recordsAt RecordsAt
}

// NewCommitlogLog is a Raft log store over log, which splits a command
// entry's data where recordsAt says.
func NewCommitlogLog(log EntryLog, recordsAt RecordsAt) raft.LogStore {
	return &commitlogLog{log: log, recordsAt: recordsAt}
}

// metaV1 tags the encoding of an entry's fields in its frame.
const metaV1 = 1

// encodeMeta is an entry's fields, with ext for its extensions, and the
// data before its records.
func encodeMeta(l *raft.Log, ext, head []byte) []byte {
	b := make([]byte, 0, 32+len(ext)+len(head))
	b = append(b, metaV1, byte(l.Type))
	b = binary.AppendUvarint(b, l.Term)
	var at int64
	if !l.AppendedAt.IsZero() {
		at = l.AppendedAt.UnixNano()
	}
	b = binary.AppendVarint(b, at)
	b = binary.AppendUvarint(b, uint64(len(ext)))
	b = append(b, ext...)
	return append(b, head...)
}

var errBadFrameMeta = errors.New("cluster: malformed raft entry frame")

// decodeMeta fills l's fields from meta and returns the data before its
// records.
func decodeMeta(meta []byte, l *raft.Log) ([]byte, error) {
	if len(meta) < 2 || meta[0] != metaV1 {
		return nil, errBadFrameMeta
	}
	l.Type = raft.LogType(meta[1])
	b := meta[2:]
	term, n := binary.Uvarint(b)
	if n <= 0 {
		return nil, errBadFrameMeta
	}
	b = b[n:]
	at, n := binary.Varint(b)
	if n <= 0 {
		return nil, errBadFrameMeta
	}
	b = b[n:]
	ext, n := binary.Uvarint(b)
	if n <= 0 || ext > uint64(len(b)-n) {
		return nil, errBadFrameMeta
	}
	l.Term = term
	l.AppendedAt = time.Time{}
	if at != 0 {
		l.AppendedAt = time.Unix(0, at)
	}
	l.Extensions = nil
	if ext > 0 {
		l.Extensions = b[n : n+int(ext) : n+int(ext)]
	}
	return b[n+int(ext):], nil
}

func (c *commitlogLog) FirstIndex() (uint64, error) {
	first, _, ok := c.log.EntryIndexes()
	if !ok {
		return 0, nil
	}
	return first, nil
}

func (c *commitlogLog) LastIndex() (uint64, error) {
	_, last, ok := c.log.EntryIndexes()
	if !ok {
		return 0, nil
	}
	return last, nil
}

// GetLog reads entry index back. Its records are as stored, with the
// fields the store fills in (offsets, Raft index, CRC), so its data is
// not the bytes proposed: an entry checksum is computed again over it
// (each record's own CRC and the frame's were checked as they were read).
func (c *commitlogLog) GetLog(index uint64, l *raft.Log) error {
	e, err := c.log.ReadEntry(index)
	if errors.Is(err, ErrNoEntry) {
		return raft.ErrLogNotFound
	}
	if err != nil {
		return err
	}
	head, err := decodeMeta(e.Meta, l)
	if err != nil {
		return fmt.Errorf("raft entry %d: %w", index, err)
	}
	l.Index = index
	l.Data = nil
	if len(head)+len(e.Records) > 0 {
		l.Data = append(append(make([]byte, 0, len(head)+len(e.Records)), head...), e.Records...)
	}
	if len(l.Extensions) == 1 && l.Extensions[0] == entryChecksumV1 {
		l.Extensions = entryChecksum(l.Data)
	}
	return nil
}

// storedExtensions is what the frame keeps of an entry's extensions: an
// entry checksum only as its tag. The checksum is over the data as it
// came, which differs between the bytes proposed (records not filled in)
// and an entry read back (filled in), as a follower catching up is sent
// it; the frame must not, or replicas' commitlogs would differ by the
// source of each entry. The frame's CRC and the records' own cover the
// stored bytes, and GetLog computes the checksum again.
func storedExtensions(ext []byte) []byte {
	if len(ext) == 5 && ext[0] == entryChecksumV1 {
		return ext[:1]
	}
	return ext
}

func (c *commitlogLog) StoreLog(l *raft.Log) error { return c.StoreLogs([]*raft.Log{l}) }

// StoreLogs stores each entry as its frame and its records, durably.
func (c *commitlogLog) StoreLogs(logs []*raft.Log) error {
	entries := make([]LogEntry, len(logs))
	for i, l := range logs {
		at := len(l.Data)
		if l.Type == raft.LogCommand {
			at = c.recordsAt(l.Data)
		}
		entries[i] = LogEntry{Index: l.Index, Meta: encodeMeta(l, storedExtensions(l.Extensions), l.Data[:at]), Records: l.Data[at:]}
		if l.Type == raft.LogCommand {
			entries[i].Command = l.Data[:at]
		}
	}
	return c.log.StoreEntries(entries)
}

// DeleteRange deletes [min, max]: a suffix that a new leader's log
// contradicts (max at or past the last entry) is cut from the commitlog
// where it is not applied yet; a prefix that a snapshot covers is only
// forgotten, since retention owns the commitlog's segments. (After
// installing a snapshot Raft deletes the whole log: both.)
func (c *commitlogLog) DeleteRange(min, max uint64) error {
	first, last, ok := c.log.EntryIndexes()
	if !ok {
		return nil
	}
	if max >= last { // a suffix, or the whole log
		if err := c.log.CutStored(min - 1); err != nil {
			return err
		}
	}
	if min <= first { // a prefix, or the whole log
		c.log.ForgetEntries(max + 1)
	}
	return nil
}

// IsMonotonic: the log has no gaps (raft.MonotonicLogStore), so after
// installing a snapshot Raft deletes the whole log before it goes on.
func (c *commitlogLog) IsMonotonic() bool { return true }

// Close closes nothing: the store belongs to the broker, which closes it
// after the member (RaftConfig.EntryLog).
func (c *commitlogLog) Close() error { return nil }

var (
	_ raft.LogStore          = (*commitlogLog)(nil)
	_ raft.MonotonicLogStore = (*commitlogLog)(nil)
)
