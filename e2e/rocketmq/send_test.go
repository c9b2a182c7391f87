package rocketmq

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
)

// The official producer sends to raftmq's brokers over the remoting
// protocol, and raftmq's own consumer reads what it sent: single messages
// with tags, keys and properties, a body over 4 KiB (which the client
// zlib-compresses), and a batch.
func TestOfficialProducerSendsAndNativeConsumerReads(t *testing.T) {
	ns := startDev(t)
	raftmq(t, "topic", "create", "--namesrv", ns, "--name", "from-rmq", "--queues", "2")
	p := startProducer(t, ns)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	small := primitive.NewMessage("from-rmq", []byte("hello from rocketmq")).WithTag("TagA").WithKeys([]string{"k1", "k2"})
	small.WithProperty("color", "blue")
	big := primitive.NewMessage("from-rmq", []byte(strings.Repeat("0123456789", 600))) // 6 KB: compressed on the wire
	sent := sendSync(t, p, small, big)
	batch := []*primitive.Message{primitive.NewMessage("from-rmq", []byte("batch-0")), primitive.NewMessage("from-rmq", []byte("batch-1")),
		primitive.NewMessage("from-rmq", []byte("batch-2"))}
	r, err := p.SendSync(ctx, batch...)
	if err != nil || r.Status != primitive.SendOK {
		t.Fatalf("batch SendSync: %v %v", r, err)
	}

	got := consumeNatively(t, ns, "from-rmq", 5)
	if len(got) != 5 {
		t.Fatalf("the native consumer read %d distinct messages, want 5: %v", len(got), got)
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

// consumeNatively reads count messages of topic with raftmq's own
// consumer (`raftmq consume --json`, a new group from the first offset)
// and returns each by its body, as the JSON fields it printed.
func consumeNatively(t *testing.T, ns, topic string, count int) map[string]map[string]any {
	t.Helper()
	out := raftmq(t, "consume", "--namesrv", ns, "--topic", topic, "--group", "native", "--count", fmt.Sprint(count), "--timeout", "20s", "--json")
	got := map[string]map[string]any{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("consume --json line %q: %v", line, err)
		}
		got[m["body"].(string)] = m
	}
	return got
}

func toStrings(v any) []string {
	list, _ := v.([]any)
	var out []string
	for _, x := range list {
		out = append(out, x.(string))
	}
	return out
}

// The official producer's asynchronous and one-way sends are stored:
// every async callback reports SendOK, and raftmq's consumer reads every
// message of both kinds.
func TestOfficialAsyncAndOneWaySendsAreStored(t *testing.T) {
	ns := startDev(t)
	raftmq(t, "topic", "create", "--namesrv", ns, "--name", "async-rmq", "--queues", "2")
	waitRoute(t, ns, "async-rmq")
	p := startProducer(t, ns)
	sendAll(t, p, "async-rmq", []string{"sync-first"}, nil) // the route is known from here on
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	results := make(chan error, 5)
	for _, b := range bodies("async", 5) {
		err := p.SendAsync(ctx, func(_ context.Context, r *primitive.SendResult, err error) {
			if err == nil && r.Status != primitive.SendOK {
				err = fmt.Errorf("status %v", r.Status)
			}
			results <- err
		}, primitive.NewMessage("async-rmq", []byte(b)))
		if err != nil {
			t.Fatalf("SendAsync: %v", err)
		}
	}
	for i := 0; i < 5; i++ {
		select {
		case err := <-results:
			if err != nil {
				t.Fatalf("an async send's callback: %v", err)
			}
		case <-ctx.Done():
			t.Fatal("async callbacks did not all come")
		}
	}
	for _, b := range bodies("oneway", 5) {
		if err := p.SendOneWay(ctx, primitive.NewMessage("async-rmq", []byte(b))); err != nil {
			t.Fatalf("SendOneWay: %v", err)
		}
	}
	got := consumeNatively(t, ns, "async-rmq", 11)
	for _, b := range append(bodies("async", 5), bodies("oneway", 5)...) {
		if got[b] == nil {
			t.Fatalf("%s not read back (read %v)", b, got)
		}
	}
}

// The official producer's delayed sends, by delay level (DELAY) and by
// deliver time (TIMER_DELIVER_MS), are held until due: raftmq's consumer
// reads neither before its time, and each once, with the time it was due.
func TestOfficialDelayedSendsArriveWhenDue(t *testing.T) {
	ns := startDev(t, "--delay-levels", "1s 2s")
	raftmq(t, "topic", "create", "--namesrv", ns, "--name", "later", "--queues", "2")
	p := startProducer(t, ns)
	sentAt := time.Now()
	at := sentAt.Add(1500 * time.Millisecond)
	sendSync(t, p,
		primitive.NewMessage("later", []byte("by-level")).WithDelayTimeLevel(2),
		primitive.NewMessage("later", []byte("by-time")).WithDelayTimestamp(at))
	got := consumeNatively(t, ns, "later", 2)
	for body, due := range map[string]time.Time{"by-level": sentAt.Add(2 * time.Second), "by-time": at} {
		m := got[body]
		props, _ := m["properties"].(map[string]any)
		if m == nil || props["TIMER_OUT_MS"] == nil && body == "by-time" {
			t.Fatalf("%s as read natively: %v", body, m)
		}
		if props["ORIGIN_MESSAGE_ID"] == nil {
			t.Fatalf("%s read without the id of its held copy: %v", body, m)
		}
		if stored, _ := m["storeTime"].(float64); int64(stored) < due.UnixMilli() {
			t.Fatalf("%s stored at %d, before it was due (%d)", body, int64(stored), due.UnixMilli())
		}
	}
}
