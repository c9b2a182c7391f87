package broker

import (
	"bytes"
	"context"
	"encoding/binary"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftmq/raftmq/cluster/pb"
	"github.com/raftmq/raftmq/message"
)

// records encodes one record per body for topic@queue, as a producer does.
func records(t testing.TB, topic string, queue int32, bodies ...string) []byte {
	t.Helper()
	var out []byte
	for i, body := range bodies {
		var err error
		m := message.Message{Topic: topic, QueueID: queue, Tags: "t", Keys: []string{body}, Body: []byte(body),
			Properties: map[string]string{message.PropertyUniqKey: "u-" + body, "n": string(rune('a' + i))}, BornTime: 1700000000000}
		if out, err = message.Append(out, &m); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// Records a producer encoded are stored as they came, on every replica:
// only the fields the broker assigns differ (sys flag, Raft index,
// offsets, store time, CRC).
func TestSentRecordsAreStoredAsTheyCame(t *testing.T) {
	g := newGroup(t, 3, nil)
	g.createTopic("rec", 4)
	m := g.master()
	sent := records(t, "rec", 3, "one", "two", "three")
	req := &pb.SendMessageRequest{Topic: "rec", QueueId: 3, Records: bytes.Clone(sent)}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := g.client(m).SendMessage(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(req.Records, sent) {
		t.Fatal("the broker changed the request's bytes")
	}
	if len(resp.Results) != 3 {
		t.Fatalf("%d results for 3 records", len(resp.Results))
	}
	g.quiesce()
	for i := range g.brokers {
		log := commitlogBytes(t, g.cfgs[i], g.describe(i).CommitlogMaxOffset)
		p := 0
		for k, r := range resp.Results {
			size := int(binary.BigEndian.Uint32(sent[p:]))
			want, got := sent[p:p+size], log[r.CommitlogOffset:r.CommitlogOffset+int64(size)]
			for _, field := range [][2]int{{0, 8}, {40, 56}, {message.HeaderLen, size}} {
				if !bytes.Equal(got[field[0]:field[1]], want[field[0]:field[1]]) {
					t.Fatalf("replica %d record %d: bytes [%d, %d) differ from the producer's", i+1, k, field[0], field[1])
				}
			}
			rec, err := message.Decode(got)
			if err != nil {
				t.Fatalf("replica %d record %d: %v", i+1, k, err)
			}
			if rec.Offset != r.CommitlogOffset || rec.QueueOffset != r.QueueOffset || rec.StoreTime == 0 || rec.RaftIndex == 0 {
				t.Fatalf("replica %d record %d: assigned fields %+v, result %+v", i+1, k, rec, r)
			}
			if last := k == 2; (rec.SysFlag&message.SysFlagBatchEnd != 0) != last {
				t.Fatalf("replica %d record %d: sys flag %#x", i+1, k, rec.SysFlag)
			}
			p += size
		}
	}
	// Found by key and unique key, like messages sent as fields.
	for _, key := range []string{"two", "u-two"} {
		q, err := g.client(m).QueryMessageByKey(ctx, &pb.QueryMessageByKeyRequest{Topic: "rec", Key: key, Max: 4})
		if err != nil || len(q.Records) != 1 {
			t.Fatalf("key %s: %v, %d records", key, err, len(q.GetRecords()))
		}
	}
}

// Records that are not records, or not records of this send, get a status
// with a reason; nothing of the send is stored, and the broker serves on.
func TestBadRecordsGetClearStatusAndStoreNothing(t *testing.T) {
	g := newGroup(t, 1, func(c *Config) { c.MaxBatchMessages = 4 })
	g.createTopic("good", 2)
	c := g.client(0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	before := g.describe(0).CommitlogMaxOffset

	good := records(t, "good", 1, "a", "b")
	first := int(binary.BigEndian.Uint32(good))
	spoil := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	big := make([]byte, g.cfgs[0].MaxMessageSize+1)
	oversized, err := message.Append(nil, &message.Message{Topic: "good", QueueID: 1, Body: big})
	if err != nil {
		t.Fatal(err)
	}
	empty, err := message.Append(nil, &message.Message{Topic: "good", QueueID: 1})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		queue   int32
		records []byte
		code    codes.Code
		reason  pb.ErrorReason
	}{
		{"truncated", 1, good[:len(good)-1], codes.InvalidArgument, pb.ErrorReason_ILLEGAL_ARGUMENT},
		{"trailing bytes", 1, append(bytes.Clone(good), 0, 0), codes.InvalidArgument, pb.ErrorReason_ILLEGAL_ARGUMENT},
		{"bad magic", 1, spoil(func(b []byte) []byte { b[first+4] ^= 1; return b }), codes.InvalidArgument, pb.ErrorReason_ILLEGAL_ARGUMENT},
		{"bad CRC", 1, spoil(func(b []byte) []byte { b[len(b)-1] ^= 1; return b }), codes.InvalidArgument, pb.ErrorReason_ILLEGAL_ARGUMENT},
		{"size past the end", 1, spoil(func(b []byte) []byte { binary.BigEndian.PutUint32(b, uint32(len(b)+1)); return b }), codes.InvalidArgument, pb.ErrorReason_ILLEGAL_ARGUMENT},
		{"field overruns", 1, spoil(func(b []byte) []byte { b[message.HeaderLen] = 200; return b }), codes.InvalidArgument, pb.ErrorReason_ILLEGAL_ARGUMENT},
		{"another topic", 1, records(t, "other", 1, "x"), codes.InvalidArgument, pb.ErrorReason_ILLEGAL_ARGUMENT},
		{"another queue", 1, records(t, "good", 0, "x"), codes.InvalidArgument, pb.ErrorReason_ILLEGAL_ARGUMENT},
		{"queue past the topic's", 2, records(t, "good", 2, "x"), codes.InvalidArgument, pb.ErrorReason_ILLEGAL_ARGUMENT},
		{"empty body", 1, empty, codes.InvalidArgument, pb.ErrorReason_ILLEGAL_ARGUMENT},
		{"oversized body", 1, oversized, codes.InvalidArgument, pb.ErrorReason_MESSAGE_TOO_LARGE},
		{"more than a send may carry", 1, records(t, "good", 1, "1", "2", "3", "4", "5"), codes.InvalidArgument, pb.ErrorReason_ILLEGAL_ARGUMENT},
	}
	for _, tc := range cases {
		_, err := c.SendMessage(ctx, &pb.SendMessageRequest{Topic: "good", QueueId: tc.queue, Records: tc.records})
		if reason, _ := ReasonOf(err); status.Code(err) != tc.code || reason != tc.reason {
			t.Errorf("%s: %v (reason %v), want %v %v", tc.name, err, reason, tc.code, tc.reason)
		}
	}
	both := &pb.SendMessageRequest{Topic: "good", QueueId: 1, Records: good, Messages: []*pb.Message{{Body: []byte("x")}}}
	if _, err := c.SendMessage(ctx, both); status.Code(err) != codes.InvalidArgument {
		t.Errorf("messages and records in one send: %v", err)
	}
	if after := g.describe(0).CommitlogMaxOffset; after != before {
		t.Fatalf("refused sends stored %d bytes", after-before)
	}
	if _, err := c.SendMessage(ctx, &pb.SendMessageRequest{Topic: "good", QueueId: 1, Records: good}); err != nil {
		t.Fatalf("a good send after the bad ones: %v", err)
	}
}
