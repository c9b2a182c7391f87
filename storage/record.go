package storage

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"sort"
)

// Message is what a caller appends. The store assigns the queue offset and the
// commitlog offset; everything else is taken as given, so that every replica
// applying the same messages writes the same bytes (StoreTime is set by the
// master before replication, never at apply time).
type Message struct {
	Topic      string
	QueueID    int32
	Flag       int32
	Tags       string
	Keys       []string
	Properties map[string]string
	Body       []byte
	BornTime   int64 // unix milliseconds, set by the producer
	StoreTime  int64 // unix milliseconds, set by the master
}

// Record is a decoded commitlog record. Body, and the strings, are copies or
// views of the buffer given to DecodeRecord; keep the buffer alive while the
// Record is used.
type Record struct {
	Size        int32
	SysFlag     uint32
	RaftIndex   uint64
	Offset      int64 // commitlog offset of this record
	QueueOffset int64
	QueueID     int32
	Flag        int32
	BornTime    int64
	StoreTime   int64
	Topic       string
	Tags        string
	Keys        []string
	Properties  map[string]string
	Body        []byte
}

// On-disk record layout, big-endian:
//
//	 0  4  total size (the whole record, this field included)
//	 4  4  magic
//	 8  4  CRC32-C of bytes [12, total size)
//	12  4  sys flag (bit 0: last record of its batch)
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
// The commitlog offset inside the record lets recovery reject a stale but
// CRC-valid record found at the wrong place. The batch-end flag lets recovery
// cut a batch torn by a crash, so a Raft entry is either all in or all out.
const (
	recordMagic   uint32 = 0x52514D31 // "RQM1"
	blankMagic    uint32 = 0x52514D30 // end-of-segment filler
	fixedHeader          = 64
	minRecordSize        = fixedHeader + 1 + 1 + 2 + 2 + 2 + 4
	blankSize            = 8 // a blank record needs size and magic

	sysFlagBatchEnd uint32 = 1 << 0

	maxTopicLen = 127
	maxShortLen = 1<<16 - 1
)

// PropertyUniqKey is the property carrying the producer's unique key; the
// store indexes it like a key.
const PropertyUniqKey = "UNIQ_KEY"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// TagHash is the hash kept in consume queue entries for broker-side tag
// filtering. An empty tag hashes to 0. Hashes may collide: clients compare
// the tag strings again.
func TagHash(tag string) int64 {
	if tag == "" {
		return 0
	}
	if v := int64(fnv64a(tag)); v != 0 {
		return v
	}
	return 1
}

// fnv64a is FNV-1a over a string, without the allocations of hash/fnv.
func fnv64a[T string | []byte](s T) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// ValidTopic reports whether name is a legal topic name: [A-Za-z0-9_%-]{1,127}.
func ValidTopic(name string) bool { return validTopic(name) }

func validTopic[T string | []byte](name T) bool {
	if len(name) == 0 || len(name) > maxTopicLen {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '%', c == '-':
		default:
			return false
		}
	}
	return true
}

// encodedSize is the size of m's record, or an error naming the first field
// that cannot be encoded.
func encodedSize(m *Message) (int, error) {
	if !ValidTopic(m.Topic) {
		return 0, fmt.Errorf("%w: topic %q must match [A-Za-z0-9_%%-]{1,127}", ErrInvalidMessage, m.Topic)
	}
	if len(m.Tags) > maxShortLen {
		return 0, fmt.Errorf("%w: tags longer than %d bytes", ErrInvalidMessage, maxShortLen)
	}
	if len(m.Keys) > maxShortLen || len(m.Properties) > maxShortLen {
		return 0, fmt.Errorf("%w: more than %d keys or properties", ErrInvalidMessage, maxShortLen)
	}
	n := fixedHeader + 1 + len(m.Topic) + 2 + len(m.Tags) + 2 + 2 + 4 + len(m.Body)
	for _, k := range m.Keys {
		if len(k) > maxShortLen {
			return 0, fmt.Errorf("%w: key longer than %d bytes", ErrInvalidMessage, maxShortLen)
		}
		n += 2 + len(k)
	}
	for k, v := range m.Properties {
		if len(k) > maxShortLen || len(v) > maxShortLen {
			return 0, fmt.Errorf("%w: property %q longer than %d bytes", ErrInvalidMessage, k, maxShortLen)
		}
		n += 4 + len(k) + len(v)
	}
	if int64(len(m.Body)) > int64(1<<31-1-n) {
		return 0, fmt.Errorf("%w: body too large", ErrInvalidMessage)
	}
	return n, nil
}

// appendRecord encodes m at the end of dst. size must be encodedSize(m).
func appendRecord(dst []byte, m *Message, size int, raftIndex uint64, offset, queueOffset int64, sysFlag uint32) []byte {
	start := len(dst)
	dst = grow(dst, size)
	b := dst[start : start+size]
	be := binary.BigEndian
	be.PutUint32(b[0:], uint32(size))
	be.PutUint32(b[4:], recordMagic)
	be.PutUint32(b[12:], sysFlag)
	be.PutUint64(b[16:], raftIndex)
	be.PutUint64(b[24:], uint64(offset))
	be.PutUint64(b[32:], uint64(queueOffset))
	be.PutUint32(b[40:], uint32(m.QueueID))
	be.PutUint32(b[44:], uint32(m.Flag))
	be.PutUint64(b[48:], uint64(m.BornTime))
	be.PutUint64(b[56:], uint64(m.StoreTime))
	p := fixedHeader
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
	be.PutUint16(b[p:], uint16(len(m.Properties)))
	p += 2
	if len(m.Properties) > 0 {
		// Sorted, so that every replica encodes the same bytes.
		names := make([]string, 0, len(m.Properties))
		for k := range m.Properties {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			v := m.Properties[k]
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
	be.PutUint32(b[8:], crc32.Checksum(b[12:], castagnoli))
	return dst
}

func grow(b []byte, n int) []byte {
	if cap(b)-len(b) >= n {
		return b[:len(b)+n]
	}
	nb := make([]byte, len(b)+n, 2*cap(b)+n)
	copy(nb, b)
	return nb
}

// checkRecord verifies the framing and CRC of the record at the start of b,
// and returns its size.
func checkRecord(b []byte) (int, error) {
	// The framing first, so the CRC is taken over the record's bytes only;
	// a CRC only says the bytes are the ones written, the framing that they
	// are a record too, so reads and recovery never accept what
	// DecodeRecord would refuse.
	size, _, err := frameRecord(b, ErrCorrupt, false)
	if err != nil {
		return 0, err
	}
	if want, got := binary.BigEndian.Uint32(b[8:]), crc32.Checksum(b[12:size], castagnoli); want != got {
		return 0, fmt.Errorf("%w: CRC mismatch (stored %#x, computed %#x)", ErrCorrupt, want, got)
	}
	return size, nil
}

// DecodeRecord decodes one stored record from the start of b, verifying its
// CRC and framing. It never panics on arbitrary input.
func DecodeRecord(b []byte) (Record, error) {
	size, err := checkRecord(b)
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
	d := decoder{b: b, p: fixedHeader}
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
		d.err = fmt.Errorf("%w: field of %d bytes overruns the record at byte %d", ErrCorrupt, n, d.p)
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

// Header fields read without decoding the whole record (the caller has
// checked the record already).
func recordOffset(b []byte) int64      { return int64(binary.BigEndian.Uint64(b[24:])) }
func recordRaftIndex(b []byte) uint64  { return binary.BigEndian.Uint64(b[16:]) }
func recordSysFlag(b []byte) uint32    { return binary.BigEndian.Uint32(b[12:]) }
func recordQueueOffset(b []byte) int64 { return int64(binary.BigEndian.Uint64(b[32:])) }
func recordStoreTime(b []byte) int64   { return int64(binary.BigEndian.Uint64(b[56:])) }

// recordIs reports whether a checked record is the message at queue offset
// qoff of topic's queue id.
func recordIs(b []byte, topic string, id int32, qoff int64) bool {
	return recordQueueOffset(b) == qoff && int32(binary.BigEndian.Uint32(b[40:])) == id &&
		int(b[fixedHeader]) == len(topic) && string(b[fixedHeader+1:fixedHeader+1+len(topic)]) == topic
}
