package storage

import (
	"errors"
	"fmt"
	"math"

	"github.com/raftmq/raftmq/message"
)

// A replica that has fallen behind copies the commitlog from a peer as raw
// bytes: every replica's commitlog is a prefix of the master's, byte for
// byte (same offsets, same blank markers), so the copy continues it
// exactly. The unit of copying is the whole batch (one Raft entry), so the
// receiver never holds half an entry.

var errStopScan = errors.New("stop scan")

// ReadCommitlog returns the commitlog bytes from offset from, which must be
// the end of a batch (a replica's end offset), to the end of the last whole
// batch within about maxBytes (at least one batch, however large), and
// never past to (<= 0: what is dispatched), which must be a batch end too.
// A to past what is dispatched reads the stored entries without records
// after it, as far as CommittedEnd, which the caller asks with its applied
// index: only committed entries may be read. It returns no bytes at the
// end.
func (s *Store) ReadCommitlog(from, to int64, maxBytes int) ([]byte, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	clMin, end := s.CommitlogOffsets()
	if to > 0 {
		end = min(s.CommittedEnd(math.MaxUint64), to)
	}
	switch {
	case from < clMin:
		return nil, fmt.Errorf("%w: commitlog offset %d is below the minimum %d", ErrOffsetRemoved, from, clMin)
	case from > end:
		return nil, fmt.Errorf("%w: commitlog offset %d is past the end %d", ErrOffsetNotFound, from, end)
	case from == end:
		return nil, nil
	}
	stop := from
	res, err := s.cl.scan(emptyLog(from), end, func(rec []byte) error {
		if message.HeaderSysFlag(rec)&message.SysFlagBatchEnd != 0 {
			stop = message.HeaderOffset(rec) + int64(len(rec))
			if stop-from >= int64(maxBytes) {
				return errStopScan
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStopScan) {
		return nil, err
	}
	if err == nil && res.cause != nil {
		return nil, fmt.Errorf("commitlog from %d: %w", from, res.cause)
	}
	if stop == from {
		return nil, fmt.Errorf("%w: no whole batch starts at commitlog offset %d", ErrOffsetNotFound, from)
	}
	out := make([]byte, 0, stop-from)
	for pos := from; pos < stop; {
		n := min(stop, pos-pos%s.cfg.SegmentSize+s.cfg.SegmentSize) - pos
		if out, err = s.cl.readAt(out, pos, int(n)); err != nil {
			return nil, err
		}
		pos += n
	}
	return out, nil
}

// AppendRaw appends bytes another replica's ReadCommitlog returned for
// offset from, which must be this store's end. The bytes are checked as
// recovery checks the commitlog (whole, valid batches, Raft indexes above
// the store's) before they are made visible; on any failure nothing of
// them is.
func (s *Store) AppendRaw(from int64, data []byte) error {
	s.appendMu.Lock()
	defer s.appendMu.Unlock()
	if err := s.writable(); err != nil || len(data) == 0 {
		return err
	}
	st := *s.dispatched.Load()
	if len(s.stored) > 0 {
		return fmt.Errorf("%w: entries stored and not dispatched (%s) are where the copy would go", ErrInvalidMessage, s.storedSpan())
	}
	if from != st.dispatched {
		return fmt.Errorf("%w: copy starts at commitlog offset %d, the store ends at %d", ErrInvalidMessage, from, st.dispatched)
	}
	end := from + int64(len(data))
	segSize := s.cfg.SegmentSize
	for pos := from; pos < end; {
		n := min(end, pos-pos%segSize+segSize) - pos
		if err := s.cl.write(pos, data[pos-from:pos-from+n]); err != nil {
			s.fail(err)
			return err
		}
		pos += n
	}
	if n := s.cl.tailPad(end); n > 0 {
		if err := s.cl.write(end, tailZeros[:n]); err != nil {
			s.fail(err)
			return err
		}
	}
	// Check everything before anything becomes visible.
	res, err := s.cl.scan(st, end, nil)
	if err == nil && (res.cause != nil || res.end != end) {
		err = fmt.Errorf("%w: copied bytes from %d hold whole batches only to %d (%v)", ErrCorrupt, from, res.end, res.cause)
	}
	if err != nil {
		// Nothing was published: wipe what was written past the end.
		if terr := s.cl.truncate(from); terr != nil {
			s.fail(terr)
		}
		return err
	}
	s.cl.writePos.Store(end)
	_, err = s.cl.scan(st, end, func(rec []byte) error { return s.dispatchFound(rec, &st) })
	if err != nil {
		s.fail(err)
		return err
	}
	if err := s.syncWrites(); err != nil {
		return err
	}
	st.dispatched, st.raftIndex, st.last = end, res.raftIndex, res.last
	s.lastRaftIndex = res.raftIndex
	s.dispatched.Store(&st)
	return nil
}
