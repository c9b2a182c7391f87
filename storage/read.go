package storage

import (
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/raftmq/raftmq/message"
)

// GetStatus says what a queue read found.
type GetStatus int

const (
	// Found: Records holds at least one message.
	Found GetStatus = iota
	// NoMatchedMessage: entries were there but none matched the tag filter
	// (within MaxScanEntries); NextOffset skips them.
	NoMatchedMessage
	// NoNewMessage: the offset is the queue's end (a long-polling pull waits
	// here). A queue never written reads as empty at offset 0.
	NoNewMessage
	// OffsetTooSmall: below the first offset still stored (retention moved
	// it); NextOffset is the minimum.
	OffsetTooSmall
	// OffsetOverflow: past the queue's end; NextOffset is the end.
	OffsetOverflow
)

func (s GetStatus) String() string {
	switch s {
	case Found:
		return "found"
	case NoMatchedMessage:
		return "no matched message"
	case NoNewMessage:
		return "no new message"
	case OffsetTooSmall:
		return "offset too small"
	case OffsetOverflow:
		return "offset overflow"
	}
	return fmt.Sprintf("GetStatus(%d)", int(s))
}

// GetRequest asks for the messages of one queue from Offset on.
type GetRequest struct {
	Topic       string
	QueueID     int32
	Offset      int64
	MaxMessages int     // at least 1
	MaxBytes    int     // total record bytes; the first record is returned even if larger
	TagHashes   []int64 // nil: every message; else only those whose tag hash is listed
}

// GetResult holds the raw stored records (encoded as DecodeRecord reads
// them), so a broker can pass them on without re-encoding.
type GetResult struct {
	Status     GetStatus
	Records    [][]byte
	NextOffset int64 // where the next read of this queue starts
	MinOffset  int64
	MaxOffset  int64
}

// GetMessages reads a queue. Every record returned has passed its CRC; a
// damaged one fails the read with ErrCorrupt instead of being returned.
func (s *Store) GetMessages(req GetRequest) (GetResult, error) {
	switch {
	case s.closed.Load():
		return GetResult{}, ErrClosed
	case !message.ValidTopic(req.Topic):
		return GetResult{}, fmt.Errorf("%w: topic %q", ErrInvalidMessage, req.Topic)
	case req.QueueID < 0 || req.QueueID >= s.cfg.MaxQueuesPerTopic:
		return GetResult{}, fmt.Errorf("%w: queue id %d out of range [0, %d)", ErrInvalidMessage, req.QueueID, s.cfg.MaxQueuesPerTopic)
	case req.MaxMessages < 1 || req.MaxBytes < 1:
		return GetResult{}, fmt.Errorf("%w: max messages %d and max bytes %d must be positive", ErrInvalidMessage, req.MaxMessages, req.MaxBytes)
	}
	q := s.queue(queueKey{req.Topic, req.QueueID}, false)
	var res GetResult
	if q != nil {
		res.MinOffset, res.MaxOffset = q.min.Load(), q.max.Load()
	}
	switch {
	case req.Offset < res.MinOffset:
		res.Status, res.NextOffset = OffsetTooSmall, res.MinOffset
		return res, nil
	case req.Offset == res.MaxOffset:
		res.Status, res.NextOffset = NoNewMessage, req.Offset
		return res, nil
	case req.Offset > res.MaxOffset:
		res.Status, res.NextOffset = OffsetOverflow, res.MaxOffset
		return res, nil
	}

	var (
		buf     []byte
		spans   [][2]int
		next    = req.Offset
		clMin   = s.cl.minOffset()
		entries = make([]cqEntry, 0, min(req.MaxMessages, 256))
		full    bool
	)
	for scanLeft := s.cfg.MaxScanEntries; scanLeft > 0 && !full; {
		entries = q.entries(entries[:0], next, min(scanLeft, cap(entries)))
		if len(entries) == 0 {
			break
		}
		scanLeft -= len(entries)
		if buf == nil {
			// Size the buffer once for what this read will likely return.
			want := 0
			for i, e := range entries {
				if i == req.MaxMessages || (i > 0 && want+int(e.size) > req.MaxBytes) || !s.entrySizeOK(e) {
					break
				}
				want += int(e.size)
			}
			buf = make([]byte, 0, want)
		}
		for _, e := range entries {
			if full = len(spans) >= req.MaxMessages || (len(spans) > 0 && len(buf)+int(e.size) > req.MaxBytes); full {
				break
			}
			next++
			if e.tagHash == message.DroppedTagHash {
				continue // a retry or a refused send: see message.SysFlagDropped
			}
			if req.TagHashes != nil && !slices.Contains(req.TagHashes, e.tagHash) {
				continue
			}
			if e.offset < clMin {
				continue // its segment is gone: retention is passing this queue
			}
			if !s.entrySizeOK(e) {
				err := fmt.Errorf("%w: its consume queue entry gives a record of %d bytes", ErrCorrupt, e.size)
				return GetResult{}, fmt.Errorf("queue %s@%d offset %d: %w", req.Topic, req.QueueID, next-1, q.damaged(next-1, err))
			}
			start := len(buf)
			var err error
			buf, err = s.cl.readAt(buf, e.offset, int(e.size))
			if errors.Is(err, ErrOffsetRemoved) {
				buf = buf[:start]
				continue
			}
			if err == nil {
				err = s.checkStored(buf[start:], e.offset)
			}
			if err == nil && !message.IsAt(buf[start:], req.Topic, req.QueueID, next-1) {
				err = fmt.Errorf("%w: consume queue entry points at commitlog offset %d, a record of another queue", ErrCorrupt, e.offset)
			}
			if err != nil {
				return GetResult{}, fmt.Errorf("queue %s@%d offset %d: %w", req.Topic, req.QueueID, next-1, q.damaged(next-1, err))
			}
			spans = append(spans, [2]int{start, len(buf)})
		}
	}
	res.NextOffset = next
	if len(spans) == 0 {
		res.Status = NoMatchedMessage
		return res, nil
	}
	res.Status = Found
	res.Records = make([][]byte, len(spans))
	for i, sp := range spans {
		res.Records[i] = buf[sp[0]:sp[1]:sp[1]]
	}
	return res, nil
}

// damaged names the consume queue file of entry off in err, when err is
// damage that names no file yet: an entry that does not match its record
// (a record failing its own checks names its commitlog segment already).
func (q *consumeQueue) damaged(off int64, err error) error {
	var pe *os.PathError
	if !errors.Is(err, ErrCorrupt) || errors.As(err, &pe) {
		return err
	}
	if path := q.pathFor(off); path != "" {
		return &os.PathError{Op: "check", Path: path, Err: err}
	}
	return err
}

// entrySizeOK reports whether a consume queue entry's size is one a
// stored record can have (at least a record header, at most a segment:
// not the message size limit, which may have been lowered since): a
// damaged entry's is not read (a negative size crashed the read's buffer
// sizing: FuzzDamagedConsumeQueue).
func (s *Store) entrySizeOK(e cqEntry) bool {
	return e.size >= message.MinSize && int64(e.size) <= s.cfg.SegmentSize
}

// checkStored checks the record read at commitlog offset off with the
// size its consume queue entry gives: its CRC, the offset it claims, and
// its own size equal to the entry's (a damaged entry claiming more would
// otherwise serve the records after it, of any topic, with it: found by
// FuzzDamagedConsumeQueue).
func (s *Store) checkStored(rec []byte, off int64) error {
	size, err := checkRecord(rec)
	if err != nil {
		// The record's own bytes are damaged: name the segment file, for
		// the one error line its owner logs when it stops.
		err = fmt.Errorf("commitlog offset %d: %w", off, err)
		if path := s.cl.pathAt(off); path != "" {
			err = &os.PathError{Op: "check", Path: path, Err: err}
		}
		return err
	}
	if size != len(rec) {
		return fmt.Errorf("%w: the record at commitlog offset %d is %d bytes, its consume queue entry says %d", ErrCorrupt, off, size, len(rec))
	}
	if message.HeaderOffset(rec) != off {
		return fmt.Errorf("%w: record at commitlog offset %d claims offset %d", ErrCorrupt, off, message.HeaderOffset(rec))
	}
	return nil
}

// ReadMessage returns the record at commitlog offset off (what a message id
// names), checked.
func (s *Store) ReadMessage(off int64) ([]byte, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	return s.cl.readRecord(off)
}

// QueryByKey returns up to limit records stored in [begin, end] (unix ms)
// with key among their keys or as their unique key, newest first.
func (s *Store) QueryByKey(key string, limit int, begin, end int64) ([][]byte, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	if key == "" || limit < 1 {
		return nil, fmt.Errorf("%w: key must be set and limit positive", ErrInvalidMessage)
	}
	var out [][]byte
	seen := map[int64]bool{}
	// The index may hold colliding keys; ask for more than limit and
	// filter by the real key.
	for _, off := range s.index.lookup(key, 4*limit, begin, end) {
		if len(out) == limit || seen[off] {
			continue
		}
		seen[off] = true
		rec, err := s.cl.readRecord(off)
		if errors.Is(err, ErrOffsetRemoved) {
			continue
		}
		if err != nil {
			return nil, err
		}
		r, err := decodeRecord(rec)
		if err != nil {
			return nil, err
		}
		if slices.Contains(r.Keys, key) || r.Properties[message.PropertyUniqKey] == key {
			out = append(out, rec)
		}
	}
	return out, nil
}

// OffsetForTime returns the first queue offset whose message was stored at
// or after ts (unix ms); the queue's end when none was. Store times are set
// by successive masters and are nearly but not strictly ordered, so, as in
// RocketMQ, the answer is a binary search's.
func (s *Store) OffsetForTime(topic string, queueID int32, ts int64) (int64, error) {
	if s.closed.Load() {
		return 0, ErrClosed
	}
	q := s.queue(queueKey{topic, queueID}, false)
	if q == nil {
		return 0, nil
	}
	lo, hi := q.min.Load(), q.max.Load()
	var one []cqEntry
	for lo < hi {
		mid := lo + (hi-lo)/2
		one = q.entries(one[:0], mid, 1)
		if len(one) == 0 {
			lo = mid + 1 // removed under us
			continue
		}
		head, err := s.cl.readAt(nil, one[0].offset, message.HeaderLen)
		if errors.Is(err, ErrOffsetRemoved) {
			lo = mid + 1
			continue
		}
		if err != nil {
			return 0, err
		}
		if message.HeaderStoreTime(head) >= ts {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo, nil
}
