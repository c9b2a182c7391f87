package broker

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftmq/raftmq/cluster/pb"
)

// Bad requests get a status with a reason, store nothing, and the broker
// keeps serving.
func TestBadInputGetsClearStatusAndStoresNothing(t *testing.T) {
	g := newGroup(t, 1, nil)
	g.createTopic("good", 2)
	c := g.client(0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	before := g.describe(0).CommitlogMaxOffset

	big := bytes.Repeat([]byte("x"), g.cfgs[0].MaxMessageSize+1)
	sends := []struct {
		name   string
		req    *pb.SendMessageRequest
		code   codes.Code
		reason pb.ErrorReason
	}{
		{"empty topic", &pb.SendMessageRequest{Messages: []*pb.Message{{Body: []byte("x")}}}, codes.InvalidArgument, pb.ErrorReason_ILLEGAL_NAME},
		{"illegal topic", oneMessage("a/b", 0, "x"), codes.InvalidArgument, pb.ErrorReason_ILLEGAL_NAME},
		{"long topic", oneMessage(strings.Repeat("t", 128), 0, "x"), codes.InvalidArgument, pb.ErrorReason_ILLEGAL_NAME},
		{"unknown topic", oneMessage("nope", 0, "x"), codes.NotFound, pb.ErrorReason_TOPIC_NOT_FOUND},
		{"no messages", &pb.SendMessageRequest{Topic: "good"}, codes.InvalidArgument, pb.ErrorReason_ILLEGAL_ARGUMENT},
		{"negative queue", oneMessage("good", -1, "x"), codes.InvalidArgument, pb.ErrorReason_ILLEGAL_ARGUMENT},
		{"queue past the topic's", oneMessage("good", 2, "x"), codes.InvalidArgument, pb.ErrorReason_ILLEGAL_ARGUMENT},
		{"empty body", oneMessage("good", 0, ""), codes.InvalidArgument, pb.ErrorReason_ILLEGAL_ARGUMENT},
		{"oversized body", &pb.SendMessageRequest{Topic: "good", Messages: []*pb.Message{{Body: big}}}, codes.InvalidArgument, pb.ErrorReason_MESSAGE_TOO_LARGE},
		{"batch with one bad message", &pb.SendMessageRequest{Topic: "good", Messages: []*pb.Message{{Body: []byte("ok")}, {Body: nil}}}, codes.InvalidArgument, pb.ErrorReason_ILLEGAL_ARGUMENT},
		{"message of another topic", &pb.SendMessageRequest{Topic: "good", Messages: []*pb.Message{{Topic: "other", Body: []byte("x")}}}, codes.InvalidArgument, pb.ErrorReason_ILLEGAL_ARGUMENT},
		{"nil message", &pb.SendMessageRequest{Topic: "good", Messages: []*pb.Message{nil}}, codes.InvalidArgument, pb.ErrorReason_ILLEGAL_ARGUMENT},
		{"key too long", &pb.SendMessageRequest{Topic: "good", Messages: []*pb.Message{{Body: []byte("x"), Keys: []string{strings.Repeat("k", 70000)}}}}, codes.InvalidArgument, pb.ErrorReason_ILLEGAL_ARGUMENT},
	}
	for _, tc := range sends {
		_, err := c.SendMessage(ctx, tc.req)
		if reason, _ := ReasonOf(err); status.Code(err) != tc.code || reason != tc.reason {
			t.Errorf("%s: %v (reason %v), want %v %v", tc.name, err, reason, tc.code, tc.reason)
		}
	}
	checksums := []struct {
		name string
		req  *pb.ChecksumCommitlogRequest
		code codes.Code
	}{
		{"negative offset", &pb.ChecksumCommitlogRequest{FromOffset: -1}, codes.InvalidArgument},
		{"to below from", &pb.ChecksumCommitlogRequest{FromOffset: 10, ToOffset: 5}, codes.InvalidArgument},
		{"from inside a batch", &pb.ChecksumCommitlogRequest{FromOffset: 1}, codes.NotFound},
		{"from past the end", &pb.ChecksumCommitlogRequest{FromOffset: 1 << 40}, codes.NotFound},
	}
	for _, tc := range checksums {
		if _, err := c.ChecksumCommitlog(ctx, tc.req); status.Code(err) != tc.code {
			t.Errorf("checksum, %s: %v, want %v", tc.name, err, tc.code)
		}
	}
	pulls := []struct {
		name string
		req  *pb.PullMessageRequest
		code codes.Code
	}{
		{"bad group", &pb.PullMessageRequest{ConsumerGroup: "", Topic: "good"}, codes.InvalidArgument},
		{"unknown topic", &pb.PullMessageRequest{ConsumerGroup: "cg", Topic: "nope"}, codes.NotFound},
		{"negative offset", &pb.PullMessageRequest{ConsumerGroup: "cg", Topic: "good", QueueOffset: -1}, codes.InvalidArgument},
		{"negative max", &pb.PullMessageRequest{ConsumerGroup: "cg", Topic: "good", MaxMessages: -3}, codes.InvalidArgument},
		{"negative suspend", &pb.PullMessageRequest{ConsumerGroup: "cg", Topic: "good", SuspendTimeoutMs: -1}, codes.InvalidArgument},
		{"queue out of range", &pb.PullMessageRequest{ConsumerGroup: "cg", Topic: "good", QueueId: 7}, codes.InvalidArgument},
		{"bad subscription", &pb.PullMessageRequest{ConsumerGroup: "cg", Topic: "good", Subscription: "A || || B"}, codes.InvalidArgument},
	}
	for _, tc := range pulls {
		if _, err := c.PullMessage(ctx, tc.req); status.Code(err) != tc.code {
			t.Errorf("pull %s: %v, want %v", tc.name, err, tc.code)
		}
	}
	for name, call := range map[string]func() error{
		"topic with no queues": func() error {
			_, err := c.CreateTopic(ctx, &pb.CreateTopicRequest{Topic: &pb.TopicConfig{Name: "z", ReadQueues: 0, WriteQueues: 1}})
			return err
		},
		"topic with too many queues": func() error {
			_, err := c.CreateTopic(ctx, &pb.CreateTopicRequest{Topic: &pb.TopicConfig{Name: "z", ReadQueues: 1000, WriteQueues: 1000}})
			return err
		},
		"topic exists": func() error {
			_, err := c.CreateTopic(ctx, &pb.CreateTopicRequest{Topic: &pb.TopicConfig{Name: "good", ReadQueues: 1, WriteQueues: 1}})
			return err
		},
		"bad message id": func() error {
			_, err := c.QueryMessageById(ctx, &pb.QueryMessageByIdRequest{MsgId: "garbage"})
			return err
		},
		"message id of another group": func() error {
			_, err := c.QueryMessageById(ctx, &pb.QueryMessageByIdRequest{MsgId: "broker-z@0000000000000000"})
			return err
		},
		"message id past the end": func() error {
			_, err := c.QueryMessageById(ctx, &pb.QueryMessageByIdRequest{MsgId: "broker-a@00000000FFFFFFFF"})
			return err
		},
		"copy from a negative offset": func() error {
			s, err := c.CopyCommitlog(ctx, &pb.CopyCommitlogRequest{FromOffset: -5})
			if err == nil {
				_, err = s.Recv()
			}
			return err
		},
		"delete unknown topic": func() error {
			_, err := c.DeleteTopic(ctx, &pb.DeleteTopicRequest{Name: "nope"})
			return err
		},
	} {
		if err := call(); err == nil || status.Code(err) == codes.Unknown || status.Code(err) == codes.Internal {
			t.Errorf("%s: %v", name, err)
		}
	}
	if after := g.describe(0).CommitlogMaxOffset; after != before {
		t.Fatalf("bad input stored something: commitlog %d -> %d", before, after)
	}
	// Still serving.
	resp, err := c.SendMessage(ctx, oneMessage("good", 1, "fine"))
	if err != nil || len(resp.Results) != 1 {
		t.Fatalf("good send after bad ones: %v", err)
	}
	o, err := c.PullMessage(ctx, &pb.PullMessageRequest{ConsumerGroup: "cg", Topic: "good", QueueId: 1})
	if err != nil || o.Status != pb.PullStatus_PULL_FOUND || len(o.Records) != 1 {
		t.Fatalf("pull after bad input: %v %v", o, err)
	}
}

// Offsets commit through Raft and survive a change of master.
func TestConsumerOffsetsSurviveFailover(t *testing.T) {
	g := newGroup(t, 3, nil)
	g.createTopic("off", 2)
	m := g.master()
	ctx := context.Background()
	if _, err := g.client(m).UpdateConsumerOffset(ctx, &pb.UpdateConsumerOffsetRequest{ConsumerGroup: "cg",
		Offsets: []*pb.QueueOffset{{Topic: "off", QueueId: 1, Offset: 42}}}); err != nil {
		t.Fatal(err)
	}
	// An offset riding on a pull is committed too, shortly after.
	if _, err := g.client(m).PullMessage(ctx, &pb.PullMessageRequest{ConsumerGroup: "cg", Topic: "off", QueueId: 0, CommitOffset: 7}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, func() bool { // replicated: every replica's table has it
		for _, b := range g.brokers {
			if b.meta.offset("cg", "off", 0) != 7 {
				return false
			}
		}
		return true
	})
	g.quiesce()
	g.stop(m)
	nm := g.master()
	for q, want := range map[int32]int64{0: 7, 1: 42} {
		r, err := g.client(nm).QueryConsumerOffset(ctx, &pb.QueryConsumerOffsetRequest{ConsumerGroup: "cg", Topic: "off", QueueId: q})
		if err != nil || r.Offset != want {
			t.Fatalf("queue %d offset on the new master: %v %v, want %d", q, r, err, want)
		}
	}
	if r, _ := g.client(nm).QueryConsumerOffset(ctx, &pb.QueryConsumerOffsetRequest{ConsumerGroup: "other", Topic: "off"}); r.Offset != -1 {
		t.Fatalf("a group with no offset has %d", r.Offset)
	}
}

func TestHeartbeatsAndLocks(t *testing.T) {
	g := newGroup(t, 1, nil)
	g.createTopic("ord", 4)
	c := g.client(0)
	ctx := context.Background()
	hb := func(client string) *pb.HeartbeatResponse {
		r, err := c.Heartbeat(ctx, &pb.HeartbeatRequest{ClientId: client, Groups: []*pb.ConsumerGroupInfo{{Group: "cg", Mode: pb.ConsumeMode_CLUSTERING,
			Subscriptions: []*pb.Subscription{{Topic: "ord", Expression: "*"}}}}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	hb("c1")
	if r := hb("c1"); len(r.ChangedGroups) != 0 {
		t.Fatalf("no change, yet %v", r.ChangedGroups)
	}
	hb("c2")
	if r := hb("c1"); len(r.ChangedGroups) != 1 {
		t.Fatalf("c2 joined, c1 told %v", r.ChangedGroups)
	}
	l, err := c.GetConsumerList(ctx, &pb.GetConsumerListRequest{ConsumerGroup: "cg"})
	if err != nil || len(l.ClientIds) != 2 || l.ClientIds[0] != "c1" {
		t.Fatalf("consumer list: %v %v", l, err)
	}
	got, err := c.LockQueues(ctx, &pb.LockQueuesRequest{ConsumerGroup: "cg", ClientId: "c1", Topic: "ord", QueueIds: []int32{0, 1}})
	if err != nil || len(got.LockedQueueIds) != 2 {
		t.Fatalf("lock: %v %v", got, err)
	}
	got, _ = c.LockQueues(ctx, &pb.LockQueuesRequest{ConsumerGroup: "cg", ClientId: "c2", Topic: "ord", QueueIds: []int32{1, 2}})
	if len(got.LockedQueueIds) != 1 || got.LockedQueueIds[0] != 2 {
		t.Fatalf("c2 locked %v; queue 1 is c1's", got.LockedQueueIds)
	}
	c.UnlockQueues(ctx, &pb.UnlockQueuesRequest{ConsumerGroup: "cg", ClientId: "c1", Topic: "ord", QueueIds: []int32{1}})
	got, _ = c.LockQueues(ctx, &pb.LockQueuesRequest{ConsumerGroup: "cg", ClientId: "c2", Topic: "ord", QueueIds: []int32{1}})
	if len(got.LockedQueueIds) != 1 {
		t.Fatal("queue 1 not lockable after unlock")
	}
}

// An idle consumer's pulls carry the same offset again and again; only a
// change costs a Raft entry.
func TestUnchangedRidingOffsetsAreNotReplicatedAgain(t *testing.T) {
	g := newGroup(t, 1, func(c *Config) { c.OffsetCommitInterval = time.Hour }) // only this test flushes
	g.createTopic("idle", 1)
	b := g.brokers[g.master()]
	ctx := context.Background()
	b.offsets.add("cg", "idle", 0, 3)
	b.offsets.flush(ctx)
	if got := b.meta.offset("cg", "idle", 0); got != 3 {
		t.Fatalf("offset %d after the first commit, want 3", got)
	}
	// The log's last index, not the applied index: Raft advances the
	// latter just after the apply's future returns.
	before := b.Raft().LastIndex()
	for i := 0; i < 3; i++ {
		b.offsets.add("cg", "idle", 0, 3)
		b.offsets.flush(ctx)
	}
	if after := b.Raft().LastIndex(); after != before {
		t.Fatalf("unchanged offsets took Raft entries: last index %d -> %d", before, after)
	}
	b.offsets.add("cg", "idle", 0, 4)
	b.offsets.flush(ctx)
	if after := b.Raft().LastIndex(); after != before+1 || b.meta.offset("cg", "idle", 0) != 4 {
		t.Fatalf("a changed offset: last index %d -> %d, offset %d", before, after, b.meta.offset("cg", "idle", 0))
	}
}
