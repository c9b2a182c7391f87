package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftmq/raftmq/broker"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/cluster/pb"
	"github.com/raftmq/raftmq/message"
)

func createTopicOn(b pb.BrokerClient, topic string, queues int32) error {
	_, err := b.CreateTopic(context.Background(), &pb.CreateTopicRequest{Topic: &pb.TopicConfig{Name: topic, ReadQueues: queues, WriteQueues: queues}})
	return err
}

func TestProduceEveryWayAndPullBack(t *testing.T) {
	c := newCluster(t, 2, 1, nil)
	c.createTopic("t", 4)
	p := c.producer()
	defer p.Shutdown()
	ctx := context.Background()
	sent := map[string]bool{}
	groups := map[string]bool{}
	for i := 0; i < 20; i++ {
		r, err := p.Send(ctx, &Message{Topic: "t", Tags: "A", Keys: []string{bodyOf(i)}, Body: []byte(bodyOf(i))})
		if err != nil {
			t.Fatal(err)
		}
		if r.MsgID == "" || r.UniqKey == "" {
			t.Fatalf("result %+v", r)
		}
		groups[r.Queue.Group] = true
		sent[bodyOf(i)] = true
	}
	if len(groups) != 2 {
		t.Fatalf("round robin used groups %v", groups)
	}
	batch := []*Message{{Topic: "t", Body: []byte("b1")}, {Topic: "t", Body: []byte("b2")}}
	rs, err := p.SendBatch(ctx, batch)
	if err != nil || len(rs) != 2 || rs[0].Queue != rs[1].Queue || rs[1].QueueOffset != rs[0].QueueOffset+1 {
		t.Fatalf("batch: %v %v", rs, err)
	}
	sent["b1"], sent["b2"] = true, true
	var wg sync.WaitGroup
	wg.Add(1)
	if err := p.SendAsync(ctx, &Message{Topic: "t", Body: []byte("async")}, func(r *SendResult, err error) {
		defer wg.Done()
		if err != nil || r.MsgID == "" {
			t.Errorf("async: %v %v", r, err)
		}
	}); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	sent["async"] = true
	if err := p.SendOneway(ctx, &Message{Topic: "t", Body: []byte("oneway")}); err != nil {
		t.Fatal(err)
	}
	sent["oneway"] = true
	// Same sharding key, same queue.
	var q MessageQueue
	for i := 0; i < 10; i++ {
		r, err := p.SendOrderly(ctx, &Message{Topic: "t", Body: []byte("ord" + bodyOf(i))}, "customer-42")
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 && r.Queue != q {
			t.Fatalf("orderly send moved from %v to %v", q, r.Queue)
		}
		q = r.Queue
		sent["ord"+bodyOf(i)] = true
	}
	// Refused before sending.
	for _, bad := range []*Message{{Topic: "t"}, {Body: []byte("x")}, {Topic: "t", Body: make([]byte, 5<<20)}} {
		if _, err := p.Send(ctx, bad); err == nil {
			t.Fatalf("sent %+v", bad)
		}
	}
	if _, err := p.Send(ctx, &Message{Topic: "no_such_topic", Body: []byte("x")}); err == nil {
		t.Fatal("sent to an unknown topic outside dev mode")
	}

	pc := c.pullConsumer("cg")
	defer pc.Shutdown()
	clustertest.WaitFor(t, 5*time.Second, "one-way message stored", func() bool { return len(drain(t, pc, "t")) == len(sent) })
	for _, m := range drain(t, pc, "t") {
		if !sent[string(m.Body)] {
			t.Fatalf("pulled %q, never sent", m.Body)
		}
		if m.UniqKey() == "" || m.MsgID == "" {
			t.Fatalf("pulled message without ids: %+v", m)
		}
		delete(sent, string(m.Body))
	}
	if len(sent) != 0 {
		t.Fatalf("never pulled: %v", sent)
	}
}

func TestLifecycle(t *testing.T) {
	p, err := NewProducer(WithNameServers("127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Send(context.Background(), &Message{Topic: "t", Body: []byte("x")}); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("send before Start: %v, want ErrNotRunning", err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	if p.Start() == nil {
		t.Fatal("second Start")
	}
	if err := p.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if p.Shutdown() == nil {
		t.Fatal("second Shutdown")
	}
	if _, err := p.Send(context.Background(), &Message{Topic: "t", Body: []byte("x")}); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("send after Shutdown: %v, want ErrNotRunning", err)
	}
	if _, err := NewProducer(); err == nil {
		t.Fatal("producer without name servers")
	}
	if _, err := NewPullConsumer(WithNameServers("x:1")); err == nil {
		t.Fatal("consumer without group")
	}
}

// A pull held by the master answers when a message arrives; callback pulls
// share the path.
func TestLongPollingPulls(t *testing.T) {
	c := newCluster(t, 1, 3, nil)
	c.createTopic("lp", 1)
	p := c.producer()
	defer p.Shutdown()
	pc := c.pullConsumer("cg")
	defer pc.Shutdown()
	ctx := context.Background()
	mqs, err := pc.Queues(ctx, "lp")
	if err != nil || len(mqs) != 1 {
		t.Fatal(mqs, err)
	}
	got := make(chan *PullResult, 1)
	if err := pc.PullAsync(ctx, mqs[0], "*", 0, 32, 20*time.Second, func(r *PullResult, err error) {
		if err != nil {
			t.Error(err)
		}
		got <- r
	}); err != nil {
		t.Fatal(err)
	}
	m := c.brokers["broker-a"][c.master("broker-a")]
	clustertest.WaitFor(t, 5*time.Second, "pull held", func() bool { return heldPulls(m) == 1 })
	if _, err := p.Send(ctx, &Message{Topic: "lp", Body: []byte("wake")}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		if r == nil || r.Status != PullFound || string(r.Messages[0].Body) != "wake" || r.NextOffset != 1 {
			t.Fatalf("held pull: %+v", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("held pull not answered on arrival")
	}
	// A pull whose context is done fails cleanly.
	done, cancel := context.WithCancel(ctx)
	cancel()
	if r, err := pc.PullBlocking(done, mqs[0], "*", 1, 32, time.Second); err == nil {
		t.Fatalf("pull with a cancelled context: %+v", r)
	}
	// Offsets: commit, fetch, seek by time.
	if off, _ := pc.FetchOffset(ctx, mqs[0]); off != -1 {
		t.Fatalf("fresh group offset %d", off)
	}
	if err := pc.CommitOffset(ctx, mqs[0], 1); err != nil {
		t.Fatal(err)
	}
	if off, err := pc.FetchOffset(ctx, mqs[0]); err != nil || off != 1 {
		t.Fatalf("committed offset %d %v", off, err)
	}
	if off, err := pc.OffsetForTime(ctx, mqs[0], time.Now().Add(time.Hour)); err != nil || off != 1 {
		t.Fatalf("offset for a future time: %d %v", off, err)
	}
	if off, err := pc.OffsetForTime(ctx, mqs[0], time.Time{}); err != nil || off != 0 {
		t.Fatalf("offset for the epoch: %d %v", off, err)
	}
}

func heldPulls(b *broker.Broker) int { return b.HeldPulls() }

// A consumer far behind is sent to a slave, and back when caught up.
func TestSlaveReadsFollowSuggestions(t *testing.T) {
	c := newCluster(t, 1, 3, func(cfg *broker.Config) { cfg.SlaveReadLag = 20 })
	c.createTopic("cold", 1)
	p := c.producer()
	defer p.Shutdown()
	msgs := make([]*Message, 100)
	for i := range msgs {
		msgs[i] = &Message{Topic: "cold", Body: []byte(bodyOf(i))}
	}
	if _, err := p.SendBatch(context.Background(), msgs); err != nil {
		t.Fatal(err)
	}
	pc := c.pullConsumer("cg")
	defer pc.Shutdown()
	mqs, _ := pc.Queues(context.Background(), "cold")
	var sawSlave atomic.Bool
	next := 0
	for off := int64(0); off < 100; {
		r, err := pc.Pull(context.Background(), mqs[0], "*", off, 8)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range r.Messages {
			if string(m.Body) != bodyOf(next) {
				t.Fatalf("offset %d: %q, want %q", m.QueueOffset, m.Body, bodyOf(next))
			}
			next++
		}
		pc.mu.Lock()
		if pc.readsAt[mqs[0]] != "" {
			sawSlave.Store(true)
		}
		pc.mu.Unlock()
		off = r.NextOffset
	}
	if !sawSlave.Load() {
		t.Fatal("the consumer never read from a slave")
	}
	if r, err := pc.Pull(context.Background(), mqs[0], "*", 100, 8); err != nil || r.Status != PullNoNewMessage {
		t.Fatalf("at the end: %+v %v", r, err)
	}
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.readsAt[mqs[0]] != "" {
		t.Fatal("caught-up consumer still reads from the slave")
	}
}

// The master dies while producing: sends redirect and retry, and every
// acknowledged message can be pulled.
func TestProducerRidesOutMasterFailure(t *testing.T) {
	c := newCluster(t, 1, 3, nil)
	c.createTopic("fo", 2)
	p := c.producer(WithSendTimeout(10*time.Second), WithRetries(10))
	defer p.Shutdown()
	var (
		mu    sync.Mutex
		acked []string
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var stopOnce sync.Once
	halt := func() { stopOnce.Do(func() { close(stop) }); wg.Wait() }
	defer halt() // no sender outlives a failed test
	for s := 0; s < 4; s++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				body := bodyOf(s*100000 + i)
				if _, err := p.Send(context.Background(), &Message{Topic: "fo", Body: []byte(body)}); err != nil {
					t.Errorf("send: %v", err)
					return
				}
				mu.Lock()
				acked = append(acked, body)
				mu.Unlock()
			}
		}()
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }
	clustertest.WaitFor(t, 10*time.Second, "sends", func() bool { return count() > 100 })
	c.stop("broker-a", c.master("broker-a"))
	before := count()
	clustertest.WaitFor(t, 15*time.Second, "sends after failover", func() bool { return count() > before+100 })
	halt()
	pc := c.pullConsumer("cg")
	defer pc.Shutdown()
	got := map[string]bool{}
	for _, m := range drain(t, pc, "fo") {
		got[string(m.Body)] = true
	}
	for _, b := range acked {
		if !got[b] {
			t.Fatalf("acknowledged %s lost", b)
		}
	}
}

func TestAutoCreateInDevMode(t *testing.T) {
	c := newCluster(t, 1, 1, func(cfg *broker.Config) { cfg.AutoCreateTopics = true })
	c.master("broker-a")
	p := c.producer()
	defer p.Shutdown()
	clustertest.WaitFor(t, 5*time.Second, "group known to the name server", func() bool {
		g, err := p.r.clusterGroups(context.Background())
		return err == nil && len(g) == 1 && masterAddr(g[0].Replicas) != ""
	})
	r, err := p.Send(context.Background(), &Message{Topic: "fresh", Body: []byte("first")})
	if err != nil || !strings.HasPrefix(r.MsgID, "broker-a@") {
		t.Fatalf("first send to a new topic: %v %v", r, err)
	}
}

// A client given a dialer opens every connection through it, with the
// address as advertised: here a name server name only the dialer knows.
func TestDialerGetsAdvertisedAddresses(t *testing.T) {
	c := newCluster(t, 1, 3, nil)
	c.createTopic("dialed", 2)
	const nsName = "namesrv.raftmq.invalid:9876" // .invalid never resolves
	var mu sync.Mutex
	dialed := map[string]bool{}
	dial := func(ctx context.Context, addr string) (net.Conn, error) {
		mu.Lock()
		dialed[addr] = true
		mu.Unlock()
		if addr == nsName {
			addr = c.ns.Addr()
		}
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
	p, err := NewProducer(WithNameServers(nsName), WithLogger(quiet), WithDialer(dial))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown()
	if _, err := p.Send(context.Background(), &Message{Topic: "dialed", Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	master := c.brokers["broker-a"][c.master("broker-a")].Addr()
	mu.Lock()
	defer mu.Unlock()
	if !dialed[nsName] || !dialed[master] {
		t.Fatalf("dialed %v; want the name server's name and the master %s", dialed, master)
	}
}

// A master that accepts connections and never answers (frozen, or cut off
// the network) costs a send one attempt when an attempt timeout is set;
// without one the send spends its whole timeout there.
func TestAttemptTimeoutMovesPastASilentMaster(t *testing.T) {
	c := newCluster(t, 1, 3, nil)
	c.createTopic("silent", 1)
	old := c.brokers["broker-a"][c.master("broker-a")]
	silent := old.Addr()
	dial := dialSilencing(t, silent)
	bounded := c.producer(WithDialer(dial), WithSendTimeout(10*time.Second), WithAttemptTimeout(300*time.Millisecond), WithRetries(50))
	defer bounded.Shutdown()
	unbounded := c.producer(WithDialer(dial), WithSendTimeout(time.Second), WithRetries(50))
	defer unbounded.Shutdown()
	ctx := context.Background()
	for _, p := range []*Producer{bounded, unbounded} {
		if _, err := p.r.route(ctx, "silent"); err != nil { // cached: it names the old master
			t.Fatal(err)
		}
	}
	if err := old.TransferLeadership(); err != nil {
		t.Fatal(err)
	}
	if _, err := unbounded.Send(ctx, &Message{Topic: "silent", Body: []byte("x")}); err == nil {
		t.Fatal("a send without an attempt timeout got past the silent master within its 1 s")
	}
	if _, err := bounded.Send(ctx, &Message{Topic: "silent", Body: []byte("x")}); err != nil {
		t.Fatalf("a send with a 300 ms attempt timeout: %v", err)
	}
}

// After a master leaves a send without an answer, round-robin sends go to
// the other groups for a while instead of each paying an attempt there.
func TestRoundRobinSteersAroundASilentMaster(t *testing.T) {
	c := newCluster(t, 2, 1, nil)
	c.createTopic("steer", 2)
	silent := c.brokers["broker-a"][0].Addr()
	dial := dialSilencing(t, silent)
	failures := func(opts ...Option) int {
		p := c.producer(append([]Option{WithDialer(dial), WithAttemptTimeout(200 * time.Millisecond), WithRetries(0)}, opts...)...)
		defer p.Shutdown()
		n := 0
		for i := 0; i < 12; i++ {
			if _, err := p.Send(context.Background(), &Message{Topic: "steer", Body: []byte("x")}); err != nil {
				n++
			}
		}
		return n
	}
	if n := failures(); n != 1 {
		t.Fatalf("%d of 12 round-robin sends failed with fault isolation; want only the first to reach the silent master", n)
	}
	if n := failures(WithFaultIsolation(0)); n < 2 {
		t.Fatalf("%d of 12 sends failed without fault isolation; want every one that reached the silent master", n)
	}
}

// dialSilencing returns a dialer that connects the address silent to a
// listener that accepts connections and never answers (a frozen master,
// or one cut off the network), and every other address as it is.
func dialSilencing(t *testing.T, silent string) func(context.Context, string) (net.Conn, error) {
	hole, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	var done sync.WaitGroup
	done.Add(1)
	go func() {
		defer done.Done()
		for {
			conn, err := hole.Accept()
			if err != nil {
				return
			}
			held = append(held, conn) // read by nobody: the peer hears nothing
		}
	}()
	t.Cleanup(func() {
		hole.Close()
		done.Wait()
		for _, conn := range held {
			conn.Close()
		}
	})
	return func(ctx context.Context, addr string) (net.Conn, error) {
		if addr == silent {
			addr = hole.Addr().String()
		}
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
}

// unavailableNameServer answers every route query Unavailable, counting
// them: a name server that is up but cannot answer yet.
type unavailableNameServer struct {
	pb.UnimplementedNameServerServer
	calls atomic.Int32
}

func (n *unavailableNameServer) GetRoute(context.Context, *pb.GetRouteRequest) (*pb.RouteResponse, error) {
	n.calls.Add(1)
	return nil, status.Error(codes.Unavailable, "not ready")
}

// A client asks the name server that answered last first, so one that
// does not answer costs one call, not one per route query.
func TestRouteQueriesStickToTheNameServerThatAnswers(t *testing.T) {
	c := newCluster(t, 1, 1, nil)
	c.createTopic("sticky", 1)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	bad := &unavailableNameServer{}
	srv := grpc.NewServer()
	pb.RegisterNameServerServer(srv, bad)
	go srv.Serve(lis)
	defer srv.Stop()
	p, err := NewProducer(WithNameServers(lis.Addr().String(), c.ns.Addr()), WithLogger(quiet)) // the unavailable one first
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown()
	for i := 0; i < 5; i++ {
		p.r.invalidate("sticky")
		if _, err := p.r.route(context.Background(), "sticky"); err != nil {
			t.Fatal(err)
		}
	}
	if n := bad.calls.Load(); n != 1 {
		t.Fatalf("the unavailable name server was asked %d times, want once", n)
	}
}

// A name server that accepts connections and never answers (frozen, or cut
// off the network) delays a route query by nameServerHedge, not until it
// fails (2 to 3 s): the next name server is asked meanwhile, and its answer is
// taken. The compose drill that cut a name server off saw 3.5 s write gaps
// before.
func TestRouteQueriesGoOnPastASilentNameServer(t *testing.T) {
	c := newCluster(t, 1, 1, nil)
	c.createTopic("hedged", 1)
	silent := "127.0.0.1:1" // the dialer sends it to a listener that never answers
	p, err := NewProducer(WithNameServers(silent, c.ns.Addr()), WithDialer(dialSilencing(t, silent)), WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown()
	start := time.Now()
	if _, err := p.r.route(context.Background(), "hedged"); err != nil {
		t.Fatal(err)
	}
	// Without the hedge the query waits for the silent one to fail: its
	// connection attempt gives up after 2 s (reconnect.MinConnectTimeout),
	// the call after 3 s.
	if took := time.Since(start); took >= 1500*time.Millisecond {
		t.Fatalf("the route query took %v: it waited for the silent name server", took)
	}
	if n := p.r.lastNameServer.Load(); n != 1 {
		t.Fatalf("the next query starts at name server %d, want 1 (the one that answered)", n)
	}
}

// A producer lists a topic's write queues once per route it gets, and
// lists them again from a newer route (one more group, one fewer
// writable, another master).
func TestWriteQueuesFollowTheRoute(t *testing.T) {
	p, err := NewProducer(WithNameServers("127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.r.close()
	use := func(route *pb.RouteResponse) {
		p.r.mu.Lock()
		p.r.routes["t"] = &cachedRoute{route: route, fetched: time.Now()}
		p.r.mu.Unlock()
	}
	listed := func() []writeQueue {
		t.Helper()
		qs, err := p.writeQueues(context.Background(), "t")
		if err != nil {
			t.Fatal(err)
		}
		return qs
	}
	describe := func(qs []writeQueue) string {
		var b strings.Builder
		for _, q := range qs {
			fmt.Fprintf(&b, "%s/%d@%s ", q.Group, q.QueueID, q.master)
		}
		return b.String()
	}
	group := func(name string, queues int32, perm int32, master string) *pb.GroupRoute {
		return &pb.GroupRoute{Group: name, WriteQueues: queues, ReadQueues: queues, Perm: perm, MasterId: 1,
			Replicas: []*pb.ReplicaInfo{{Id: 1, GrpcAddress: master, Master: true}}}
	}
	rw := int32(message.PermRead | message.PermWrite)
	use(&pb.RouteResponse{Topic: "t", Groups: []*pb.GroupRoute{group("b", 1, rw, "b1"), group("a", 2, rw, "a1")}})
	first := listed()
	if got, want := describe(first), "a/0@a1 a/1@a1 b/0@b1 "; got != want {
		t.Fatalf("write queues %q, want %q", got, want)
	}
	if again := listed(); &again[0] != &first[0] {
		t.Fatal("the same route's write queues listed again")
	}
	for _, tc := range []struct {
		route *pb.RouteResponse
		want  string
	}{
		{&pb.RouteResponse{Topic: "t", Groups: []*pb.GroupRoute{group("a", 2, rw, "a1"), group("b", 1, rw, "b1"), group("c", 1, rw, "c1")}}, "a/0@a1 a/1@a1 b/0@b1 c/0@c1 "},
		{&pb.RouteResponse{Topic: "t", Groups: []*pb.GroupRoute{group("a", 2, message.PermRead, "a1"), group("b", 1, rw, "b1")}}, "b/0@b1 "},
		{&pb.RouteResponse{Topic: "t", Groups: []*pb.GroupRoute{group("a", 1, rw, "a2")}}, "a/0@a2 "},
	} {
		use(tc.route)
		if got := describe(listed()); got != tc.want {
			t.Fatalf("after a new route: write queues %q, want %q", got, tc.want)
		}
	}
}
