package storage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/raftmq/raftmq/message"
)

// recover brings the store to a consistent state after any stop, clean or
// not (kill -9 at any byte, or a damaged file):
//
//  1. From the checkpoint's position (or the commitlog's start when there is
//     no checkpoint that matches the log), scan the commitlog to the end of
//     the last whole, valid batch. A torn write, a CRC failure, a stale
//     record at the wrong place or a batch without its last record ends the
//     scan there.
//  2. Cut the commitlog at that end: zero the rest of its segment and delete
//     later ones, so nothing past the damage is ever read again.
//  3. Drop consume queue and index entries past the point where re-dispatch
//     starts, re-dispatch the commitlog from there to the end (consume queue
//     entries re-put with equal contents are no-ops), and check the result
//     against the checkpoint's totals.
//  4. If the derived files disagree with the commitlog (a gap, a changed
//     entry, a lost queue or index file), delete them and rebuild them from
//     the whole commitlog.
//
// The highest Raft index held is that of the last whole batch.
func (s *Store) recover() error {
	clMin := s.cl.minOffset()
	var clLimit int64 // end of the last segment: no data can be past it
	s.cl.mu.RLock()
	if n := len(s.cl.segs); n > 0 {
		clLimit = s.cl.segs[n-1].start + s.cl.segSize
	}
	s.cl.mu.RUnlock()

	cp, ok, err := readCheckpoint(s.cfg.Dir)
	if err != nil {
		return err
	}
	start := emptyLog(clMin)
	full := s.rebuild || !ok || cp.dispatched < clMin || cp.dispatched > max(clLimit, clMin) || !s.matchesLog(cp, clMin)
	if !full {
		start = cp
	}
	res, err := s.cl.scan(start, -1, nil)
	if err != nil {
		return err
	}
	if !full && res.cause != nil && res.end == cp.dispatched {
		// Nothing valid right after the checkpoint: it may be a torn write,
		// or the checkpoint may not match this commitlog. A scan from the
		// start tells them apart.
		s.log.Warn("no valid record after the checkpoint, scanning the whole commitlog", "checkpoint", cp.dispatched, "cause", res.cause)
		full, start = true, emptyLog(clMin)
		if res, err = s.cl.scan(start, -1, nil); err != nil {
			return err
		}
	}
	if res.cause != nil {
		s.log.Warn("commitlog cut at the last whole batch", "offset", res.end, "raft_index", res.raftIndex, "cause", res.cause)
		if err := s.cl.truncate(res.end); err != nil {
			return err
		}
	} else if last := s.cl.lastStart(); last > res.end {
		// A crash after a roll, before the batch that rolled reached the
		// new segment: the writer must go on in the segment the data ends
		// in, so the empty segment after it goes.
		s.log.Info("commitlog: removing the segment rolled into before a crash", "segment", segmentName(last), "end", res.end)
		if err := s.cl.truncate(res.end); err != nil {
			return err
		}
	}
	s.cl.writePos.Store(res.end)
	stored := res // what stays stored, not dispatched: nothing, but with RaftLog
	if s.cfg.RaftLog {
		if res, err = s.beforeFirstFrame(start, res); err != nil {
			return err
		}
	}

	st, err := s.redispatch(start, res, full)
	if err != nil && errors.Is(err, ErrCorrupt) && !full {
		s.log.Warn("consume queues or index disagree with the commitlog, rebuilding them from its start", "err", err)
		full = true
		st, err = s.redispatch(emptyLog(clMin), res, true)
	}
	for err != nil {
		// In a full rebuild the queues come from the commitlog alone: a
		// record they cannot take (its queue offset breaks its queue's
		// sequence) is damage the CRC could not see. Cut the log before
		// its batch, as for any other damage, and rebuild again.
		var bad *badBatchError
		if !full || !errors.As(err, &bad) {
			return err
		}
		s.log.Warn("commitlog cut before a batch its queues cannot take", "offset", bad.start, "err", bad.err)
		if res, err = s.cl.scan(emptyLog(clMin), bad.start, nil); err != nil {
			return err
		}
		if err := s.cl.truncate(res.end); err != nil {
			return err
		}
		s.cl.writePos.Store(res.end)
		stored = res // nothing after the cut
		st, err = s.redispatch(emptyLog(clMin), res, true)
	}
	s.lastRaftIndex = res.raftIndex
	s.dispatched.Store(&st)
	if stored.end > res.end {
		if err := s.keepStored(res.end, stored.end); err != nil {
			return err
		}
		s.lastRaftIndex = stored.raftIndex
	}
	s.log.Info("store recovered", "min_offset", clMin, "end_offset", res.end, "raft_index", res.raftIndex,
		"rescanned_from", start.dispatched, "full_rebuild", full, "stored_to", stored.end, "stored_raft_index", stored.raftIndex)
	return s.checkpoint()
}

// beforeFirstFrame is what recovery dispatches of the whole batches res
// found from start, with RaftLog: the batches without a frame (appended
// before the commitlog was the Raft log) up to the first entry's frame.
func (s *Store) beforeFirstFrame(start checkpoint, res scanResult) (scanResult, error) {
	first := res.end
	_, err := s.cl.scan(start, res.end, func(rec []byte) error {
		if message.HeaderSysFlag(rec)&message.SysFlagFrame != 0 {
			first = message.HeaderOffset(rec)
			return errStopScan
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStopScan) {
		return res, err
	}
	if first == res.end {
		return res, nil
	}
	return s.cl.scan(start, first, nil)
}

// keepStored takes the entries in the commitlog from from to to, whole
// batches each with its frame, as stored and not dispatched: their
// records' places and queue offsets as written, and drops written in
// place kept.
func (s *Store) keepStored(from, to int64) error {
	prev := from
	var cur *storedEntry
	_, err := s.cl.scan(emptyLog(from), to, func(rec []byte) error {
		off, flag := message.HeaderOffset(rec), message.HeaderSysFlag(rec)
		switch {
		case flag&message.SysFlagFrame != 0:
			cur = &storedEntry{raftIndex: message.HeaderRaftIndex(rec), start: prev, frame: off}
			if flag&message.SysFlagDeletesTopic != 0 {
				topic, err := frameDeletes(rec)
				if err != nil {
					return err
				}
				cur.deletes = topic
				s.numberAfresh(topic)
			}
		case cur == nil:
			return fmt.Errorf("%w: a record without an entry frame at commitlog offset %d, after an entry's", ErrCorrupt, off)
		default:
			_, v, err := message.Frame(rec, false)
			if err != nil {
				return fmt.Errorf("%w: commitlog offset %d: %w", ErrCorrupt, off, err)
			}
			r := AppendResult{Offset: off, Size: int32(len(rec)), QueueOffset: message.HeaderQueueOffset(rec),
				Topic: string(v.Topic), QueueID: v.QueueID, TagHash: message.TagHash(v.Tags), Dropped: flag&message.SysFlagDropped != 0}
			cur.results = append(cur.results, r)
			s.storeNext[queueKey{r.Topic, r.QueueID}] = r.QueueOffset + 1
		}
		if flag&message.SysFlagBatchEnd != 0 {
			cur.end = off + int64(len(rec))
			prev = cur.end
			s.stored = append(s.stored, *cur)
			if err := s.entries.add(cur.raftIndex, entrySpan{frame: cur.frame, end: cur.end}); err != nil {
				return err
			}
			cur = nil
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("storage: recover the stored entries from commitlog offset %d: %w", from, err)
	}
	return nil
}

// redispatch brings the consume queues and index from the state from
// describes up to the end of scan, re-dispatching the records in between,
// and returns the state at the end. With full it first deletes them;
// without, it checks the totals it ends with against from's.
func (s *Store) redispatch(from checkpoint, scan scanResult, full bool) (checkpoint, error) {
	if full {
		s.queuesMu.Lock()
		for k, q := range s.queues {
			q.close()
			delete(s.queues, k)
		}
		s.queuesMu.Unlock()
		if err := os.RemoveAll(filepath.Join(s.cfg.Dir, consumeQueueDir)); err != nil {
			return checkpoint{}, fmt.Errorf("storage: remove consume queues for rebuild: %w", err)
		}
		if err := s.index.reset(); err != nil {
			return checkpoint{}, err
		}
		s.rebuilding = true
		defer func() { s.rebuilding = false }()
	} else if err := s.index.truncate(from.dispatched); err != nil {
		return checkpoint{}, err
	}
	clMin := s.cl.minOffset()
	for _, q := range s.queueList() {
		if err := q.recover(clMin, scan.end); err != nil {
			return checkpoint{}, err
		}
	}
	st := from
	batchStart, newBatch := int64(0), true
	_, err := s.cl.scan(from, scan.end, func(rec []byte) error {
		if newBatch {
			batchStart = message.HeaderOffset(rec)
		}
		newBatch = message.HeaderSysFlag(rec)&message.SysFlagBatchEnd != 0
		if err := s.dispatchFound(rec, &st); err != nil {
			return &badBatchError{start: batchStart, err: err}
		}
		return nil
	})
	if err != nil {
		return checkpoint{}, err
	}
	st.dispatched, st.raftIndex, st.last = scan.end, scan.raftIndex, scan.last
	var entries int64
	for _, q := range s.queueList() {
		q.skipRemoved(clMin)
		entries += q.max.Load()
	}
	if full {
		st.queueEntries = entries
		st.indexLast = s.index.newest()
		return st, nil
	}
	if entries != st.queueEntries {
		return st, fmt.Errorf("%w: consume queues hold %d entries in all, the checkpoint and commitlog say %d", ErrCorrupt, entries, st.queueEntries)
	}
	if got := s.index.newest(); got != st.indexLast {
		return st, fmt.Errorf("%w: the key index ends at commitlog offset %d, the checkpoint and commitlog say %d", ErrCorrupt, got, st.indexLast)
	}
	return st, nil
}

func (s *Store) queueList() []*consumeQueue {
	s.queuesMu.RLock()
	defer s.queuesMu.RUnlock()
	qs := make([]*consumeQueue, 0, len(s.queues))
	for _, q := range s.queues {
		qs = append(qs, q)
	}
	return qs
}

// matchesLog reports whether the checkpoint's last record is in the
// commitlog where the checkpoint says, whole and ending its batch.
func (s *Store) matchesLog(cp checkpoint, clMin int64) bool {
	if cp.last < 0 {
		return cp.dispatched == clMin
	}
	if cp.last < clMin {
		return false
	}
	s.cl.writePos.Store(cp.dispatched) // let readRecord look below it
	defer s.cl.writePos.Store(0)
	rec, err := s.cl.readRecord(cp.last)
	return err == nil && cp.last+int64(len(rec)) == cp.dispatched &&
		message.HeaderRaftIndex(rec) == cp.raftIndex && message.HeaderSysFlag(rec)&message.SysFlagBatchEnd != 0
}

// dispatchStored dispatches a record read back from the commitlog (by
// recovery, or after a copy from a peer) and counts it in st.
func (s *Store) dispatchStored(rec []byte, st *checkpoint) error {
	if message.HeaderSysFlag(rec)&message.SysFlagFrame != 0 {
		return nil // a Raft entry's frame: no queue holds it
	}
	r, err := decodeRecord(rec)
	if err != nil {
		return err
	}
	if r.QueueID < 0 || r.QueueID >= s.cfg.MaxQueuesPerTopic || r.QueueOffset < 0 || r.QueueOffset >= maxQueueOffset {
		return fmt.Errorf("%w: record at commitlog offset %d names queue %d offset %d", ErrCorrupt, r.Offset, r.QueueID, r.QueueOffset)
	}
	tagHash, keys, uniqKey := message.TagHash(r.Tags), r.Keys, r.Properties[message.PropertyUniqKey]
	if r.SysFlag&message.SysFlagDropped != 0 {
		tagHash, keys, uniqKey = message.DroppedTagHash, nil, ""
	}
	keyed, err := s.dispatch(queueKey{r.Topic, r.QueueID}, AppendResult{Offset: r.Offset, Size: r.Size, QueueOffset: r.QueueOffset},
		tagHash, keys, uniqKey, r.StoreTime)
	if err != nil {
		return err
	}
	if keyed {
		st.indexLast = r.Offset
	}
	st.queueEntries++
	return nil
}

// maxQueueOffset bounds the queue offsets recovery accepts from the
// commitlog: no queue grows that far, and offsets past it would overflow.
const maxQueueOffset = 1 << 62

// badBatchError: the batch starting at start could not be dispatched.
type badBatchError struct {
	start int64
	err   error
}

func (e *badBatchError) Error() string {
	return fmt.Sprintf("batch at commitlog offset %d: %v", e.start, e.err)
}

func (e *badBatchError) Unwrap() error { return e.err }
