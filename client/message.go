package client

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/raftmq/raftmq/message"
)

// Message is what a producer sends.
type Message struct {
	Topic      string
	Tags       string
	Keys       []string
	Properties map[string]string
	Body       []byte
	Flag       int32
}

// WithDelayTimeLevel asks the broker to deliver m after delay level level
// (RocketMQ's DELAY: 1 s, 5 s, 10 s, 30 s, 1 m ... 2 h by default; a level
// past the last is the last). It returns m.
func (m *Message) WithDelayTimeLevel(level int) *Message {
	return m.withProperty(message.PropertyDelayLevel, strconv.Itoa(level))
}

// WithDeliverTime asks the broker to deliver m at t (TIMER_DELIVER_MS, by
// this machine's clock), never before, and at most the broker's timer
// precision later (100 ms by default). A t further ahead than the
// broker's timer horizon (7 days by default) is refused; a t already
// passed is an ordinary send. It returns m.
func (m *Message) WithDeliverTime(t time.Time) *Message {
	return m.withProperty(message.PropertyTimerDeliverMS, strconv.FormatInt(t.UnixMilli(), 10))
}

// WithDelay asks the broker to deliver m d after it stores it
// (TIMER_DELAY_MS, by the broker's clock). It returns m.
func (m *Message) WithDelay(d time.Duration) *Message {
	return m.withProperty(message.PropertyTimerDelayMS, strconv.FormatInt(d.Milliseconds(), 10))
}

func (m *Message) withProperty(name, value string) *Message {
	if m.Properties == nil {
		m.Properties = map[string]string{}
	}
	m.Properties[name] = value
	return m
}

// DueTime is when a timer message was due (TIMER_OUT_MS, which the
// broker sets on timers), and false for other messages, those delayed by
// a delay level included.
func (m *MessageExt) DueTime() (time.Time, bool) {
	ms, err := strconv.ParseInt(m.Properties[message.PropertyTimerOutMS], 10, 64)
	return time.UnixMilli(ms), err == nil
}

// PropertyReconsumeTimes counts a message's redeliveries.
const PropertyReconsumeTimes = message.PropertyReconsumeTimes

// DLQTopic names a consumer group's dead-letter topic.
func DLQTopic(group string) string { return message.DLQTopic(group) }

// MessageQueue names one queue of a topic on a broker group.
type MessageQueue struct {
	Topic   string
	Group   string // broker group
	QueueID int32
}

// MessageExt is a received message with where and when it was stored.
type MessageExt struct {
	Message
	MsgID          string
	Queue          MessageQueue
	QueueOffset    int64
	BornTime       time.Time
	StoreTime      time.Time
	ReconsumeTimes int
}

// UniqKey is the producer's unique key of the message (set on every send).
func (m *MessageExt) UniqKey() string { return m.Properties[message.PropertyUniqKey] }

// decodeMessage decodes a record of a pull's answer. The message's body is
// the record's own bytes, not a copy: the answer's records are each their
// own allocation (protobuf copies bytes fields out of gRPC's buffer), and
// the copy was a tenth of the consume bench client's CPU (2026-12-03). The
// body's capacity ends with it, so appending to it cannot reach past it.
func decodeMessage(raw []byte, group string) (*MessageExt, error) {
	r, err := message.Decode(raw)
	if err != nil {
		return nil, err
	}
	m := &MessageExt{
		Message: Message{Topic: r.Topic, Tags: r.Tags, Keys: r.Keys, Properties: r.Properties,
			Body: r.Body, Flag: r.Flag},
		MsgID:       message.FormatID(group, r.Offset),
		Queue:       MessageQueue{Topic: r.Topic, Group: group, QueueID: r.QueueID},
		QueueOffset: r.QueueOffset,
		BornTime:    time.UnixMilli(r.BornTime),
		StoreTime:   time.UnixMilli(r.StoreTime),
	}
	if n, err := strconv.Atoi(r.Properties[PropertyReconsumeTimes]); err == nil {
		m.ReconsumeTimes = n
	}
	// A redelivery from a retry topic shows its first topic.
	if orig := r.Properties[message.PropertyRetryTopic]; orig != "" && strings.HasPrefix(r.Topic, message.RetryPrefix) {
		m.Topic = orig
	}
	return m, nil
}

// uniqKeys makes the unique keys producers put on every message: a random
// per-process prefix and a counter.
var (
	uniqPrefix = func() string {
		b := make([]byte, 8)
		rand.Read(b)
		return hex.EncodeToString(b)
	}()
	uniqCounter atomic.Uint64
)

func newUniqKey() string {
	return uniqPrefix + strconv.FormatUint(uniqCounter.Add(1), 16)
}

// encodeRecords encodes msgs as the records of one send, for queue 0 (the
// layout of package message: the broker stores these bytes as they are),
// each with its unique key, and returns the keys. The buffer is allocated
// once at the records' size: grown message by message, its copies and the
// discarded buffers took a quarter of the batched bench client's CPU
// (growslice, and the scavenger returning the memory).
func encodeRecords(msgs []*Message) ([]byte, []string, error) {
	type sized struct {
		rec  message.Message
		size int
	}
	recs := make([]sized, len(msgs))
	keys := make([]string, len(msgs))
	total := 0
	for i, m := range msgs {
		r := &recs[i]
		r.rec, keys[i] = m.record()
		n, err := message.Size(&r.rec)
		if err != nil {
			return nil, nil, fmt.Errorf("client: %w", err)
		}
		r.size, total = n, total+n
	}
	records := make([]byte, 0, total)
	for i := range recs {
		records = message.AppendSized(records, &recs[i].rec, recs[i].size)
	}
	return records, keys, nil
}

// record is m as a record for queue 0, with its unique key (the one it
// carries, else a new one), and that key.
func (m *Message) record() (message.Message, string) {
	rec := message.Message{Topic: m.Topic, Flag: m.Flag, Tags: m.Tags, Keys: m.Keys,
		Properties: m.Properties, Body: m.Body, BornTime: time.Now().UnixMilli()}
	key, has := m.Properties[message.PropertyUniqKey]
	switch {
	case key != "":
	case has: // an empty key of the caller's, replaced in a copy
		key = newUniqKey()
		rec.Properties = message.CopyProperties(m.Properties, 0)
		rec.Properties[message.PropertyUniqKey] = key
	default: // written beside the caller's properties, which stay theirs
		key = newUniqKey()
		rec.UniqKey = key
	}
	return rec, key
}
