package storage

import (
	"fmt"
	"slices"

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
	if err := s.appendableAtOnce(raftIndex); err != nil {
		return nil, err
	}
	views, results, err := s.frameBatch(records, true, nil)
	if err != nil {
		return nil, err
	}
	if drop != nil && len(drop) != len(results) {
		return nil, fmt.Errorf("storage: %d records and %d drop marks", len(results), len(drop))
	}
	if err := s.storeFramed(raftIndex, records, results); err != nil {
		return nil, err
	}
	// In FlushSync mode the disk writes the batch while its entries are
	// put; then the sync waits only for what is left and the cache flush.
	// A reader may see the records a little before they are durable, as in
	// FlushAsync mode: in a broker they are committed in the Raft log
	// already.
	if s.cfg.FlushMode == FlushSync {
		if err := s.cl.startFlush(); err != nil {
			s.fail(err)
			return nil, err
		}
	}
	res, err := s.dispatchFramed(raftIndex, records, views, drop)
	if err == nil && s.cfg.FlushMode == FlushSync {
		if err = s.cl.flush(); err != nil {
			s.fail(err)
		}
	}
	return res, err
}

// frameBatch frames the records of a batch: each one's view and its
// result so far (size, topic, queue, tag hash), the results appended to
// dst (nil: a slice of their own).
//
// The results are sized to the batch up front, and a record of the topic
// of the one before it shares that one's string: under batched publish
// (entries of about 550 records) growing the slice and a string for each
// record's topic were 2% of the master's CPU and 4% of a follower's
// (broker/README.md, seventeenth sitting).
func (s *Store) frameBatch(records []byte, withKeys bool, dst []AppendResult) ([]message.View, []AppendResult, error) {
	if len(records) == 0 {
		return nil, nil, fmt.Errorf("%w: empty batch", ErrInvalidMessage)
	}
	n, _ := message.Count(records) // a size: frame checks every record
	views, results := s.views[:0], slices.Grow(dst, n)
	topic := ""
	for p, i := 0, 0; p < len(records); i++ {
		size, v, err := s.frame(records[p:], withKeys)
		if err != nil {
			return nil, nil, fmt.Errorf("record %d: %w", i, err)
		}
		if string(v.Topic) != topic {
			topic = string(v.Topic)
		}
		views = append(views, v)
		results = append(results, AppendResult{Size: int32(size), Topic: topic, QueueID: v.QueueID, TagHash: message.TagHash(v.Tags)})
		p += size
	}
	s.views = views[:0]
	return views, results, nil
}

// appendable says why Raft entry raftIndex cannot be applied now, if it
// cannot: the store is closed or failed, or holds that entry already.
// The caller holds appendMu.
func (s *Store) appendable(raftIndex uint64) error {
	if err := s.writable(); err != nil {
		return err
	}
	if raftIndex <= s.lastRaftIndex {
		return fmt.Errorf("%w: %d <= %d", ErrStaleRaftIndex, raftIndex, s.lastRaftIndex)
	}
	return nil
}

// appendableAtOnce is appendable for an append that dispatches what it
// stores at once (AppendRecords, DeleteTopic): every entry stored before
// it must be dispatched first, in order. The caller holds appendMu.
func (s *Store) appendableAtOnce(raftIndex uint64) error {
	if err := s.appendable(raftIndex); err != nil {
		return err
	}
	if len(s.stored) > 0 {
		return fmt.Errorf("%w: entries stored and not dispatched (%s) come first", ErrNotStored, s.storedSpan())
	}
	return nil
}

// writable says why the store takes no write now, if it takes none: it is
// closed or failed.
func (s *Store) writable() error {
	if s.closed.Load() {
		return ErrClosed
	}
	return s.errFailed()
}
