package broker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/raftmq/raftmq/cluster/pb"
	"github.com/raftmq/raftmq/message"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Sent-back messages wait in the schedule topic, then move to the group's
// retry topic exactly once, even when the master changes while they move;
// past the maximum they go to the dead-letter topic.
func TestScheduledRetriesMoveExactlyOnceAcrossFailover(t *testing.T) {
	g := newGroup(t, 3, func(c *Config) {
		c.DelayLevels = "100ms 200ms 300ms 400ms 500ms"
		c.ScheduleInterval = 10 * time.Millisecond
		c.MaxReconsumeTimes = 3
	})
	g.createTopic("work", 1)
	m := g.master()
	ctx := context.Background()
	var ids []string
	for i := 0; i < 60; i++ {
		resp, _, err := g.sendRedirecting(m, oneMessage("work", 0, fmt.Sprint("job-", i)), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, resp.Results[0].MsgId)
	}
	for _, id := range ids {
		if _, err := g.client(m).ConsumerSendBack(ctx, &pb.ConsumerSendBackRequest{ConsumerGroup: "cg", MsgId: id, DelayLevel: 1 + int32(len(id)%5)}); err != nil {
			t.Fatal(err)
		}
	}
	// Move the master while messages come due.
	time.Sleep(150 * time.Millisecond) // some due, some not: a chosen moment, not a wait for a condition
	g.stop(m)
	nm := g.master()
	g.start(m)
	// Every message reaches the retry topic once.
	origins := map[string]int{}
	var retryCopy string
	waitFor(t, 10*time.Second, func() bool {
		origins = map[string]int{}
		for off := int64(0); ; {
			res, err := g.client(nm).PullMessage(ctx, &pb.PullMessageRequest{ConsumerGroup: "cg", Topic: message.RetryTopic("cg"), QueueOffset: off, MaxMessages: 32})
			if err != nil || res.Status != pb.PullStatus_PULL_FOUND {
				break
			}
			for _, raw := range res.Records {
				r, _ := message.Decode(raw)
				origins[r.Properties[message.PropertyOriginMsgID]]++
				retryCopy = message.FormatID("broker-a", r.Offset)
				if r.Properties[message.PropertyReconsumeTimes] != "1" || r.Properties[message.PropertyRetryTopic] != "work" || r.Properties[message.PropertyRealTopic] != "" {
					t.Errorf("moved message properties %v", r.Properties)
				}
			}
			off = res.NextBeginOffset
		}
		return len(origins) == len(ids)
	})
	for _, id := range ids {
		if origins[id] != 1 {
			t.Fatalf("message %s moved %d times", id, origins[id])
		}
	}
	g.checkIdentical(nil)

	// Past the maximum: straight to the dead-letter topic. The retry copy
	// was sent back once; a limit of 1 sends its next send-back there.
	// (Asked of whoever leads now: checkIdentical may have waited out an
	// election under the race detector.)
	if _, err := g.client(g.master()).ConsumerSendBack(ctx, &pb.ConsumerSendBackRequest{ConsumerGroup: "cg", MsgId: retryCopy, MaxReconsumeTimes: 1}); err != nil {
		t.Fatal(err)
	}
	// (Dead letters are read as such: the topic is neither readable nor
	// writable otherwise.)
	waitFor(t, 5*time.Second, func() bool {
		res, err := g.client(nm).PullMessage(ctx, &pb.PullMessageRequest{ConsumerGroup: "cg", Topic: message.DLQTopic("cg"), DeadLetters: true})
		return err == nil && res.Status == pb.PullStatus_PULL_FOUND && len(res.Records) == 1
	})
	if _, err := g.client(nm).PullMessage(ctx, &pb.PullMessageRequest{ConsumerGroup: "cg", Topic: message.DLQTopic("cg")}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a plain pull of the dead-letter topic: %v", err)
	}
	if _, err := g.client(nm).SendMessage(ctx, oneMessage(message.DLQTopic("cg"), 0, "x")); err == nil {
		t.Fatal("a producer wrote into the dead-letter topic")
	}
	if _, err := g.client(nm).SendMessage(ctx, oneMessage(message.ScheduleTopic, 0, "x")); err == nil {
		t.Fatal("a producer wrote into the schedule topic")
	}
}
