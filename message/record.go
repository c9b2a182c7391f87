package message

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"
)

// The record layout, big-endian:
//
//	 0  4  total size (the whole record, this field included)
//	 4  4  magic
//	 8  4  CRC32-C of bytes [12, total size)
//	12  4  sys flag (bit 0: last record of its batch; bit 2: dropped)
//	16  8  Raft index of the batch
//	24  8  commitlog offset of this record
//	32  8  queue offset
//	40  4  queue id
//	44  4  flag
//	48  8  born time (unix ms)
//	56  8  store time (unix ms)
//	64  1  topic length, topic
//	    2  tags length, tags
//	    2  key count, then per key: 2 length, key
//	    2  property count, then per property (sorted by name): 2 length, name, 2 length, value
//	    4  body length, body
//
// A producer sends records with bytes 12–40 and the store time zero; the
// master stamps the store time and every replica's store fills bytes
// 12–40 and the CRC (Fill). The commitlog offset inside the record lets a
// store's recovery reject a stale but CRC-valid record found at the wrong
// place; the batch-end flag lets it cut a batch torn by a crash, so a Raft
// entry is either all in or all out.
const (
	Magic      uint32 = 0x52514D31 // "RQM1"
	BlankMagic uint32 = 0x52514D30 // a store's end-of-segment filler
	HeaderLen         = 64         // the fixed fields
	MinSize           = HeaderLen + 1 + 1 + 2 + 2 + 2 + 4
	BlankSize         = 8 // a blank record needs size and magic

	SysFlagBatchEnd uint32 = 1 << 0
	// SysFlagDedup marks a producer's send that the store appends only if
	// it holds no record with the same unique key from the last
	// deduplication window. A store writes the sys flag anew but keeps
	// this mark, so that a record read back as stored is still marked.
	SysFlagDedup uint32 = 1 << 1
	// SysFlagDropped marks a stored record that no reader is given: its
	// Raft entry was applied, and the record found to be a duplicate (a
	// producer's retry) or refused (an idempotent producer's send out of
	// sequence). It stays in the commitlog where its entry put it, holds
	// its queue offset, and has no key index entry. Writing what an entry
	// holds, and dropping at apply what must not be read, is what lets a
	// record's place be fixed before its entry is applied
	// (docs/commitlog-raft-log.md).
	SysFlagDropped uint32 = 1 << 2
	// SysFlagFrame marks a Raft entry's frame, the record a store writes
	// before an entry's records when the commitlog is the Raft log: topic
	// FrameTopic, queue 0, its body the entry's own fields. No queue holds
	// it and no reader is given it.
	SysFlagFrame uint32 = 1 << 3
	// SysFlagDeletesTopic marks a frame whose Raft entry deletes a topic,
	// named by the frame's PropertyDeletesTopic. A store removes the
	// topic's queues where it dispatches the frame (applied, copied from
	// a peer or recovered), and numbers the topic's queues from 0 for the
	// records stored after it, whenever it is applied. A store whose Raft
	// log is elsewhere writes such a frame alone when it applies the
	// deletion.
	SysFlagDeletesTopic uint32 = 1 << 4

	maxShortLen = 1<<16 - 1
)

// FrameTopic is the topic of a Raft entry's frame (SysFlagFrame).
const FrameTopic = "%RAFT%"

// PropertyDeletesTopic names the topic a frame marked SysFlagDeletesTopic
// deletes.
const PropertyDeletesTopic = "DELETES_TOPIC"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Size is the size of m's record, or an error wrapping ErrInvalid naming the
// first field that cannot be encoded.
func Size(m *Message) (int, error) {
	if !ValidTopic(m.Topic) {
		return 0, fmt.Errorf("%w: topic %q must match %s", ErrInvalid, m.Topic, TopicRule)
	}
	if len(m.Tags) > maxShortLen {
		return 0, fmt.Errorf("%w: tags longer than %d bytes", ErrInvalid, maxShortLen)
	}
	if len(m.Keys) > maxShortLen || propertyCount(m) > maxShortLen {
		return 0, fmt.Errorf("%w: more than %d keys or properties", ErrInvalid, maxShortLen)
	}
	if _, twice := m.Properties[PropertyUniqKey]; twice && m.UniqKey != "" {
		return 0, fmt.Errorf("%w: the unique key given as a property and as UniqKey", ErrInvalid)
	}
	n := HeaderLen + 1 + len(m.Topic) + 2 + len(m.Tags) + 2 + 2 + 4 + len(m.Body)
	for _, k := range m.Keys {
		if len(k) > maxShortLen {
			return 0, fmt.Errorf("%w: key longer than %d bytes", ErrInvalid, maxShortLen)
		}
		n += 2 + len(k)
	}
	for k, v := range m.Properties {
		if len(k) > maxShortLen || len(v) > maxShortLen {
			return 0, fmt.Errorf("%w: property %q longer than %d bytes", ErrInvalid, k, maxShortLen)
		}
		n += 4 + len(k) + len(v)
	}
	if m.UniqKey != "" {
		if len(m.UniqKey) > maxShortLen {
			return 0, fmt.Errorf("%w: property %q longer than %d bytes", ErrInvalid, PropertyUniqKey, maxShortLen)
		}
		n += 4 + len(PropertyUniqKey) + len(m.UniqKey)
	}
	if int64(len(m.Body)) > int64(1<<31-1-n) {
		return 0, fmt.Errorf("%w: body too large", ErrInvalid)
	}
	return n, nil
}

// Append appends m's record to dst, the fields a store assigns zero, with
// its CRC.
func Append(dst []byte, m *Message) ([]byte, error) {
	size, err := Size(m)
	if err != nil {
		return dst, err
	}
	return AppendSized(dst, m, size), nil
}

// AppendSized is Append for a size the caller has from Size(m).
func AppendSized(dst []byte, m *Message, size int) []byte {
	start := len(dst)
	dst = slices.Grow(dst, size)[:start+size]
	b := dst[start : start+size]
	clear(b[12:40])
	be := binary.BigEndian
	be.PutUint32(b[0:], uint32(size))
	be.PutUint32(b[4:], Magic)
	be.PutUint32(b[40:], uint32(m.QueueID))
	be.PutUint32(b[44:], uint32(m.Flag))
	be.PutUint64(b[48:], uint64(m.BornTime))
	be.PutUint64(b[56:], uint64(m.StoreTime))
	p := HeaderLen
	b[p] = byte(len(m.Topic))
	p++
	p += copy(b[p:], m.Topic)
	be.PutUint16(b[p:], uint16(len(m.Tags)))
	p += 2
	p += copy(b[p:], m.Tags)
	be.PutUint16(b[p:], uint16(len(m.Keys)))
	p += 2
	for _, k := range m.Keys {
		be.PutUint16(b[p:], uint16(len(k)))
		p += 2
		p += copy(b[p:], k)
	}
	be.PutUint16(b[p:], uint16(propertyCount(m)))
	p += 2
	if propertyCount(m) > 0 {
		// Sorted, so that the same message always encodes to the same bytes.
		var few [8]string
		names := few[:0]
		for k := range m.Properties {
			names = append(names, k)
		}
		if m.UniqKey != "" {
			names = append(names, PropertyUniqKey)
		}
		slices.Sort(names)
		for _, k := range names {
			v := m.Properties[k]
			if k == PropertyUniqKey && m.UniqKey != "" {
				v = m.UniqKey
			}
			be.PutUint16(b[p:], uint16(len(k)))
			p += 2
			p += copy(b[p:], k)
			be.PutUint16(b[p:], uint16(len(v)))
			p += 2
			p += copy(b[p:], v)
		}
	}
	be.PutUint32(b[p:], uint32(len(m.Body)))
	p += 4
	copy(b[p:], m.Body)
	putCRC(b)
	return dst
}

// propertyCount is how many properties m's record carries.
func propertyCount(m *Message) int {
	if m.UniqKey != "" {
		return len(m.Properties) + 1
	}
	return len(m.Properties)
}

func putCRC(b []byte) { binary.BigEndian.PutUint32(b[8:], crc32.Checksum(b[12:], castagnoli)) }

// Fill writes the fields a store assigns into the record b (exactly one
// record), and its CRC last.
func Fill(b []byte, raftIndex uint64, offset, queueOffset int64, sysFlag uint32) {
	be := binary.BigEndian
	be.PutUint32(b[12:], sysFlag)
	be.PutUint64(b[16:], raftIndex)
	be.PutUint64(b[24:], uint64(offset))
	be.PutUint64(b[32:], uint64(queueOffset))
	putCRC(b)
}

// SetStoreTime writes t as the store time of every record in records, a
// sequence of records already framed (Frame); their CRCs are left stale,
// since a store writes them anew (Fill). It reads only each record's size,
// and fails on a size that does not fit.
func SetStoreTime(records []byte, t int64) error {
	return eachRecord(records, func(b []byte) { binary.BigEndian.PutUint64(b[56:], uint64(t)) })
}

// MarkDedup sets SysFlagDedup on every record in records, a sequence of
// records already framed; their CRCs are left stale, as SetStoreTime
// leaves them.
func MarkDedup(records []byte) error {
	return eachRecord(records, func(b []byte) {
		binary.BigEndian.PutUint32(b[12:], binary.BigEndian.Uint32(b[12:])|SysFlagDedup)
	})
}

// SetQueueID writes id as the queue id of every record in records, a
// sequence of records already framed, and their CRCs anew: a producer moves
// a batch it encoded to another queue without encoding it again. It fails
// on a size that does not fit.
func SetQueueID(records []byte, id int32) error {
	return eachRecord(records, func(b []byte) {
		binary.BigEndian.PutUint32(b[40:], uint32(id))
		putCRC(b)
	})
}

// eachRecord calls f on each record of records, a sequence of records
// already framed, reading only their sizes.
// Count is the number of records in records, a sequence of records,
// read from their sizes alone.
func Count(records []byte) (int, error) {
	n := 0
	err := eachRecord(records, func([]byte) { n++ })
	return n, err
}

func eachRecord(records []byte, f func(record []byte)) error {
	for p := 0; p < len(records); {
		b := records[p:]
		if len(b) < MinSize {
			return fmt.Errorf("%w: %d bytes, shorter than a record", ErrMalformed, len(b))
		}
		size := int(binary.BigEndian.Uint32(b))
		if size < MinSize || size > len(b) {
			return fmt.Errorf("%w: record size %d out of range (have %d bytes)", ErrMalformed, size, len(b))
		}
		f(b[:size])
		p += size
	}
	return nil
}

// View is what a store or a master needs of a record, read in place: the
// variable fields are views into the record's bytes.
type View struct {
	Topic, Tags []byte
	QueueID     int32
	StoreTime   int64
	BodyLen     int
	Delayed     bool     // a property asks for a delay (AsksForDelay)
	Half        bool     // a half message: TRAN_MSG=true
	Keys        [][]byte // only when asked for (collecting them allocates)
	UniqKey     []byte   // likewise
}

// Frame checks that b starts with a record's framing (size, magic, and
// fields that add up to the size, a legal topic) and returns its size and
// its fields, read in place: the keys and the unique key only withKeys. The
// CRC is not checked (Check does). Errors wrap ErrMalformed.
func Frame(b []byte, withKeys bool) (int, View, error) {
	if len(b) < BlankSize {
		return 0, View{}, fmt.Errorf("%w: %d bytes, shorter than a record header", ErrMalformed, len(b))
	}
	size := int(binary.BigEndian.Uint32(b))
	if magic := binary.BigEndian.Uint32(b[4:]); magic != Magic {
		return 0, View{}, fmt.Errorf("%w: bad magic %#x", ErrMalformed, magic)
	}
	if size < MinSize || size > len(b) {
		return 0, View{}, fmt.Errorf("%w: record size %d out of range (have %d bytes)", ErrMalformed, size, len(b))
	}
	v, err := parse(b[:size], withKeys)
	if err != nil {
		return 0, View{}, err
	}
	return size, v, nil
}

// parse reads the variable fields of the framed record b (len(b) is its
// size) without copying them.
func parse(b []byte, withKeys bool) (View, error) {
	be := binary.BigEndian
	v := View{QueueID: int32(be.Uint32(b[40:])), StoreTime: int64(be.Uint64(b[56:]))}
	d := decoder{b: b, p: HeaderLen}
	v.Topic = d.bytes(int(d.u8()))
	v.Tags = d.bytes(int(d.u16()))
	for n := int(d.u16()); n > 0 && d.err == nil; n-- {
		if k := d.bytes(int(d.u16())); len(k) > 0 && withKeys {
			v.Keys = append(v.Keys, k)
		}
	}
	for n := int(d.u16()); n > 0 && d.err == nil; n-- {
		name, val := d.bytes(int(d.u16())), d.bytes(int(d.u16()))
		if withKeys && string(name) == PropertyUniqKey {
			v.UniqKey = val
		}
		if len(val) > 0 && AsksForDelay(name) {
			v.Delayed = true
		}
		if string(name) == PropertyTransactionPrepared && string(val) == "true" {
			v.Half = true
		}
	}
	v.BodyLen = len(d.bytes(int(d.u32())))
	switch {
	case d.err != nil:
		return v, d.err
	case d.p != len(b):
		return v, fmt.Errorf("%w: %d trailing bytes in record", ErrMalformed, len(b)-d.p)
	case !ValidTopic(v.Topic):
		return v, fmt.Errorf("%w: topic %q is not a legal name", ErrMalformed, v.Topic)
	}
	return v, nil
}

// CheckCRC reports an error wrapping ErrMalformed when the CRC of the
// framed record b (len(b) is its size) does not match its bytes.
func CheckCRC(b []byte) error {
	if want, got := binary.BigEndian.Uint32(b[8:]), crc32.Checksum(b[12:], castagnoli); want != got {
		return fmt.Errorf("%w: CRC mismatch (stored %#x, computed %#x)", ErrMalformed, want, got)
	}
	return nil
}

// Check verifies the framing and CRC of the record at the start of b, and
// returns its size.
func Check(b []byte) (int, error) {
	// The framing first, so the CRC is taken over the record's bytes only;
	// a CRC only says the bytes are the ones written, the framing that they
	// are a record too, so nothing accepts what Decode would refuse.
	size, _, err := Frame(b, false)
	if err != nil {
		return 0, err
	}
	if err := CheckCRC(b[:size]); err != nil {
		return 0, err
	}
	return size, nil
}

// Decode decodes one record from the start of b, verifying its CRC and
// framing. It never panics on arbitrary input.
func Decode(b []byte) (Record, error) {
	size, err := Check(b)
	if err != nil {
		return Record{}, err
	}
	b = b[:size]
	be := binary.BigEndian
	r := Record{
		Size:        int32(size),
		SysFlag:     be.Uint32(b[12:]),
		RaftIndex:   be.Uint64(b[16:]),
		Offset:      int64(be.Uint64(b[24:])),
		QueueOffset: int64(be.Uint64(b[32:])),
		QueueID:     int32(be.Uint32(b[40:])),
		Flag:        int32(be.Uint32(b[44:])),
		BornTime:    int64(be.Uint64(b[48:])),
		StoreTime:   int64(be.Uint64(b[56:])),
	}
	d := decoder{b: b, p: HeaderLen}
	r.Topic = string(d.bytes(int(d.u8())))
	r.Tags = string(d.bytes(int(d.u16())))
	if n := int(d.u16()); n > 0 && d.err == nil {
		r.Keys = make([]string, 0, min(n, len(b)/2))
		for i := 0; i < n && d.err == nil; i++ {
			r.Keys = append(r.Keys, string(d.bytes(int(d.u16()))))
		}
	}
	if n := int(d.u16()); n > 0 && d.err == nil {
		r.Properties = make(map[string]string, min(n, len(b)/4))
		for i := 0; i < n && d.err == nil; i++ {
			k := string(d.bytes(int(d.u16())))
			r.Properties[k] = string(d.bytes(int(d.u16())))
		}
	}
	r.Body = d.bytes(int(d.u32()))
	return r, nil
}

// decoder reads length-prefixed fields; the first overrun sets err and makes
// every later read return zero values.
type decoder struct {
	b   []byte
	p   int
	err error
}

func (d *decoder) need(n int) bool {
	if d.err != nil {
		return false
	}
	if n < 0 || n > len(d.b)-d.p {
		d.err = fmt.Errorf("%w: field of %d bytes overruns the record at byte %d", ErrMalformed, n, d.p)
		return false
	}
	return true
}

func (d *decoder) u8() uint8 {
	if !d.need(1) {
		return 0
	}
	d.p++
	return d.b[d.p-1]
}

func (d *decoder) u16() uint16 {
	if !d.need(2) {
		return 0
	}
	d.p += 2
	return binary.BigEndian.Uint16(d.b[d.p-2:])
}

func (d *decoder) u32() uint32 {
	if !d.need(4) {
		return 0
	}
	d.p += 4
	return binary.BigEndian.Uint32(d.b[d.p-4:])
}

func (d *decoder) bytes(n int) []byte {
	if !d.need(n) {
		return nil
	}
	d.p += n
	return d.b[d.p-n : d.p : d.p]
}

// Header fields of a record already checked, read without decoding it.
func HeaderSysFlag(b []byte) uint32    { return binary.BigEndian.Uint32(b[12:]) }
func HeaderRaftIndex(b []byte) uint64  { return binary.BigEndian.Uint64(b[16:]) }
func HeaderOffset(b []byte) int64      { return int64(binary.BigEndian.Uint64(b[24:])) }
func HeaderQueueOffset(b []byte) int64 { return int64(binary.BigEndian.Uint64(b[32:])) }
func HeaderQueueID(b []byte) int32     { return int32(binary.BigEndian.Uint32(b[40:])) }
func HeaderStoreTime(b []byte) int64   { return int64(binary.BigEndian.Uint64(b[56:])) }

// IsAt reports whether a checked record is the message at queue offset
// qoff of topic's queue id.
func IsAt(b []byte, topic string, id int32, qoff int64) bool {
	return HeaderQueueOffset(b) == qoff && HeaderQueueID(b) == id &&
		int(b[HeaderLen]) == len(topic) && string(b[HeaderLen+1:HeaderLen+1+len(topic)]) == topic
}
