package rocketmq

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
)

// deliveries records what consumers received: per body, who got it and
// from which queue, in order.
type deliveries struct {
	mu  sync.Mutex
	got map[string][]delivery
	seq []string // bodies in the order received
}

type delivery struct {
	by    string
	queue int
}

func newDeliveries() *deliveries { return &deliveries{got: map[string][]delivery{}} }

// listener records deliveries to the consumer named by.
func (d *deliveries) listener(by string) func(context.Context, ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
	return func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		d.mu.Lock()
		defer d.mu.Unlock()
		for _, m := range msgs {
			d.got[string(m.Body)] = append(d.got[string(m.Body)], delivery{by: by, queue: m.Queue.QueueId})
			d.seq = append(d.seq, string(m.Body))
		}
		return consumer.ConsumeSuccess, nil
	}
}

// all reports whether every one of bodies has been received.
func (d *deliveries) all(bodies []string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, b := range bodies {
		if len(d.got[b]) == 0 {
			return false
		}
	}
	return true
}

func (d *deliveries) of(body string) []delivery {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]delivery(nil), d.got[body]...)
}

// startProducer starts the official producer, shut down with the test.
func startProducer(t *testing.T, ns string, opts ...producer.Option) rocketmq.Producer {
	t.Helper()
	p, err := producer.NewDefaultProducer(append([]producer.Option{producer.WithNsResolver(primitive.NewPassthroughResolver([]string{ns})),
		producer.WithGroupName("compat-producers"), producer.WithRetry(2), producer.WithSendMsgTimeout(5 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Shutdown() })
	return p
}

// sendAll sends each body to topic with SendSync (sendSync); msg shapes
// each.
func sendAll(t *testing.T, p rocketmq.Producer, topic string, bodies []string, msg func(m *primitive.Message, body string)) {
	t.Helper()
	msgs := make([]*primitive.Message, len(bodies))
	for i, b := range bodies {
		msgs[i] = primitive.NewMessage(topic, []byte(b))
		if msg != nil {
			msg(msgs[i], b)
		}
	}
	sendSync(t, p, msgs...)
}

// sendSync sends each message with SendSync, retrying the first until its
// topic's route reaches the name server.
func sendSync(t *testing.T, p rocketmq.Producer, msgs ...*primitive.Message) []*primitive.SendResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var sent []*primitive.SendResult
	for i, m := range msgs {
		deadline := time.Now().Add(10 * time.Second)
		for {
			r, err := p.SendSync(ctx, m)
			if err == nil && r.Status == primitive.SendOK {
				sent = append(sent, r)
				break
			}
			if i > 0 || time.Now().After(deadline) {
				t.Fatalf("SendSync of %s: %v %v", m.Body, r, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return sent
}

func bodies(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

// Two members of one group split the topic's queues between them: once
// the second has joined, each round of messages is read once, by both
// members, from disjoint sets of queues. The first member gives up its
// share within seconds, not at its next 20 s rebalance: the brokers push
// code 40 when the group's members change.
func TestTwoMembersOfAGroupGetDisjointQueues(t *testing.T) {
	ns := startDev(t)
	raftmq(t, "topic", "create", "--namesrv", ns, "--name", "shared", "--queues", "4")
	waitRoute(t, ns, "shared")
	p := startProducer(t, ns)
	d := newDeliveries()
	startConsumer(t, ns, "sharers", "shared", d.listener("a"), consumer.WithInstance("a"))
	first := bodies("alone", 8)
	sendAll(t, p, "shared", first, nil)
	waitUntil(t, 30*time.Second, "the first member reading alone", func() bool { return d.all(first) })

	startConsumer(t, ns, "sharers", "shared", d.listener("b"), consumer.WithInstance("b"))
	joined := time.Now()
	for round := 0; ; round++ {
		if time.Since(joined) > 10*time.Second {
			t.Fatal("the members' queues still overlap 10 s after the second joined (the rebalance waited for its 20 s round: no code 40?)")
		}
		msgs := bodies(fmt.Sprintf("round%d", round), 16)
		sendAll(t, p, "shared", msgs, nil)
		waitUntil(t, 20*time.Second, fmt.Sprintf("round %d read", round), func() bool { return d.all(msgs) })
		queues := map[string]map[int]bool{"a": {}, "b": {}}
		once := true
		for _, m := range msgs {
			got := d.of(m)
			once = once && len(got) == 1
			for _, g := range got {
				queues[g.by][g.queue] = true
			}
		}
		overlap := false
		for q := range queues["a"] {
			overlap = overlap || queues["b"][q]
		}
		if once && !overlap && len(queues["a"]) > 0 && len(queues["b"]) > 0 {
			t.Logf("round %d, %v after the join: a reads queues %v, b %v", round, time.Since(joined).Round(time.Millisecond), queues["a"], queues["b"])
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Two broadcasting consumers of one group each read every message once.
func TestBroadcastingConsumersEachReadEverything(t *testing.T) {
	ns := startDev(t)
	raftmq(t, "topic", "create", "--namesrv", ns, "--name", "everyone", "--queues", "2")
	msgs := bodies("bc", 10)
	raftmqIn(t, strings.Join(msgs, "\n")+"\n", "produce", "--namesrv", ns, "--topic", "everyone")
	waitRoute(t, ns, "everyone")
	// Broadcasting offsets live in the client's files, under
	// $HOME/.rocketmq_client_go/<client id>/<group>: a group of this run
	// only, removed after.
	group := "broadcast-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	t.Cleanup(func() {
		dirs, _ := filepath.Glob(filepath.Join(os.Getenv("HOME"), ".rocketmq_client_go", "*", group))
		for _, dir := range dirs {
			os.RemoveAll(dir)
		}
	})
	d := newDeliveries()
	for _, name := range []string{"x", "y"} {
		startConsumer(t, ns, group, "everyone", d.listener(name), consumer.WithInstance(name), consumer.WithConsumerModel(consumer.BroadCasting))
	}
	waitUntil(t, 30*time.Second, "both reading all 10", func() bool {
		for _, m := range msgs {
			if len(d.of(m)) < 2 {
				return false
			}
		}
		return true
	})
	for _, m := range msgs {
		got := d.of(m)
		by := []string{got[0].by, got[1].by}
		sort.Strings(by)
		if len(got) != 2 || by[0] != "x" || by[1] != "y" {
			t.Fatalf("%s delivered %v, want once to each of x and y", m, got)
		}
	}
}

// An orderly consumer, which consumes a queue only while the master has
// it locked for it (code 41), reads each sharding key's messages in the
// order they were sent, each once.
func TestOrderlyConsumerKeepsEachKeysOrder(t *testing.T) {
	ns := startDev(t)
	raftmq(t, "topic", "create", "--namesrv", ns, "--name", "ordered", "--queues", "4")
	waitRoute(t, ns, "ordered")
	d := newDeliveries()
	startConsumer(t, ns, "in-order", "ordered", d.listener("o"), consumer.WithConsumerOrder(true))
	p := startProducer(t, ns, producer.WithQueueSelector(producer.NewHashQueueSelector()))
	const keys, perKey = 6, 15
	var msgs []string
	for i := 0; i < perKey; i++ {
		for k := 0; k < keys; k++ {
			msgs = append(msgs, fmt.Sprintf("k%d:%02d", k, i))
		}
	}
	sendAll(t, p, "ordered", msgs, func(m *primitive.Message, body string) { m.WithShardingKey(strings.Split(body, ":")[0]) })
	waitUntil(t, 30*time.Second, "the orderly consumer reading all", func() bool { return d.all(msgs) })
	d.mu.Lock()
	defer d.mu.Unlock()
	next := map[string]int{}
	for _, b := range d.seq {
		key, n, _ := strings.Cut(b, ":")
		if want := fmt.Sprintf("%02d", next[key]); n != want {
			t.Fatalf("key %s: read %s after %d of its messages (order %v)", key, b, next[key], d.seq)
		}
		next[key]++
	}
	if len(d.seq) != len(msgs) {
		t.Fatalf("read %d messages, sent %d", len(d.seq), len(msgs))
	}
}

// A consumer that stops and starts again (a new client, as a restarted
// process is) resumes from the offsets its group committed: it reads what
// was sent while it was away, and nothing it had read before.
func TestARestartedConsumerResumesFromItsOffsets(t *testing.T) {
	ns := startDev(t)
	raftmq(t, "topic", "create", "--namesrv", ns, "--name", "resume", "--queues", "2")
	before := bodies("before", 10)
	raftmqIn(t, strings.Join(before, "\n")+"\n", "produce", "--namesrv", ns, "--topic", "resume")
	waitRoute(t, ns, "resume")
	d := newDeliveries()
	c := startConsumer(t, ns, "resumers", "resume", d.listener("first"), consumer.WithInstance("first"))
	waitUntil(t, 30*time.Second, "the first run reading 10", func() bool { return d.all(before) })
	if err := c.Shutdown(); err != nil {
		t.Fatal(err)
	}
	after := bodies("after", 10)
	raftmqIn(t, strings.Join(after, "\n")+"\n", "produce", "--namesrv", ns, "--topic", "resume")
	startConsumer(t, ns, "resumers", "resume", d.listener("second"), consumer.WithInstance("second"))
	waitUntil(t, 30*time.Second, "the second run reading what was sent meanwhile", func() bool { return d.all(after) })
	for _, m := range before {
		for _, g := range d.of(m) {
			if g.by == "second" {
				t.Fatalf("%s read again after the restart: %v", m, d.of(m))
			}
		}
	}
	for _, m := range after {
		if got := d.of(m); len(got) != 1 {
			t.Fatalf("%s delivered %v, want once", m, got)
		}
	}
}
