package remoting

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/raftmq/raftmq/cluster/pb"
)

// Sends from RocketMQ's producers, as native SendMessageRequests: the
// broker's gateway hands them to its own send path (group commit, Raft,
// the commitlog), so a remoting send and a native one land in the same
// queues, each readable by the other's consumers.
//
//   - code 10 (SEND_MESSAGE): one message, the header's long field names;
//   - code 310 (SEND_MESSAGE_V2): the same, short names a..n;
//   - code 320 (SEND_BATCH_MESSAGE): short names, and a body of messages
//     back to back, each int32 total | int32 magic | int32 body CRC |
//     int32 flag | int32 body length | body | int16 properties length |
//     properties.
//
// Properties travel as "k\x01v\x02k\x01v\x02"; TAGS and KEYS (space
// separated) become the message's tags and keys. A body whose sysFlag has
// bit 0 set is zlib-compressed (the Go client compresses bodies over
// 4 KiB) and is inflated here, to at most maxBody bytes.

// Send request codes.
const (
	CodeSendMessage      = 10
	CodeSendMessageV2    = 310
	CodeSendBatchMessage = 320
)

const (
	sysFlagCompressed = 1
	propertyTags      = "TAGS"
	propertyKeys      = "KEYS"
)

// v2Names maps SEND_MESSAGE_V2's short header names to the long ones.
var v2Names = map[string]string{"a": "producerGroup", "b": "topic", "c": "defaultTopic", "d": "defaultTopicQueueNums",
	"e": "queueId", "f": "sysFlag", "g": "bornTimestamp", "h": "flag", "i": "properties", "j": "reconsumeTimes",
	"k": "unitMode", "l": "maxReconsumeTimes", "m": "batch", "n": "brokerName"}

// SendRequest is a send command as a native request; maxBody bounds an
// inflated body.
func SendRequest(c *Command, maxBody int) (*pb.SendMessageRequest, error) {
	f := c.ExtFields
	if c.Code == CodeSendMessageV2 || c.Code == CodeSendBatchMessage {
		f = map[string]string{}
		for k, v := range c.ExtFields {
			if long, ok := v2Names[k]; ok {
				k = long
			}
			f[k] = v
		}
	}
	queue, err := intField(f, "queueId")
	if err != nil {
		return nil, err
	}
	sysFlag, _ := intField(f, "sysFlag")
	born, _ := strconv.ParseInt(f["bornTimestamp"], 10, 64)
	req := &pb.SendMessageRequest{Topic: f["topic"], QueueId: int32(queue)}
	if c.Code == CodeSendBatchMessage {
		if req.Messages, err = decodeBatch(c.Body, born); err != nil {
			return nil, err
		}
		return req, nil
	}
	body := c.Body
	if sysFlag&sysFlagCompressed != 0 {
		if body, err = inflate(body, maxBody); err != nil {
			return nil, err
		}
	}
	flag, _ := intField(f, "flag")
	m := messageWith(parseProperties(f["properties"]), body, int32(flag), born)
	req.Messages = []*pb.Message{m}
	return req, nil
}

func intField(f map[string]string, name string) (int64, error) {
	v, err := strconv.ParseInt(f[name], 10, 32)
	if err != nil {
		return 0, fmt.Errorf("header field %s %.20q is not a number", name, f[name])
	}
	return v, nil
}

// messageWith is a native message of props (TAGS and KEYS taken out).
func messageWith(props map[string]string, body []byte, flag int32, born int64) *pb.Message {
	m := &pb.Message{Body: body, Flag: flag, BornTimestamp: born, Tags: props[propertyTags]}
	if keys := strings.Fields(props[propertyKeys]); len(keys) > 0 {
		m.Keys = keys
	}
	delete(props, propertyTags)
	delete(props, propertyKeys)
	if len(props) > 0 {
		m.Properties = props
	}
	return m
}

// parseProperties reads "k\x01v\x02...".
func parseProperties(s string) map[string]string {
	props := map[string]string{}
	for _, kv := range strings.Split(s, "\x02") {
		if k, v, ok := strings.Cut(kv, "\x01"); ok && k != "" {
			props[k] = v
		}
	}
	return props
}

// decodeBatch reads a batch body.
func decodeBatch(b []byte, born int64) ([]*pb.Message, error) {
	var out []*pb.Message
	for len(b) > 0 {
		if len(b) < 20 {
			return nil, fmt.Errorf("%w: a batch record of %d bytes", ErrMalformed, len(b))
		}
		total := int(int32(binary.BigEndian.Uint32(b)))
		if total < 22 || total > len(b) {
			return nil, fmt.Errorf("%w: a batch record claiming %d bytes of %d", ErrMalformed, total, len(b))
		}
		rec := b[:total]
		b = b[total:]
		flag := int32(binary.BigEndian.Uint32(rec[12:]))
		bodyLen := int(int32(binary.BigEndian.Uint32(rec[16:])))
		if bodyLen < 0 || 20+bodyLen+2 > total {
			return nil, fmt.Errorf("%w: a batch body of %d bytes in a record of %d", ErrMalformed, bodyLen, total)
		}
		body := rec[20 : 20+bodyLen]
		propsLen := int(binary.BigEndian.Uint16(rec[20+bodyLen:]))
		if 20+bodyLen+2+propsLen > total {
			return nil, fmt.Errorf("%w: batch properties past the record", ErrMalformed)
		}
		props := parseProperties(string(rec[22+bodyLen : 22+bodyLen+propsLen]))
		out = append(out, messageWith(props, body, flag, born))
	}
	return out, nil
}

// inflate decompresses a zlib body of at most max bytes.
func inflate(b []byte, max int) ([]byte, error) {
	r, err := zlib.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("a compressed body that is not zlib: %w", err)
	}
	defer r.Close()
	out, err := io.ReadAll(io.LimitReader(r, int64(max)+1))
	if err != nil {
		return nil, fmt.Errorf("a compressed body: %w", err)
	}
	if len(out) > max {
		return nil, fmt.Errorf("a compressed body inflating past %d bytes", max)
	}
	return out, nil
}
