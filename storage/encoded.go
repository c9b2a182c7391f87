package storage

import (
	"fmt"

	"github.com/raftmq/raftmq/message"
)

// Appending records as they were encoded. A producer encodes each message
// once, in the record layout of package message; a broker group's master
// checks the bytes (CheckRecord), or encodes messages sent as fields
// (EncodeRecord), and the Raft entry carries those bytes; every replica
// appends them (AppendRecords), filling in only what the store assigns: the
// Raft index, the commitlog and queue offsets, the batch-end flag and the
// CRC. No replica decodes a message into fields and encodes it again.
// Append, for callers that hold messages, encodes them and takes the same
// path, so the two write the same bytes.

// EncodeRecord appends m's record to dst, with the fields the store assigns
// left zero, after the checks CheckMessage makes. StoreTime is m's; a
// master stamps its own on a whole entry with message.SetStoreTime.
func (s *Store) EncodeRecord(dst []byte, m *message.Message) ([]byte, error) {
	size, err := s.check(m)
	if err != nil {
		return dst, err
	}
	return message.AppendSized(dst, m, size), nil
}

// CheckRecord checks a record a producer encoded, as AppendRecords will:
// its framing and CRC, and this store's limits on its size and queue id.
// It returns the record's size and its fields, read in place.
func (s *Store) CheckRecord(b []byte) (int, message.View, error) {
	size, v, err := s.frame(b, false)
	if err == nil {
		if err = message.CheckCRC(b[:size]); err != nil {
			err = fmt.Errorf("%w: %w", ErrInvalidMessage, err)
		}
	}
	return size, v, err
}

// frame frames the record at the start of b, an append's input, and checks
// it against this store's limits. Errors wrap ErrInvalidMessage.
func (s *Store) frame(b []byte, withKeys bool) (int, message.View, error) {
	size, v, err := message.Frame(b, withKeys)
	switch {
	case err != nil:
		err = fmt.Errorf("%w: %w", ErrInvalidMessage, err)
	case size > s.cfg.MaxMessageSize:
		err = fmt.Errorf("%w: %w: record of %d bytes, limit %d", ErrInvalidMessage, ErrMessageTooLarge, size, s.cfg.MaxMessageSize)
	case v.QueueID < 0 || v.QueueID >= s.cfg.MaxQueuesPerTopic:
		err = fmt.Errorf("%w: queue id %d out of range [0, %d)", ErrInvalidMessage, v.QueueID, s.cfg.MaxQueuesPerTopic)
	}
	return size, v, err
}

// AppendRecords appends records, a sequence of records as EncodeRecord
// lays them out, as the batch of Raft entry raftIndex: all of them or, on
// an error, none. It checks each record's framing, size and queue id (the
// bytes came through Raft from a master that checked them, so a failure
// here means this replica's configuration differs from the master's, or
// the entry is damaged). records is not modified.
//
// Every record is written, and takes its commitlog and queue offsets; a
// record that drop marks (drop is nil or has one element a record), or
// that is a producer's retry (Config.DedupWindow), is written dropped
// (message.SysFlagDropped): no read returns it and it has no key index
// entry. The result of a retry is the stored copy's, marked Duplicate;
// that of a record drop marks is its own, marked Dropped.
func (s *Store) AppendRecords(raftIndex uint64, records []byte, drop []bool) ([]AppendResult, error) {
	s.appendMu.Lock()
	defer s.appendMu.Unlock()
	if err := s.appendable(raftIndex); err != nil {
		return nil, err
	}
	if len(records) == 0 {
		return nil, fmt.Errorf("%w: empty batch", ErrInvalidMessage)
	}
	views, results := s.views[:0], make([]AppendResult, 0, 16)
	for p, i := 0, 0; p < len(records); i++ {
		size, v, err := s.frame(records[p:], true)
		if err != nil {
			return nil, fmt.Errorf("record %d: %w", i, err)
		}
		views = append(views, v)
		results = append(results, AppendResult{Size: int32(size), Topic: string(v.Topic), QueueID: v.QueueID, TagHash: message.TagHash(v.Tags)})
		p += size
	}
	s.views = views[:0]
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
	if _, err := s.appendFramed(raftIndex, records, views, results); err != nil {
		return nil, err
	}
	answerDuplicates(results, dups)
	return results, nil
}

// appendable says why Raft entry raftIndex cannot be applied now, if it
// cannot: the store is closed or failed, or holds that entry already.
// The caller holds appendMu.
func (s *Store) appendable(raftIndex uint64) error {
	switch {
	case s.closed.Load():
		return ErrClosed
	case s.Err() != nil:
		return s.errFailed()
	case raftIndex <= s.lastRaftIndex:
		return fmt.Errorf("%w: %d <= %d", ErrStaleRaftIndex, raftIndex, s.lastRaftIndex)
	}
	return nil
}

// appendFramed places and writes framed records as the batch of Raft entry
// raftIndex. results holds each record's size, topic, queue and tag hash;
// it returns them with their offsets.
func (s *Store) appendFramed(raftIndex uint64, records []byte, views []message.View, results []AppendResult) ([]AppendResult, error) {
	// Place every record: its commitlog offset (a record that does not fit
	// in the rest of a segment starts the next one) and queue offset.
	segSize := s.cfg.SegmentSize
	start := s.cl.writePos.Load()
	pos := start
	clear(s.batchNext)
	for i := range results {
		r := &results[i]
		if segEnd := pos - pos%segSize + segSize; pos+int64(r.Size) > segEnd {
			pos = segEnd
		}
		k := queueKey{r.Topic, r.QueueID}
		qoff, ok := s.batchNext[k]
		if !ok {
			if q := s.queue(k, false); q != nil {
				qoff = q.max.Load()
			}
		}
		s.batchNext[k] = qoff + 1
		r.Offset, r.QueueOffset = pos, qoff
		pos += int64(r.Size)
	}
	st := *s.dispatched.Load()
	if err := s.writeBatch(raftIndex, records, views, results, start, &st.indexLast); err != nil {
		s.fail(err)
		return nil, err
	}
	s.lastRaftIndex = raftIndex
	st.dispatched, st.raftIndex, st.last = pos, raftIndex, results[len(results)-1].Offset
	st.queueEntries += int64(len(results))
	s.dispatched.Store(&st)
	return results, nil
}
