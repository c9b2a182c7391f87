package storage

import (
	"errors"
	"fmt"
	"sync"

	"github.com/raftmq/raftmq/message"
)

// Raft entries in the commitlog: what a Raft log store over the commitlog
// needs of the store (docs/commitlog-raft-log.md, step 2). An entry is
// stored as one batch: a frame, then its records. The frame is a record
// of topic message.FrameTopic marked message.SysFlagFrame, whose body is
// the entry's own fields as the caller encodes them (Entry.Meta), so the
// commitlog's checks, its scan and recovery's cut of a torn batch hold
// for entries as for any batch; no queue holds a frame, and dispatch and
// recovery pass over it. An entry without records (not a send) is a
// frame alone. An entry never spans segments: one that does not fit the
// rest of a segment starts the next, so its bytes are read back at once.
//
// The store keeps, in memory, where each entry is from the first it
// indexed to the last it stored: entries stored since it opened, those
// its recovery kept stored (Config.RaftLog), and those IndexEntries
// found. What Raft asks for below is ErrEntryNotFound.

// Entry is a Raft entry as the store keeps it.
type Entry struct {
	Index   uint64
	Meta    []byte // the entry's own fields, kept as they are
	Records []byte // records as EncodeRecord lays them out; none for an entry that is not a send
	// DeletesTopic names the topic the entry deletes, if it does (it then
	// has no records): the frame says so, and the topic's records stored
	// after it are numbered from 0 (topicdelete.go).
	DeletesTopic string
}

// ErrEntryNotFound: the store has not indexed that Raft entry.
var ErrEntryNotFound = errors.New("raft entry not found")

// entrySpan is where one entry is in the commitlog: its frame, and the end
// of its last record.
type entrySpan struct{ frame, end int64 }

// entryIndex maps Raft indexes to entries' spans, densely from first.
// Stores hold appendMu and mu; reads hold mu shared.
type entryIndex struct {
	mu    sync.RWMutex
	first uint64
	spans []entrySpan
}

// follows says why entry idx cannot be indexed next, if it cannot: it
// must follow the last one indexed, or start an empty index.
func (x *entryIndex) follows(idx uint64) error {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.followsLocked(idx)
}

func (x *entryIndex) followsLocked(idx uint64) error {
	if want := x.first + uint64(len(x.spans)); len(x.spans) > 0 && idx != want {
		return fmt.Errorf("%w: Raft entry %d after %d: entries are indexed without gaps", ErrInvalidMessage, idx, want-1)
	}
	return nil
}

// add indexes entry idx, when it follows the last one indexed.
func (x *entryIndex) add(idx uint64, sp entrySpan) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if err := x.followsLocked(idx); err != nil {
		return err
	}
	if len(x.spans) == 0 {
		x.first = idx
	}
	x.spans = append(x.spans, sp)
	return nil
}

func (x *entryIndex) span(idx uint64) (entrySpan, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if idx < x.first || idx-x.first >= uint64(len(x.spans)) {
		return entrySpan{}, false
	}
	return x.spans[idx-x.first], true
}

// cutAfter forgets the entries above idx.
func (x *entryIndex) cutAfter(idx uint64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	switch {
	case len(x.spans) == 0:
	case idx < x.first:
		x.spans = x.spans[:0]
	case idx-x.first < uint64(len(x.spans)):
		x.spans = x.spans[:idx-x.first+1]
	}
}

// forgetBefore forgets the entries below idx.
func (x *entryIndex) forgetBefore(idx uint64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if idx <= x.first || len(x.spans) == 0 {
		return
	}
	n := min(idx-x.first, uint64(len(x.spans)))
	x.spans = append(x.spans[:0:0], x.spans[n:]...)
	x.first += n
}

func (x *entryIndex) bounds() (first, last uint64, ok bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if len(x.spans) == 0 {
		return 0, 0, false
	}
	return x.first, x.first + uint64(len(x.spans)) - 1, true
}

// StoreEntries writes entries after every one stored, each as a frame and
// its records, placed and numbered as StoreRecords does, and makes them
// durable (an fdatasync, whatever Config.FlushMode says: they are the Raft
// log). Nothing reads their records until DispatchRecords (or, for an
// entry without records, DispatchEntry) dispatches them; ReadEntry reads
// them back at once. Indexes must rise.
func (s *Store) StoreEntries(entries []Entry) error {
	s.appendMu.Lock()
	defer s.appendMu.Unlock()
	if len(entries) == 0 {
		return nil
	}
	for _, e := range entries {
		if err := s.storeEntry(e); err != nil {
			return err
		}
	}
	if err := s.cl.flush(); err != nil {
		s.fail(err)
		return err
	}
	return nil
}

// storeEntry writes one entry as a batch: its frame, then its records, and
// indexes it.
func (s *Store) storeEntry(e Entry) error {
	if err := s.appendable(e.Index); err != nil {
		return err
	}
	if err := s.entries.follows(e.Index); err != nil {
		return err
	}
	sp, err := s.storeFrame(e)
	if err != nil {
		return err
	}
	if err := s.entries.add(e.Index, sp); err != nil {
		s.fail(err)
		return err
	}
	return nil
}

// storeFrame writes e as a batch, its frame then its records, after every
// entry stored, and keeps it as the newest stored entry. The caller holds
// appendMu and has checked e.Index.
func (s *Store) storeFrame(e Entry) (entrySpan, error) {
	if e.DeletesTopic != "" && len(e.Records) > 0 {
		return entrySpan{}, fmt.Errorf("%w: raft entry %d deletes topic %s and carries records", ErrInvalidMessage, e.Index, e.DeletesTopic)
	}
	frame, err := s.frameRecord(e.Meta, e.DeletesTopic)
	if err != nil {
		return entrySpan{}, fmt.Errorf("raft entry %d: %w", e.Index, err)
	}
	all := []AppendResult{{Size: int32(len(frame)), Topic: message.FrameTopic, frame: true, deletes: e.DeletesTopic != ""}}
	if len(e.Records) > 0 {
		if _, all, err = s.frameBatch(e.Records, false, all); err != nil {
			return entrySpan{}, fmt.Errorf("raft entry %d: %w", e.Index, err)
		}
	}
	if size := len(frame) + len(e.Records); int64(size) > s.cfg.SegmentSize {
		return entrySpan{}, fmt.Errorf("%w: raft entry %d of %d bytes, segments of %d", ErrInvalidMessage, e.Index, size, s.cfg.SegmentSize)
	}
	buf := append(append(s.entryBuf[:0], frame...), e.Records...)
	if cap(buf) <= 16<<20 {
		s.entryBuf = buf
	}
	start := s.cl.writePos.Load()
	end := s.place(all, start, true)
	if err := s.writeBatch(e.Index, buf, all, start); err != nil {
		s.fail(err)
		return entrySpan{}, err
	}
	s.lastRaftIndex = e.Index
	s.stored = append(s.stored, storedEntry{raftIndex: e.Index, start: start, end: end, frame: all[0].Offset, results: all[1:], deletes: e.DeletesTopic})
	if e.DeletesTopic != "" {
		s.numberAfresh(e.DeletesTopic)
	}
	return entrySpan{frame: all[0].Offset, end: end}, nil
}

// frameRecord encodes an entry's frame with body meta, the fields the
// store fills left zero, naming the topic it deletes if it does.
func (s *Store) frameRecord(meta []byte, deletes string) ([]byte, error) {
	m := message.Message{Topic: message.FrameTopic, Body: meta}
	if deletes != "" {
		m.Properties = map[string]string{message.PropertyDeletesTopic: deletes}
	}
	size, err := s.check(&m)
	if err != nil {
		return nil, err
	}
	return message.AppendSized(nil, &m, size), nil
}

// DispatchEntry counts the oldest stored entry, raftIndex, which has no
// records, applied: there is nothing of it to dispatch. Entries without
// records before it are passed as DispatchRecords passes them.
func (s *Store) DispatchEntry(raftIndex uint64) error {
	s.appendMu.Lock()
	defer s.appendMu.Unlock()
	if err := s.writable(); err != nil {
		return err
	}
	s.passEntriesBelow(raftIndex)
	if len(s.stored) == 0 || s.stored[0].raftIndex != raftIndex || len(s.stored[0].results) > 0 {
		return fmt.Errorf("%w: Raft entry %d is not the oldest stored one, or has records (%s)", ErrNotStored, raftIndex, s.storedSpan())
	}
	s.dispatchedEmpty()
	return nil
}

// ReadEntry reads Raft entry index back: its fields as stored, and its
// records as stored (the store's fields filled in, drops written), each
// checked.
func (s *Store) ReadEntry(index uint64) (Entry, error) {
	if s.closed.Load() {
		return Entry{}, ErrClosed
	}
	sp, ok := s.entries.span(index)
	if !ok {
		return Entry{}, fmt.Errorf("%w: %d", ErrEntryNotFound, index)
	}
	b, err := s.cl.readAt(nil, sp.frame, int(sp.end-sp.frame))
	if err != nil {
		return Entry{}, fmt.Errorf("raft entry %d: %w", index, err)
	}
	var e Entry
	for p := 0; p < len(b); {
		rec := b[p:]
		size, err := checkRecord(rec)
		switch {
		case err != nil:
		case message.HeaderOffset(rec) != sp.frame+int64(p) || message.HeaderRaftIndex(rec) != index:
			err = fmt.Errorf("%w: the record at commitlog offset %d is not raft entry %d's", ErrCorrupt, sp.frame+int64(p), index)
		case p == 0 && message.HeaderSysFlag(rec)&message.SysFlagFrame == 0:
			err = fmt.Errorf("%w: raft entry %d has no frame at commitlog offset %d", ErrCorrupt, index, sp.frame)
		}
		if err != nil {
			return Entry{}, fmt.Errorf("raft entry %d: %w", index, err)
		}
		if p == 0 {
			r, err := decodeRecord(rec[:size])
			if err != nil {
				return Entry{}, fmt.Errorf("raft entry %d: %w", index, err)
			}
			e = Entry{Index: index, Meta: r.Body, Records: b[size:], DeletesTopic: r.Properties[message.PropertyDeletesTopic]}
		}
		p += size
	}
	if len(e.Records) == 0 {
		e.Records = nil
	}
	return e, nil
}

// CommittedEnd returns where the commitlog ends for a replica whose Raft
// member applied entries through Raft index applied: after what is
// dispatched, and after the stored entries without records up to applied
// that follow it. Raft's own entries (a leader's first, barriers,
// configurations) never reach the state machine to be dispatched; a
// replica dispatches them only on the way to a later entry with records.
// Counted here, the end is the same on every replica that applied the same
// entries, whatever each dispatched, and it reaches the entry of any
// state machine snapshot (EntryEnd), which a replica that installs it
// copies to. ReadCommitlog reads to it. Without stored entries (WAL mode)
// it is the dispatched end.
func (s *Store) CommittedEnd(applied uint64) int64 {
	s.appendMu.Lock()
	defer s.appendMu.Unlock()
	return s.committedEnd(applied)
}

// committedEnd is CommittedEnd; the caller holds appendMu.
func (s *Store) committedEnd(applied uint64) int64 {
	end := s.dispatched.Load().dispatched
	for _, e := range s.stored {
		if e.raftIndex > applied || len(e.results) > 0 {
			break
		}
		end = e.end
	}
	return end
}

// EntryEnd returns where Raft entry index ends in the commitlog, for a
// state machine snapshot of it: every entry with records up to it must be
// dispatched (the state machine applied them), so that CommittedEnd
// reaches it.
func (s *Store) EntryEnd(index uint64) (int64, error) {
	s.appendMu.Lock()
	defer s.appendMu.Unlock()
	sp, ok := s.entries.span(index)
	if !ok {
		return 0, fmt.Errorf("%w: %d", ErrEntryNotFound, index)
	}
	if committed := s.committedEnd(index); committed < sp.end {
		return 0, fmt.Errorf("%w: Raft entry %d ends at commitlog offset %d; the entries up to it are dispatched to %d (%s)", ErrNotStored, index, sp.end, committed, s.storedSpan())
	}
	return sp.end, nil
}

// EntryIndexes returns the first and last Raft entries ReadEntry can
// read; ok is false when there are none.
func (s *Store) EntryIndexes() (first, last uint64, ok bool) {
	return s.entries.bounds()
}

// ForgetEntries stops indexing the entries below index (Raft compacted
// them): their bytes stay, for retention to delete.
func (s *Store) ForgetEntries(index uint64) {
	s.entries.forgetBefore(index)
}

// IndexEntries indexes the entries stored in the commitlog from offset
// from (where a batch begins: the end of the entry before, as a state
// machine snapshot records it) to its end, in place of what the index
// held: after a restart, before Raft reads the entries after its
// snapshot. Batches without a frame (appended by AppendRecords) before
// the first entry are passed over: a replica that kept its Raft log in a
// WAL wrote them before its entries were framed in the commitlog (its
// group's move, docs/commitlog-raft-log.md step 3). After an entry they
// end the index where they are: entries are dense.
func (s *Store) IndexEntries(from int64) error {
	s.appendMu.Lock()
	defer s.appendMu.Unlock()
	if err := s.writable(); err != nil {
		return err
	}
	var (
		x    entryIndex
		cur  = entrySpan{frame: -1}
		idx  uint64
		done bool
	)
	res, err := s.cl.scan(emptyLog(from), s.cl.writePos.Load(), func(rec []byte) error {
		off := message.HeaderOffset(rec)
		flag := message.HeaderSysFlag(rec)
		if flag&message.SysFlagFrame != 0 {
			cur, idx = entrySpan{frame: off}, message.HeaderRaftIndex(rec)
		}
		if flag&message.SysFlagBatchEnd == 0 {
			return nil
		}
		if cur.frame < 0 && len(x.spans) == 0 {
			return nil // a batch from before the entries
		}
		if cur.frame < 0 || done {
			done = true // a batch of no entry: the index ends before it
			return nil
		}
		cur.end = off + int64(len(rec))
		if err := x.add(idx, cur); err != nil {
			return err
		}
		cur.frame = -1
		return nil
	})
	if err == nil && res.cause != nil {
		err = res.cause
	}
	if err != nil {
		return fmt.Errorf("storage: index raft entries from commitlog offset %d: %w", from, err)
	}
	s.entries.mu.Lock()
	s.entries.first, s.entries.spans = x.first, x.spans
	s.entries.mu.Unlock()
	return nil
}

// IndexNewestEntries indexes, as IndexEntries does, the entries of the
// newest segment that holds any: the last entry, all a Raft member with a
// snapshot needs at start before its state machine restores the snapshot
// and indexes from the snapshot's offset. Every segment of a store whose
// entries are the Raft log begins with one, but the one where a WAL
// replica's batches end and its entries begin.
func (s *Store) IndexNewestEntries() error {
	// Recovery removed a segment rolled into and left empty by a crash, so
	// the last segment holds the last entry.
	return s.IndexEntries(max(s.cl.minOffset(), s.cl.lastStart()))
}

// DispatchStored dispatches, as they were written, the stored entries
// that end at or before commitlog offset through: with RaftLog, what a
// state machine snapshot covers (it records where the commitlog ended),
// when recovery found no checkpoint to dispatch from. Their drops were
// written before the snapshot was taken, so the records say what to
// dispatch; Raft applies only the entries after the snapshot again.
func (s *Store) DispatchStored(through int64) error {
	s.appendMu.Lock()
	defer s.appendMu.Unlock()
	if err := s.writable(); err != nil {
		return err
	}
	st := *s.dispatched.Load()
	for len(s.stored) > 0 && s.stored[0].end <= through {
		e := s.stored[0]
		_, err := s.cl.scan(emptyLog(e.start), e.end, func(rec []byte) error { return s.dispatchStored(rec, &st) })
		if err != nil {
			s.fail(err)
			return fmt.Errorf("storage: dispatch stored raft entry %d: %w", e.raftIndex, err)
		}
		s.dispatchedOldest(st)
	}
	return nil
}
