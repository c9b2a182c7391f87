package broker

import (
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/pb"
)

// One client holding all the pulls it may does not take long polling from
// another: past its own cap its pulls are answered at once, while another
// client's pull is still held.
func TestOneClientCannotTakeAllHeldPulls(t *testing.T) {
	g := newGroup(t, 1, func(c *Config) { c.MaxHeldPulls, c.MaxHeldPullsPerClient = 10, 2 })
	g.createTopic("lp", 1)
	req := &pb.PullMessageRequest{ConsumerGroup: "cg", Topic: "lp", SuspendTimeoutMs: 20_000}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hog := g.client(0)
	for range 2 {
		go hog.PullMessage(ctx, req)
	}
	waitFor(t, 5*time.Second, func() bool { return g.brokers[0].holds.size() == 2 })
	resp, err := hog.PullMessage(context.Background(), req)
	if err != nil || resp.Status != pb.PullStatus_PULL_NO_NEW_MESSAGE {
		t.Fatalf("the hog's pull over its cap: %+v %v", resp, err)
	}
	if g.brokers[0].holds.size() != 2 {
		t.Fatalf("%d pulls held after the hog's third, want 2", g.brokers[0].holds.size())
	}

	conn, err := grpc.NewClient(g.cfgs[0].GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	other := make(chan error, 1)
	go func() {
		_, err := pb.NewBrokerClient(conn).PullMessage(ctx, req)
		other <- err
	}()
	waitFor(t, 5*time.Second, func() bool { return g.brokers[0].holds.size() == 3 })
	cancel()
	if err := <-other; status.Code(err) != codes.Canceled {
		t.Fatalf("the other client's held pull: %v, want it held until cancelled", err)
	}
}

// Offsets are taken only for queues that exist, a bounded number at once:
// an offset flood for made-up topics is refused and stores nothing.
func TestOffsetCommitsOnlyForQueuesThatExist(t *testing.T) {
	g := newGroup(t, 1, func(c *Config) { c.MaxOffsetsPerCommit = 8 })
	g.createTopic("real", 2)
	c := g.client(0)
	ctx := context.Background()
	commit := func(offs ...*pb.QueueOffset) error {
		_, err := c.UpdateConsumerOffset(ctx, &pb.UpdateConsumerOffsetRequest{ConsumerGroup: "cg", Offsets: offs})
		return err
	}
	if err := commit(&pb.QueueOffset{Topic: "real", QueueId: 1, Offset: 5}); err != nil {
		t.Fatal(err)
	}
	var flood []*pb.QueueOffset
	for i := range 9 {
		flood = append(flood, &pb.QueueOffset{Topic: "real", QueueId: int32(i % 2), Offset: 1})
	}
	for name, tc := range map[string]struct {
		offs   []*pb.QueueOffset
		code   codes.Code
		reason pb.ErrorReason
	}{
		"a topic that does not exist": {[]*pb.QueueOffset{{Topic: "made-up", QueueId: 0, Offset: 1}}, codes.NotFound, pb.ErrorReason_TOPIC_NOT_FOUND},
		"a queue past the topic's":    {[]*pb.QueueOffset{{Topic: "real", QueueId: 2, Offset: 1}}, codes.InvalidArgument, pb.ErrorReason_ILLEGAL_ARGUMENT},
		"over the cap":                {flood, codes.InvalidArgument, pb.ErrorReason_ILLEGAL_ARGUMENT},
	} {
		err := commit(tc.offs...)
		if reason, _ := ReasonOf(err); status.Code(err) != tc.code || reason != tc.reason {
			t.Errorf("%s: %v (%v), want %v %v", name, err, reason, tc.code, tc.reason)
		}
	}
	offs := g.brokers[0].meta.committedOffsets()
	if len(offs) != 1 {
		t.Fatalf("committed offsets %v, want only real@1", offs)
	}
}

// Bad input is echoed at most as a short prefix: a 100 kB key comes back as
// an error of at most cluster.MaxErrorMessage bytes.
func TestErrorsEchoAShortPrefixOfBadInput(t *testing.T) {
	g := newGroup(t, 1, nil)
	g.createTopic("echo", 1)
	huge := strings.Repeat("k", 100_000) // over the 64 KiB a key or property may have; under the request size limit
	for name, req := range map[string]*pb.SendMessageRequest{
		"topic":    {Topic: huge, Messages: []*pb.Message{{Body: []byte("x")}}},
		"key":      {Topic: "echo", Messages: []*pb.Message{{Body: []byte("x"), Keys: []string{huge}}}},
		"property": {Topic: "echo", Messages: []*pb.Message{{Body: []byte("x"), Properties: map[string]string{huge: "v"}}}},
	} {
		_, err := g.client(0).SendMessage(context.Background(), req)
		st, _ := status.FromError(err)
		if st.Code() != codes.InvalidArgument || len(st.Message()) > cluster.MaxErrorMessage {
			t.Errorf("%s of 100 kB: %v, a message of %d bytes", name, st.Code(), len(st.Message()))
		}
	}
}

// One connection runs at most MaxConcurrentStreams RPCs at once: with its
// streams taken by held pulls, its next call waits (gRPC queues it until
// a stream frees) while another connection is served; when one held pull
// ends, the waiting call runs.
func TestStreamsPerConnectionAreCapped(t *testing.T) {
	g := newGroup(t, 1, func(c *Config) { c.MaxConcurrentStreams = 2 })
	g.createTopic("lp", 1)
	hold := &pb.PullMessageRequest{ConsumerGroup: "cg", Topic: "lp", SuspendTimeoutMs: 20_000}
	conn, err := grpc.NewClient(g.cfgs[0].GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hog := pb.NewBrokerClient(conn)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first, firstDone := context.WithCancel(ctx)
	defer firstDone()
	go hog.PullMessage(first, hold)
	go hog.PullMessage(ctx, hold)
	waitFor(t, 5*time.Second, func() bool { return g.brokers[0].holds.size() == 2 })

	queued := make(chan error, 1)
	go func() {
		_, err := hog.GetQueueOffsets(ctx, &pb.GetQueueOffsetsRequest{Topic: "lp"})
		queued <- err
	}()
	// While the hog's call waits for a stream, another connection is
	// served at once.
	if _, err := g.client(0).GetQueueOffsets(ctx, &pb.GetQueueOffsetsRequest{Topic: "lp"}); err != nil {
		t.Fatalf("another connection: %v", err)
	}
	select {
	case err := <-queued:
		t.Fatalf("a third RPC ran on a connection capped at 2 streams: %v", err)
	case <-time.After(200 * time.Millisecond): // it must still be waiting; nothing to poll for
	}
	firstDone() // a held pull ends: its stream frees
	select {
	case err := <-queued:
		if err != nil {
			t.Fatalf("the waiting RPC, once a stream freed: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting RPC did not run after a stream freed")
	}
}

// The broker serves at most MaxConnections connections: the next one is
// not served until one closes.
func TestConnectionsAreCapped(t *testing.T) {
	g := newGroup(t, 1, func(c *Config) { c.MaxConnections = 2 })
	g.createTopic("c", 1) // over g's own connection: one of the two
	ctx := context.Background()
	dial := func() (*grpc.ClientConn, pb.BrokerClient) {
		conn, err := grpc.NewClient(g.cfgs[0].GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn, pb.NewBrokerClient(conn)
	}
	second, c2 := dial()
	if _, err := c2.GetQueueOffsets(ctx, &pb.GetQueueOffsetsRequest{Topic: "c"}); err != nil {
		t.Fatalf("the second connection: %v", err)
	}
	_, c3 := dial()
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := c3.GetQueueOffsets(short, &pb.GetQueueOffsetsRequest{Topic: "c"}); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("a third connection to a broker capped at 2: %v, want it to wait (DeadlineExceeded)", err)
	}
	second.Close()
	waitFor(t, 5*time.Second, func() bool {
		short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		_, err := c3.GetQueueOffsets(short, &pb.GetQueueOffsetsRequest{Topic: "c"})
		return err == nil
	})
}

// The broker's gRPC server grants each stream StreamWindow and each
// connection ConnWindow as static windows, announced as the connection
// opens: the stream's in its SETTINGS, the connection's as a WINDOW_UPDATE
// over HTTP/2's initial 64 KiB. gRPC's dynamic windows, its default,
// announce neither: they start at 64 KiB and grow behind bandwidth pings.
func TestFlowControlWindowsAreStatic(t *testing.T) {
	g := newGroup(t, 1, func(c *Config) { c.StreamWindow, c.ConnWindow = 2<<20, 12<<20 })
	stream, conn := announcedWindows(t, g.cfgs[0].GRPCAddr)
	if stream != 2<<20 || conn != 12<<20 {
		t.Fatalf("the broker announced windows of %d bytes a stream and %d a connection, want %d and %d", stream, conn, 2<<20, 12<<20)
	}
}

// announcedWindows opens an HTTP/2 connection to addr and reads, up to
// the server's acknowledgement of the client's settings, the windows the
// server grants: a stream's and the connection's.
func announcedWindows(t *testing.T, addr string) (stream, conn uint32) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	stream, conn = 65535, 65535 // HTTP/2's initial windows
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading the server's first frames: %v", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if f.IsAck() {
				return stream, conn
			}
			if v, ok := f.Value(http2.SettingInitialWindowSize); ok {
				stream = v
			}
			if err := fr.WriteSettingsAck(); err != nil {
				t.Fatal(err)
			}
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				conn += f.Increment
			}
		}
	}
}

// Windows outside 64 KiB to 1 GiB are refused as the broker's
// configuration is read, not left to gRPC, which ignores a small one.
func TestFlowControlWindowsOutOfBoundsAreRefused(t *testing.T) {
	for _, tc := range []struct {
		name         string
		stream, conn int
	}{
		{"stream under 64 KiB", 32 << 10, 8 << 20},
		{"connection under 64 KiB", 1 << 20, 1000},
		{"stream over 1 GiB", 2 << 30, 8 << 20},
		{"negative connection", 1 << 20, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t.TempDir(), 1, []string{"127.0.0.1:1"}, []string{"127.0.0.1:2"})
			cfg.StreamWindow, cfg.ConnWindow = tc.stream, tc.conn
			if _, err := cfg.withDefaults(); err == nil || !strings.Contains(err.Error(), "StreamWindow and ConnWindow") {
				t.Fatalf("windows %d and %d: %v, want them refused", tc.stream, tc.conn, err)
			}
		})
	}
}
