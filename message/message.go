package message

import (
	"errors"
	"math"
)

// Message is a message to encode. A producer sets everything but the
// queue offset, the commitlog offset, the Raft index and the store time,
// which the broker assigns.
type Message struct {
	Topic      string
	QueueID    int32
	Flag       int32
	Tags       string
	Keys       []string
	Properties map[string]string
	// UniqKey, when set, is written as the PropertyUniqKey property beside
	// Properties, which must then hold none: a producer names each message
	// it sends without copying its caller's properties to add the key (a
	// map a message was 7% of the SDK's CPU under batched publish,
	// broker/README.md, seventeenth sitting).
	UniqKey   string
	Body      []byte
	BornTime  int64 // unix milliseconds, set by the producer
	StoreTime int64 // unix milliseconds, set by the master
}

// CopyProperties returns a copy of props, never nil, with room for extra
// more: what a broker or client rewrites when it stores a message again
// (a delayed copy, a retry, a commit) leaves the original as it was.
func CopyProperties(props map[string]string, extra int) map[string]string {
	out := make(map[string]string, len(props)+extra)
	for k, v := range props {
		out[k] = v
	}
	return out
}

// Record is a decoded record. Body, and the strings, are copies or views of
// the buffer given to Decode; keep the buffer alive while the Record is
// used.
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

// PropertyUniqKey is the property carrying the producer's unique key of a
// message; stores index it like a key.
const PropertyUniqKey = "UNIQ_KEY"

// Errors. Callers test them with errors.Is; the wrapped text says which
// field or byte is at fault.
var (
	// ErrInvalid: a message that cannot be encoded (illegal topic name, a
	// field too long), or a message id that is not one.
	ErrInvalid = errors.New("invalid message")
	// ErrMalformed: bytes that are not a record: framing that does not add
	// up, or a CRC that does not match.
	ErrMalformed = errors.New("malformed record")
)

// MaxTopicLen is the longest legal topic name.
const MaxTopicLen = 127

// TopicRule says what ValidTopic accepts, for error messages.
const TopicRule = "[A-Za-z0-9_%-]{1,127}"

// ValidTopic reports whether name is a legal topic name (TopicRule).
func ValidTopic[T string | []byte](name T) bool {
	if len(name) == 0 || len(name) > MaxTopicLen {
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

// TagHash is the hash kept in consume queue entries for broker-side tag
// filtering. An empty tag hashes to 0; no tag hashes to DroppedTagHash.
// Hashes may collide: clients compare the tag strings again.
func TagHash[T string | []byte](tag T) int64 {
	if len(tag) == 0 {
		return 0
	}
	if v := int64(FNV64a(tag)); v != 0 && v != DroppedTagHash {
		return v
	}
	return 1
}

// DroppedTagHash is the tag hash a store gives the consume queue entry of
// a record it dropped (SysFlagDropped), so that reads step over the entry
// without reading the record. No tag hashes to it.
const DroppedTagHash int64 = math.MinInt64

// FNV64a is FNV-1a over a string, without the allocations of hash/fnv.
func FNV64a[T string | []byte](s T) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}
