package remoting

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/raftmq/raftmq/cluster/pb"
	"github.com/raftmq/raftmq/message"
)

// A record in the stored layout, read back field by field as RocketMQ's
// decoders read it; two records back to back with nothing between.
func TestStoredLayout(t *testing.T) {
	r := &message.Record{Topic: "orders", QueueID: 2, Flag: 5, QueueOffset: 7, Offset: 1234, BornTime: 100, StoreTime: 200,
		Tags: "TagA", Keys: []string{"k1", "k2"}, Properties: map[string]string{"UNIQ_KEY": "U", message.PropertyReconsumeTimes: "3"}, Body: []byte("body!")}
	b := AppendStored(nil, r, [4]byte{127, 0, 0, 1}, 10911)
	b = AppendStored(b, r, [4]byte{127, 0, 0, 1}, 10911)
	be := binary.BigEndian
	size := int(be.Uint32(b))
	if 2*size != len(b) {
		t.Fatalf("size %d, two records in %d bytes", size, len(b))
	}
	p := 4
	u32 := func() uint32 { v := be.Uint32(b[p:]); p += 4; return v }
	u64 := func() uint64 { v := be.Uint64(b[p:]); p += 8; return v }
	if u32() != storedMagic {
		t.Fatal("magic")
	}
	u32() // body CRC
	if q, f, qo, off, sys := u32(), u32(), u64(), u64(), u32(); q != 2 || f != 5 || qo != 7 || off != 1234 || sys != 0 {
		t.Fatalf("queue %d flag %d queue offset %d offset %d sysFlag %d", q, f, qo, off, sys)
	}
	if born := u64(); born != 100 {
		t.Fatalf("born %d", born)
	}
	p += 8 // born host
	if store := u64(); store != 200 {
		t.Fatalf("store time %d", store)
	}
	p += 8 // store host
	if rt := u32(); rt != 3 {
		t.Fatalf("reconsume times %d", rt)
	}
	p += 8
	n := int(u32())
	body := string(b[p : p+n])
	p += n
	tl := int(b[p])
	topic := string(b[p+1 : p+1+tl])
	p += 1 + tl
	pl := int(be.Uint16(b[p:]))
	props := string(b[p+2 : p+2+pl])
	p += 2 + pl
	if body != "body!" || topic != "orders" || p != size {
		t.Fatalf("body %q topic %q, ended at %d of %d", body, topic, p, size)
	}
	for _, want := range []string{"TAGS\x01TagA\x02", "KEYS\x01k1 k2\x02", "UNIQ_KEY\x01U\x02"} {
		if !strings.Contains(props, want) {
			t.Fatalf("properties %q lack %q", props, want)
		}
	}
}

func TestHeartbeatBodiesBecomeNativeGroupsAndProducerGroups(t *testing.T) {
	body := `{"clientID":"10.0.0.5@1#2","producerDataSet":[{"groupName":"pg"}],"consumerDataSet":[{"groupName":"cg","consumeType":"CONSUME_PASSIVELY",
		"messageModel":"BROADCASTING","subscriptionDataSet":[{"topic":"T","subString":"a || b","tagsSet":["a","b"]},{"topic":"%RETRY%cg","subString":"*"}]}]}`
	id, groups, producers, err := Heartbeat([]byte(body))
	if err != nil || id != "10.0.0.5@1#2" || len(groups) != 1 || len(producers) != 1 || producers[0] != "pg" || groups[0].Group != "cg" || groups[0].Mode != pb.ConsumeMode_BROADCASTING ||
		len(groups[0].Subscriptions) != 2 || groups[0].Subscriptions[0].Expression != "a || b" {
		t.Fatalf("%q %v %v %v", id, groups, producers, err)
	}
	if _, _, _, err := Heartbeat([]byte("{")); err == nil {
		t.Fatal("a body that is not JSON taken")
	}
}

// An offset message id is what RocketMQ's Go client decodes
// (primitive.UnmarshalMsgID): the host, port and offset, in 32 hex digits.
func TestOffsetMsgIDIsRocketMQs(t *testing.T) {
	id := OffsetMsgID([4]byte{10, 0, 0, 5}, 10911, 0x1234)
	if id != "0A000005"+"00002A9F"+"0000000000001234" {
		t.Fatalf("offset message id %s", id)
	}
}
