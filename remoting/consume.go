package remoting

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"math"
	"sort"
	"strings"

	"github.com/raftmq/raftmq/cluster/pb"
	"github.com/raftmq/raftmq/message"
)

// What RocketMQ's consumers send and read: heartbeats with their groups
// and subscriptions (code 34), pulls (11) whose answer carries messages in
// RocketMQ's stored layout, offsets (14, 15, 29, 30, 31), the member
// list (38) and send-back (36: the message by the commitlog offset its
// pull answer carried). The broker's gateway maps each onto its native service.

// Consumer request codes.
const (
	CodePullMessage         = 11
	CodeQueryConsumerOffset = 14
	CodeUpdateConsumerOffet = 15
	CodeSearchOffsetByTime  = 29
	CodeGetMaxOffset        = 30
	CodeGetMinOffset        = 31
	CodeHeartbeat           = 34
	CodeGetConsumerList     = 38
	CodeConsumerSendBack    = 36
	CodeLockBatchMQ         = 41
	CodeUnlockBatchMQ       = 42
)

// CodeNotifyConsumerIdsChanged is what a broker pushes to a group's
// members when the members change, so they rebalance at once rather than
// at their next 20 s round.
const CodeNotifyConsumerIdsChanged = 40

// Pull answer codes, and the "no offset" answer of code 14.
const (
	CodePullNotFound         = 19
	CodePullRetryImmediately = 20
	CodePullOffsetMoved      = 21
	CodeQueryNotFound        = 22
)

// Pull sysFlag bits.
const (
	PullCommitOffset = 1
	PullSuspend      = 2
)

// heartbeatData is a heartbeat's body (the consumers' part).
type heartbeatData struct {
	ClientID        string `json:"clientID"`
	ConsumerDataSet []struct {
		GroupName           string `json:"groupName"`
		MessageModel        string `json:"messageModel"`
		SubscriptionDataSet []struct {
			Topic     string `json:"topic"`
			SubString string `json:"subString"`
		} `json:"subscriptionDataSet"`
	} `json:"consumerDataSet"`
	ProducerDataSet []struct {
		GroupName string `json:"groupName"`
	} `json:"producerDataSet"`
}

// Heartbeat reads a heartbeat body: the client id, its consumer groups as
// the native heartbeat has them, and its producer groups.
func Heartbeat(body []byte) (string, []*pb.ConsumerGroupInfo, []string, error) {
	var h heartbeatData
	if err := json.Unmarshal(body, &h); err != nil {
		return "", nil, nil, fmt.Errorf("a heartbeat body that is not JSON: %w", err)
	}
	var producers []string
	for _, p := range h.ProducerDataSet {
		producers = append(producers, p.GroupName)
	}
	var groups []*pb.ConsumerGroupInfo
	for _, c := range h.ConsumerDataSet {
		g := &pb.ConsumerGroupInfo{Group: c.GroupName, Mode: pb.ConsumeMode_CLUSTERING}
		if c.MessageModel == "BROADCASTING" {
			g.Mode = pb.ConsumeMode_BROADCASTING
		}
		for _, s := range c.SubscriptionDataSet {
			g.Subscriptions = append(g.Subscriptions, &pb.Subscription{Topic: s.Topic, Expression: s.SubString})
		}
		groups = append(groups, g)
	}
	return h.ClientID, groups, producers, nil
}

// MessageQueue is a queue as RocketMQ's clients name it in JSON bodies.
type MessageQueue struct {
	Topic      string `json:"topic"`
	BrokerName string `json:"brokerName"`
	QueueID    int32  `json:"queueId"`
}

// LockBatch is the body of a lock or unlock request (41, 42).
type LockBatch struct {
	ConsumerGroup string         `json:"consumerGroup"`
	ClientID      string         `json:"clientId"`
	Queues        []MessageQueue `json:"mqSet"`
}

// ReadLockBatch reads a lock or unlock request's body.
func ReadLockBatch(body []byte) (*LockBatch, error) {
	var l LockBatch
	if err := json.Unmarshal(body, &l); err != nil {
		return nil, fmt.Errorf("a lock body that is not JSON: %w", err)
	}
	return &l, nil
}

// LockedBody is code 41's answer body: the queues now locked for the
// client.
func LockedBody(queues []MessageQueue) []byte {
	if queues == nil {
		queues = []MessageQueue{}
	}
	b, _ := json.Marshal(map[string][]MessageQueue{"lockOKMQSet": queues})
	return b
}

// ConsumerListBody is code 38's answer body.
func ConsumerListBody(ids []string) []byte {
	if ids == nil {
		ids = []string{}
	}
	b, _ := json.Marshal(map[string][]string{"consumerIdList": ids})
	return b
}

// The stored-message layout RocketMQ's pull decoders read (the Go client's
// primitive.DecodeMessage reads the body until it ends: records back to
// back, no padding), big-endian:
//
//	int32 size | int32 magic | int32 body CRC | int32 queue id | int32 flag |
//	int64 queue offset | int64 commitlog offset | int32 sysFlag |
//	int64 born time | 4-byte IPv4 + int32 port | int64 store time |
//	4-byte IPv4 + int32 port | int32 reconsume times |
//	int64 prepared transaction offset | int32 body length | body |
//	u8 topic length | topic | int16 properties length | properties
//
// Tags and keys travel as the TAGS and KEYS properties.
const storedMagic = 0xDAA320A7

// AppendStored appends r in the stored layout, with host as born and
// store host (4-byte IPv4 and port).
func AppendStored(dst []byte, r *message.Record, host [4]byte, port int32) []byte {
	props := PropertiesString(r.Properties, r.Tags, r.Keys)
	if len(props) > math.MaxInt16 {
		// RocketMQ's layout has 32 KiB for properties; raftmq allows more.
		// Such a message keeps the ones clients act on.
		props = PropertiesString(map[string]string{message.PropertyUniqKey: r.Properties[message.PropertyUniqKey]}, r.Tags, r.Keys)
	}
	size := 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + 8 + 8 + 8 + 4 + 8 + 4 + len(r.Body) + 1 + len(r.Topic) + 2 + len(props)
	be := binary.BigEndian
	dst = be.AppendUint32(dst, uint32(size))
	dst = be.AppendUint32(dst, storedMagic)
	dst = be.AppendUint32(dst, crc32.ChecksumIEEE(r.Body))
	dst = be.AppendUint32(dst, uint32(r.QueueID))
	dst = be.AppendUint32(dst, uint32(r.Flag))
	dst = be.AppendUint64(dst, uint64(r.QueueOffset))
	dst = be.AppendUint64(dst, uint64(r.Offset))
	dst = be.AppendUint32(dst, 0) // sysFlag: IPv4 hosts, an uncompressed body
	dst = be.AppendUint64(dst, uint64(r.BornTime))
	dst = append(dst, host[:]...)
	dst = be.AppendUint32(dst, uint32(port))
	dst = be.AppendUint64(dst, uint64(r.StoreTime))
	dst = append(dst, host[:]...)
	dst = be.AppendUint32(dst, uint32(port))
	dst = be.AppendUint32(dst, uint32(reconsumeTimes(r.Properties)))
	dst = be.AppendUint64(dst, 0)
	dst = be.AppendUint32(dst, uint32(len(r.Body)))
	dst = append(dst, r.Body...)
	dst = append(dst, byte(len(r.Topic))) // topics are at most 127 bytes
	dst = append(dst, r.Topic...)
	dst = be.AppendUint16(dst, uint16(len(props)))
	return append(dst, props...)
}

func reconsumeTimes(props map[string]string) int32 {
	var n int32
	fmt.Sscan(props[message.PropertyReconsumeTimes], &n)
	return n
}

// PropertiesString writes properties as RocketMQ does ("k\x01v\x02..."),
// tags and keys among them, in a stable order.
func PropertiesString(props map[string]string, tags string, keys []string) string {
	all := make(map[string]string, len(props)+2)
	for k, v := range props {
		all[k] = v
	}
	if tags != "" {
		all[propertyTags] = tags
	}
	if len(keys) > 0 {
		all[propertyKeys] = strings.Join(keys, " ")
	}
	names := make([]string, 0, len(all))
	for k := range all {
		names = append(names, k)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, k := range names {
		b.WriteString(k)
		b.WriteByte(1)
		b.WriteString(all[k])
		b.WriteByte(2)
	}
	return b.String()
}
