package broker

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/raftmq/raftmq/cluster/pb"
	"github.com/raftmq/raftmq/message"
)

// A producer's send repeated with the same unique keys (its retry after an
// unknown outcome) is answered with the stored copies' ids and offsets and
// stored once on every replica; a consumer's send-back of such a message,
// which keeps its key, is not taken for a retry.
func TestARepeatedSendIsStoredOnce(t *testing.T) {
	g := newGroup(t, 3, func(c *Config) {
		c.DelayLevels = "100ms"
		c.ScheduleInterval = 10 * time.Millisecond
	})
	g.createTopic("once", 2)
	m := g.master()
	ctx := context.Background()
	req := &pb.SendMessageRequest{Topic: "once", QueueId: 1, Records: records(t, "once", 1, "a", "b")}
	first, err := g.client(m).SendMessage(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	again, err := g.client(m).SendMessage(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	for i := range first.Results {
		if again.Results[i].MsgId != first.Results[i].MsgId || again.Results[i].QueueOffset != first.Results[i].QueueOffset {
			t.Fatalf("the repeated send was answered %v, the first %v", again.Results[i], first.Results[i])
		}
	}
	// The same key as a message, not a record, is a retry too.
	pbReq := &pb.SendMessageRequest{Topic: "once", QueueId: 1, Messages: []*pb.Message{{Body: []byte("a"), Properties: map[string]string{message.PropertyUniqKey: "u-a"}}}}
	if r, err := g.client(m).SendMessage(ctx, pbReq); err != nil || r.Results[0].MsgId != first.Results[0].MsgId {
		t.Fatalf("the retry as a message: %v, %v; stored as %s", r, err, first.Results[0].MsgId)
	}
	if _, err := g.client(m).ConsumerSendBack(ctx, &pb.ConsumerSendBackRequest{ConsumerGroup: "cg", MsgId: first.Results[0].MsgId, DelayLevel: 1}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool { return len(g.pullRecords(m, message.RetryTopic("cg"), 0)) == 1 })
	g.quiesce()
	for i := range g.brokers {
		if got := g.pullRecords(i, "once", 1); len(got) != 2 {
			t.Errorf("replica %d holds %d messages, want 2", i+1, len(got))
		}
	}
	g.checkIdentical(nil)
}

// A send repeated on the new master after the old one was killed (SIGKILL)
// is answered with the copies the old master stored: known by its unique
// keys, or by its producer id and sequence (producers.go).
func TestASendRetriedAcrossAMasterKillIsStoredOnce(t *testing.T) {
	for _, numbered := range []bool{false, true} {
		t.Run(map[bool]string{false: "keys", true: "producer ids"}[numbered], func(t *testing.T) {
			g := makeGroup(t, 3, true, nil)
			g.createTopic("once", 1)
			m := g.master()
			var producer int64
			if numbered {
				producer = g.initProducer(m, "once", 0).ProducerId
			}
			var reqs []*pb.SendMessageRequest
			var acks []*pb.SendMessageResponse
			for i := range 20 {
				req := &pb.SendMessageRequest{Topic: "once", Records: records(t, "once", 0, fmt.Sprint("x", i), fmt.Sprint("y", i)),
					ProducerId: producer, Sequence: int64(2 * i)}
				resp, _, err := g.sendRedirecting(m, req, 5*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				reqs, acks = append(reqs, req), append(acks, resp)
			}
			g.procs[m].Process.Signal(syscall.SIGKILL)
			g.procs[m].Wait()
			g.procs[m] = nil
			for i, req := range reqs {
				resp, _, err := g.sendRedirecting((m+1)%3, req, 10*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				sameResults(t, fmt.Sprint("send ", i, " retried"), resp, acks[i])
			}
			g.start(m)
			if got := len(g.pullRecords(g.master(), "once", 0)); got != 40 {
				t.Fatalf("%d messages stored, want 40", got)
			}
			g.checkIdentical(nil)
		})
	}
}
