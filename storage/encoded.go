package storage

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// Appending records as they were encoded. A broker group's master encodes
// each message once, in the commitlog's record layout (EncodeRecord), and
// the Raft entry carries those bytes; every replica appends them
// (AppendRecords), filling in only what the store assigns: the Raft index,
// the commitlog and queue offsets, the batch-end flag and the CRC. No
// replica decodes a message into fields and encodes it again. Append, for
// callers that hold Messages, encodes them and takes the same path, so the
// two write the same bytes.

// EncodeRecord appends m's record to dst, with the fields the store assigns
// left zero, after the checks CheckMessage makes. StoreTime is m's; a
// master stamps its own on a whole entry with SetStoreTime.
func (s *Store) EncodeRecord(dst []byte, m *Message) ([]byte, error) {
	size, err := s.check(m)
	if err != nil {
		return dst, err
	}
	return appendRecord(dst, m, size, 0, 0, 0, 0), nil
}

// SetStoreTime writes t as the store time of every record in records (a
// sequence of EncodeRecord's output); the CRCs are left stale, since
// AppendRecords writes them anew. It reads only each record's size (the
// bytes are this process's own encoding), and fails on a size that does
// not fit.
func SetStoreTime(records []byte, t int64) error {
	for p := 0; p < len(records); {
		b := records[p:]
		if len(b) < minRecordSize {
			return fmt.Errorf("%w: %d bytes, shorter than a record", ErrInvalidMessage, len(b))
		}
		size := int(binary.BigEndian.Uint32(b))
		if size < minRecordSize || size > len(b) {
			return fmt.Errorf("%w: record size %d out of range (have %d bytes)", ErrInvalidMessage, size, len(b))
		}
		binary.BigEndian.PutUint64(b[56:], uint64(t))
		p += size
	}
	return nil
}

// frameRecord checks that b starts with a record's framing (size, magic,
// and fields that add up to the size) and returns its size and, read in
// place, its fields (the keys only withKeys); the CRC is not checked.
// Errors wrap bad.
func frameRecord(b []byte, bad error, withKeys bool) (int, recordView, error) {
	if len(b) < blankSize {
		return 0, recordView{}, fmt.Errorf("%w: %d bytes, shorter than a record header", bad, len(b))
	}
	size := int(binary.BigEndian.Uint32(b))
	if magic := binary.BigEndian.Uint32(b[4:]); magic != recordMagic {
		return 0, recordView{}, fmt.Errorf("%w: bad magic %#x", bad, magic)
	}
	if size < minRecordSize || size > len(b) {
		return 0, recordView{}, fmt.Errorf("%w: record size %d out of range (have %d bytes)", bad, size, len(b))
	}
	v, err := parseRecord(b[:size], withKeys)
	if err != nil {
		return 0, recordView{}, fmt.Errorf("%w: %w", bad, err)
	}
	return size, v, nil
}

// recordView is what dispatch needs of a record, read in place: views of
// its fields into the record's bytes.
type recordView struct {
	topic, tags []byte
	queueID     int32
	storeTime   int64
	keys        [][]byte
	uniqKey     []byte
}

// parseRecord reads the variable fields of the framed record b (len(b) is
// its size) without copying them; the keys and the unique key only with
// withKeys (collecting the keys allocates).
func parseRecord(b []byte, withKeys bool) (recordView, error) {
	be := binary.BigEndian
	v := recordView{queueID: int32(be.Uint32(b[40:])), storeTime: int64(be.Uint64(b[56:]))}
	d := decoder{b: b, p: fixedHeader}
	v.topic = d.bytes(int(d.u8()))
	v.tags = d.bytes(int(d.u16()))
	for n := int(d.u16()); n > 0 && d.err == nil; n-- {
		if k := d.bytes(int(d.u16())); len(k) > 0 && withKeys {
			v.keys = append(v.keys, k)
		}
	}
	for n := int(d.u16()); n > 0 && d.err == nil; n-- {
		name, val := d.bytes(int(d.u16())), d.bytes(int(d.u16()))
		if withKeys && string(name) == PropertyUniqKey {
			v.uniqKey = val
		}
	}
	d.bytes(int(d.u32()))
	switch {
	case d.err != nil:
		return v, d.err
	case d.p != len(b):
		return v, fmt.Errorf("%w: %d trailing bytes in record", ErrCorrupt, len(b)-d.p)
	case !validTopic(v.topic):
		return v, fmt.Errorf("%w: topic %q is not a legal name", ErrCorrupt, v.topic)
	}
	return v, nil
}

// AppendRecords appends records, a sequence of records as EncodeRecord
// lays them out, as the batch of Raft entry raftIndex: all of them or, on
// an error, none. It checks each record's framing, size and queue id (the
// bytes came through Raft from a master that checked them, so a failure
// here means this replica's configuration differs from the master's, or
// the entry is damaged). records is not modified.
func (s *Store) AppendRecords(raftIndex uint64, records []byte) ([]AppendResult, error) {
	s.appendMu.Lock()
	defer s.appendMu.Unlock()
	switch {
	case s.closed.Load():
		return nil, ErrClosed
	case s.Err() != nil:
		return nil, s.errFailed()
	case raftIndex <= s.lastRaftIndex:
		return nil, fmt.Errorf("%w: %d <= %d", ErrStaleRaftIndex, raftIndex, s.lastRaftIndex)
	case len(records) == 0:
		return nil, fmt.Errorf("%w: empty batch", ErrInvalidMessage)
	}
	views, results := s.views[:0], make([]AppendResult, 0, 16)
	for p, i := 0, 0; p < len(records); i++ {
		size, v, err := frameRecord(records[p:], ErrInvalidMessage, true)
		switch {
		case err != nil:
		case size > s.cfg.MaxMessageSize:
			err = fmt.Errorf("%w: %w: record of %d bytes, limit %d", ErrInvalidMessage, ErrMessageTooLarge, size, s.cfg.MaxMessageSize)
		case v.queueID < 0 || v.queueID >= s.cfg.MaxQueuesPerTopic:
			err = fmt.Errorf("%w: queue id %d out of range [0, %d)", ErrInvalidMessage, v.queueID, s.cfg.MaxQueuesPerTopic)
		}
		if err != nil {
			return nil, fmt.Errorf("record %d: %w", i, err)
		}
		views = append(views, v)
		results = append(results, AppendResult{Size: int32(size), Topic: string(v.topic), QueueID: v.queueID, TagHash: tagHash(v.tags)})
		p += size
	}
	s.views = views[:0]

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

// fillRecord writes the fields the store assigns into the record b and
// its CRC last.
func fillRecord(b []byte, raftIndex uint64, offset, queueOffset int64, sysFlag uint32) {
	be := binary.BigEndian
	be.PutUint32(b[12:], sysFlag)
	be.PutUint64(b[16:], raftIndex)
	be.PutUint64(b[24:], uint64(offset))
	be.PutUint64(b[32:], uint64(queueOffset))
	be.PutUint32(b[8:], crc32.Checksum(b[12:], castagnoli))
}

// tagHash is TagHash of a tag's bytes.
func tagHash(tag []byte) int64 {
	if len(tag) == 0 {
		return 0
	}
	if v := int64(fnv64a(tag)); v != 0 {
		return v
	}
	return 1
}
