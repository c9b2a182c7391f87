package storage

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/raftmq/raftmq/message"
)

// Storing and dispatching, apart. A Raft entry's records are placed,
// numbered and written when the entry is stored (StoreRecords), and put in
// their consume queues and the key index when it is applied
// (DispatchRecords); AppendRecords does both in turn. Between the two the
// entry is stored and not dispatched: its bytes are in the commitlog, no
// read reaches them, and CutStored can take them back, as Raft deletes a
// follower's uncommitted tail that a new leader's log contradicts. This
// is what the commitlog as the Raft log needs (docs/commitlog-raft-log.md):
// a record's place is fixed when its entry is stored, on every replica
// alike, and what apply decides (a retry, a send refused) drops a record
// without moving it or any after it.
//
// Queue offsets are numbered at store time, in log order, past what is
// dispatched and what the stored entries took (storeNext). A record
// dropped at dispatch keeps its offset; the drop is written into the
// stored record in place: its sys flag and CRC, 8 bytes (patchDropped).
//
// With Config.RaftLog, recovery dispatches what the checkpoint covers and
// keeps the rest stored for Raft's replay (recovery.go keepStored), and a
// topic's deletion stored between entries numbers the topic's later
// records from 0 (topicdelete.go).

// storedEntry is a Raft entry's batch written to the commitlog and not
// dispatched yet.
type storedEntry struct {
	raftIndex  uint64
	start, end int64          // the commitlog bytes it took, blank fillers included
	frame      int64          // where its frame is (entries.go); -1: it has none
	results    []AppendResult // each record's place, queue offset, size, queue and tag hash
	deletes    string         // the topic it deletes (topicdelete.go)
}

// StoreRecords writes records, a sequence of records as EncodeRecord lays
// them out, as the batch of Raft entry raftIndex, after every entry stored
// before: each record's commitlog offset, queue offset and the Raft index
// are filled in. Nothing reads them until DispatchRecords dispatches the
// entry. In FlushSync mode they are durable when it returns. Checks and
// failures are AppendRecords'.
func (s *Store) StoreRecords(raftIndex uint64, records []byte) error {
	s.appendMu.Lock()
	defer s.appendMu.Unlock()
	if err := s.appendable(raftIndex); err != nil {
		return err
	}
	_, results, err := s.frameBatch(records, false, nil)
	if err != nil {
		return err
	}
	if err := s.storeFramed(raftIndex, records, results); err != nil {
		return err
	}
	return s.syncWrites()
}

// DispatchRecords dispatches the oldest stored entry, which must be Raft
// entry raftIndex holding records (its bytes as stored, or as they came
// before the store filled them in): the records drop marks, and the
// retries among them (Config.DedupWindow), are dropped, and the others put
// in their consume queues and the key index. Its results are
// AppendRecords'.
func (s *Store) DispatchRecords(raftIndex uint64, records []byte, drop []bool) ([]AppendResult, error) {
	s.appendMu.Lock()
	defer s.appendMu.Unlock()
	if err := s.writable(); err != nil {
		return nil, err
	}
	s.passEntriesBelow(raftIndex)
	if len(s.stored) == 0 || s.stored[0].raftIndex != raftIndex || len(s.stored[0].results) == 0 {
		return nil, fmt.Errorf("%w: Raft entry %d is not the oldest stored one, or has no records (%s)", ErrNotStored, raftIndex, s.storedSpan())
	}
	views, results, err := s.frameBatch(records, true, nil)
	if err != nil {
		return nil, err
	}
	e := &s.stored[0]
	if len(results) != len(e.results) {
		return nil, fmt.Errorf("%w: Raft entry %d: %d records, %d stored", ErrNotStored, raftIndex, len(results), len(e.results))
	}
	for i, r := range results {
		if st := e.results[i]; r.Size != st.Size || r.QueueID != st.QueueID || r.Topic != st.Topic {
			return nil, fmt.Errorf("%w: Raft entry %d: record %d is not the one stored", ErrNotStored, raftIndex, i)
		}
	}
	res, err := s.dispatchFramed(raftIndex, records, views, drop)
	// The drops written in place are made durable now, except with
	// RaftLog: there a crash loses only what the checkpoint does not
	// cover, and recovery keeps those entries stored for Raft to apply,
	// and drop, again (a sync per dispatch would double the entry's).
	if err == nil && s.cfg.FlushMode == FlushSync && !s.cfg.RaftLog {
		if err = s.cl.flush(); err != nil {
			s.fail(err)
		}
	}
	return res, err
}

// CutStored takes back the stored entries above Raft index after, not
// dispatched: the commitlog ends again where the first of them began, its
// bytes there are zeroed (durably, so that no restart finds them), and
// queue offsets are numbered again from there. Raft deletes an entry it
// applied only with its whole log, after installing a snapshot: every
// entry above after leaves the entry index (entries.go), and a
// dispatched one stays in the commitlog.
func (s *Store) CutStored(after uint64) error {
	s.appendMu.Lock()
	defer s.appendMu.Unlock()
	if err := s.writable(); err != nil {
		return err
	}
	s.entries.cutAfter(after) // applied entries above it too: Raft deletes its whole log after a snapshot install
	i, _ := slices.BinarySearchFunc(s.stored, after+1, func(e storedEntry, idx uint64) int {
		switch {
		case e.raftIndex < idx:
			return -1
		case e.raftIndex > idx:
			return 1
		}
		return 0
	})
	if i == len(s.stored) {
		return nil
	}
	cut, oldEnd := s.stored[i].start, s.cl.writePos.Load()
	if err := s.cl.cutBack(cut, oldEnd); err != nil {
		s.fail(err)
		return err
	}
	s.cl.writePos.Store(cut)
	s.stored = s.stored[:i]
	s.lastRaftIndex = s.dispatched.Load().raftIndex
	clear(s.storeNext)
	clear(s.deleting)
	for _, e := range s.stored {
		s.lastRaftIndex = e.raftIndex
		if e.deletes != "" {
			s.numberAfresh(e.deletes)
		}
		for _, r := range e.results {
			s.storeNext[queueKey{r.Topic, r.QueueID}] = r.QueueOffset + 1
		}
	}
	return nil
}

// StoredRaftIndexes returns the Raft indexes of the first and last stored
// entries not dispatched yet; ok is false when there are none.
func (s *Store) StoredRaftIndexes() (first, last uint64, ok bool) {
	s.appendMu.Lock()
	defer s.appendMu.Unlock()
	if len(s.stored) == 0 {
		return 0, 0, false
	}
	return s.stored[0].raftIndex, s.stored[len(s.stored)-1].raftIndex, true
}

// storedSpan describes the stored entries, for errors. The caller holds
// appendMu.
func (s *Store) storedSpan() string {
	if len(s.stored) == 0 {
		return "none stored"
	}
	return fmt.Sprintf("stored %d to %d", s.stored[0].raftIndex, s.stored[len(s.stored)-1].raftIndex)
}

// storeFramed places framed records after everything stored, numbers
// them, writes them as the batch of Raft entry raftIndex and keeps them as
// the newest stored entry. results holds each record's size, topic, queue
// and tag hash; their places and queue offsets are filled in.
func (s *Store) storeFramed(raftIndex uint64, records []byte, results []AppendResult) error {
	start := s.cl.writePos.Load()
	end := s.place(results, start, false)
	if err := s.writeBatch(raftIndex, records, results, start); err != nil {
		s.fail(err)
		return err
	}
	s.lastRaftIndex = raftIndex
	s.stored = append(s.stored, storedEntry{raftIndex: raftIndex, start: start, end: end, frame: -1, results: results})
	return nil
}

// place gives each of a batch's results its commitlog offset from start
// (a record that does not fit the rest of a segment starts the next one;
// with whole, the batch does when it does not fit whole) and each record
// but a frame its queue offset, after what is dispatched and stored. It
// returns where the batch ends.
func (s *Store) place(results []AppendResult, start int64, whole bool) int64 {
	segSize := s.cfg.SegmentSize
	pos := start
	if whole {
		var size int64
		for _, r := range results {
			size += int64(r.Size)
		}
		if segEnd := pos - pos%segSize + segSize; pos+size > segEnd {
			pos = segEnd
		}
	}
	for i := range results {
		r := &results[i]
		if segEnd := pos - pos%segSize + segSize; pos+int64(r.Size) > segEnd {
			pos = segEnd
		}
		r.Offset = pos
		pos += int64(r.Size)
		if r.frame {
			continue
		}
		k := queueKey{r.Topic, r.QueueID}
		qoff, ok := s.storeNext[k]
		if !ok && s.deleting[k.topic] == 0 { // a stored deletion numbers from 0 (topicdelete.go)
			if q := s.queue(k, false); q != nil {
				qoff = q.max.Load()
			}
		}
		s.storeNext[k] = qoff + 1
		r.QueueOffset = qoff
	}
	return pos
}

// dispatchFramed dispatches the oldest stored entry, raftIndex, whose
// framed records are records and views: drops what drop marks and the
// retries, writing the drops in place, and puts the rest in their queues
// and the key index. The caller has checked that the records are the
// stored ones.
func (s *Store) dispatchFramed(raftIndex uint64, records []byte, views []message.View, drop []bool) ([]AppendResult, error) {
	e := s.stored[0]
	results := e.results
	if drop != nil && len(drop) != len(results) {
		return nil, fmt.Errorf("storage: %d records and %d drop marks", len(results), len(drop))
	}
	for i, d := range drop {
		results[i].Dropped = d
	}
	var dups []dupRef
	if s.cfg.DedupWindow > 0 {
		if dups = s.duplicates(records, views, results); dups != nil {
			for i := range dups {
				results[i].Dropped = results[i].Dropped || dups[i].dup
			}
		}
	}
	for i, p := 0, 0; i < len(results); i++ {
		size := int(results[i].Size)
		if results[i].Dropped {
			if err := s.patchDropped(raftIndex, records[p:p+size], results[i], i == len(results)-1); err != nil {
				s.fail(err)
				return nil, err
			}
		}
		p += size
	}
	st := *s.dispatched.Load()
	if err := s.dispatchBatch(views, results, &st.indexLast); err != nil {
		s.fail(err)
		return nil, err
	}
	st.queueEntries += int64(len(results))
	s.dispatchedOldest(st)
	answerDuplicates(results, dups)
	return results, nil
}

// passEntriesBelow counts the stored entries below raftIndex that have
// no records dispatched: Raft applies its own entries (configuration
// changes, a new leader's first entry) without the state machine, which
// so never dispatches them. An entry with records below it stays, and
// the dispatch asked for fails. The caller holds appendMu.
func (s *Store) passEntriesBelow(raftIndex uint64) {
	for len(s.stored) > 0 && s.stored[0].raftIndex < raftIndex && len(s.stored[0].results) == 0 {
		s.dispatchedEmpty()
	}
}

// dispatchedEmpty counts the oldest stored entry, which has no records,
// dispatched. The caller holds appendMu.
func (s *Store) dispatchedEmpty() { s.dispatchedOldest(*s.dispatched.Load()) }

// dispatchedOldest makes st, the dispatch state with the oldest stored
// entry's records counted, the store's, moved past that entry (its last
// record, or its frame when it has none), and forgets the entry. The
// caller holds appendMu.
func (s *Store) dispatchedOldest(st checkpoint) {
	e := s.stored[0]
	if e.deletes != "" {
		_ = s.deleteQueues(e.deletes, &st) // a failure fails the store: the caller's next step sees it
		s.deleted(e.deletes)
	}
	st.dispatched, st.raftIndex, st.last = e.end, e.raftIndex, e.frame
	if n := len(e.results); n > 0 {
		st.last = e.results[n-1].Offset
	}
	s.dispatched.Store(&st)
	s.popStored()
}

// popStored forgets the oldest stored entry, dispatched. The caller holds
// appendMu.
func (s *Store) popStored() {
	s.stored[0] = storedEntry{} // let its results go
	if len(s.stored) == 1 {
		s.stored = s.stored[:0] // the usual case, and no allocation for the next
		clear(s.storeNext)      // every queue's max is its next offset again
		clear(s.deleting)
	} else {
		s.stored = s.stored[1:]
	}
}

// patchDropped writes into the stored record r, whose bytes as they came
// are rec, that it is dropped: its sys flag and CRC, the 8 bytes at its
// offset 8. last says it ends its batch.
func (s *Store) patchDropped(raftIndex uint64, rec []byte, r AppendResult, last bool) error {
	flag := message.SysFlagDropped | message.HeaderSysFlag(rec)&message.SysFlagDedup // as writeBatch keeps it
	if last {
		flag |= message.SysFlagBatchEnd
	}
	b := s.patchBuf[:0]
	b = append(b, rec...)
	message.Fill(b, raftIndex, r.Offset, r.QueueOffset, flag)
	if cap(b) <= 1<<20 {
		s.patchBuf = b
	}
	var crcAndFlag [8]byte
	binary.BigEndian.PutUint64(crcAndFlag[:], binary.BigEndian.Uint64(b[8:]))
	return s.cl.write(r.Offset+8, crcAndFlag[:])
}
