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

func decodeMessage(raw []byte, group string) (*MessageExt, error) {
	r, err := message.Decode(raw)
	if err != nil {
		return nil, err
	}
	m := &MessageExt{
		Message: Message{Topic: r.Topic, Tags: r.Tags, Keys: r.Keys, Properties: r.Properties,
			Body: append([]byte(nil), r.Body...), Flag: r.Flag},
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

// appendRecord appends m's record for queue id to records (the layout of
// package message: the broker stores these bytes as they are), adding its
// unique key, and returns that key.
func (m *Message) appendRecord(records []byte, queueID int32) ([]byte, string, error) {
	props := make(map[string]string, len(m.Properties)+1)
	for k, v := range m.Properties {
		props[k] = v
	}
	key := props[message.PropertyUniqKey]
	if key == "" {
		key = newUniqKey()
		props[message.PropertyUniqKey] = key
	}
	rec := message.Message{Topic: m.Topic, QueueID: queueID, Flag: m.Flag, Tags: m.Tags, Keys: m.Keys,
		Properties: props, Body: m.Body, BornTime: time.Now().UnixMilli()}
	records, err := message.Append(records, &rec)
	if err != nil {
		return records, "", fmt.Errorf("client: %w", err)
	}
	return records, key, nil
}
