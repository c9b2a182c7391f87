package broker

import (
	"context"
	"strings"
	"testing"
	"time"

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
