package rocketmq

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
)

// The official producer sends to raftmq's brokers over the remoting
// protocol, and raftmq's own consumer reads what it sent: single messages
// with tags, keys and properties, a body over 4 KiB (which the client
// zlib-compresses), and a batch.
func TestOfficialProducerSendsAndNativeConsumerReads(t *testing.T) {
	ns := startDev(t)
	raftmq(t, "topic", "create", "--namesrv", ns, "--name", "from-rmq", "--queues", "2")
	p, err := producer.NewDefaultProducer(producer.WithNsResolver(primitive.NewPassthroughResolver([]string{ns})),
		producer.WithGroupName("compat-producers"), producer.WithRetry(2), producer.WithSendMsgTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	small := primitive.NewMessage("from-rmq", []byte("hello from rocketmq")).WithTag("TagA").WithKeys([]string{"k1", "k2"})
	small.WithProperty("color", "blue")
	big := primitive.NewMessage("from-rmq", []byte(strings.Repeat("0123456789", 600))) // 6 KB: compressed on the wire
	var sent []*primitive.SendResult
	for _, m := range []*primitive.Message{small, big} {
		var r *primitive.SendResult
		deadline := time.Now().Add(10 * time.Second)
		for { // until the route of the topic reaches the name server
			if r, err = p.SendSync(ctx, m); err == nil && r.Status == primitive.SendOK || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil || r.Status != primitive.SendOK {
			t.Fatalf("SendSync: %v %v", r, err)
		}
		sent = append(sent, r)
	}
	batch := []*primitive.Message{primitive.NewMessage("from-rmq", []byte("batch-0")), primitive.NewMessage("from-rmq", []byte("batch-1")),
		primitive.NewMessage("from-rmq", []byte("batch-2"))}
	r, err := p.SendSync(ctx, batch...)
	if err != nil || r.Status != primitive.SendOK {
		t.Fatalf("batch SendSync: %v %v", r, err)
	}

	out := raftmq(t, "consume", "--namesrv", ns, "--topic", "from-rmq", "--group", "native", "--count", "5", "--timeout", "20s", "--json")
	got := map[string]map[string]any{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("consume --json line %q: %v", line, err)
		}
		got[m["body"].(string)] = m
	}
	if len(got) != 5 {
		t.Fatalf("the native consumer read %d distinct messages, want 5:\n%s", len(got), out)
	}
	s := got["hello from rocketmq"]
	props, _ := s["properties"].(map[string]any)
	if s == nil || s["tags"] != "TagA" || strings.Join(toStrings(s["keys"]), ",") != "k1,k2" || props["color"] != "blue" || props["UNIQ_KEY"] != sent[0].MsgID {
		t.Fatalf("the tagged message as read natively: %v (sent %v)", s, sent[0])
	}
	if got[strings.Repeat("0123456789", 600)] == nil {
		t.Fatal("the compressed body did not come back whole")
	}
	for _, b := range []string{"batch-0", "batch-1", "batch-2"} {
		if got[b] == nil {
			t.Fatalf("batch member %s not read", b)
		}
	}
}

func toStrings(v any) []string {
	list, _ := v.([]any)
	var out []string
	for _, x := range list {
		out = append(out, x.(string))
	}
	return out
}
