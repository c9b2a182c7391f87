package broker

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/raftmq/raftmq/cluster/pb"
	"github.com/raftmq/raftmq/remoting"
)

// A group's committed offset is the master's to answer: a slave's table
// lags it (a replica just restarted holds its snapshot's offsets until it
// has replayed the log), and a consumer that starts a queue from a stale
// offset consumes again everything after it. Measured before the fix: the
// compose cluster's rolling-restart drill delivered 1442 duplicates for
// 9745 acked messages (CI at fc09a27). And the master answers with what
// a pull committed before it is replicated, and replicates it before it
// hands its role over.
func TestCommittedOffsetsAreTheMastersToAnswer(t *testing.T) {
	g := newGroup(t, 3, func(c *Config) { c.OffsetCommitInterval = time.Hour })
	g.createTopic("offsets", 1)
	m := g.master()
	slave := (m + 1) % 3
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := g.client(m).SendMessage(ctx, oneMessage("offsets", 0, "one")); err != nil {
		t.Fatal(err)
	}
	// The pull's commit waits for the (hour-long) commit interval.
	if _, err := g.client(m).PullMessage(ctx, &pb.PullMessageRequest{ConsumerGroup: "g", Topic: "offsets", QueueOffset: 1, CommitOffset: 1}); err != nil {
		t.Fatal(err)
	}
	q := &pb.QueryConsumerOffsetRequest{ConsumerGroup: "g", Topic: "offsets"}
	if r, err := g.client(m).QueryConsumerOffset(ctx, q); err != nil || r.Offset != 1 {
		t.Fatalf("the master answers %v, %v; want the pull's commit, 1", r, err)
	}
	_, err := g.client(slave).QueryConsumerOffset(ctx, q)
	wantStatus(t, err, codes.FailedPrecondition, pb.ErrorReason_NOT_LEADER)
	if _, meta := ReasonOf(err); meta["leader"] != g.cfgs[m].GRPCAddr {
		t.Fatalf("the slave's redirect names %q, want the master %s", meta["leader"], g.cfgs[m].GRPCAddr)
	}
	// A leadership transfer replicates the pending commits first: the next
	// master answers with the pull's commit too.
	if _, err := g.client(m).TransferLeader(ctx, &pb.TransferLeaderRequest{ToId: int32(slave + 1)}); err != nil {
		t.Fatal(err)
	}
	// Whoever leads next has the commit: the transfer's target, or a
	// replica an election moved the role on to (the packages' tests share
	// two cores, and CI saw one, 2026-12-05), since Raft elects only a
	// replica holding every committed entry.
	nm := g.master()
	if nm == m {
		t.Fatalf("replica %d is master again after handing the role to replica %d", m+1, slave+1)
	}
	if r, err := g.client(nm).QueryConsumerOffset(ctx, q); err != nil || r.Offset != 1 {
		t.Fatalf("the new master, replica %d, answers %v, %v; want the pull's commit, 1", nm+1, r, err)
	}
}

// RocketMQ's clients ask the master of the route they last polled, and a
// failed offset query leaves the queue unconsumed until their next
// rebalance: a caught-up slave answers them (remotingOffsetOf).
func TestACaughtUpSlaveAnswersRemotingOffsetQueries(t *testing.T) {
	g := newGroup(t, 3, nil)
	g.createTopic("rmq-offsets", 1)
	m := g.master()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := g.client(m).UpdateConsumerOffset(ctx, &pb.UpdateConsumerOffsetRequest{ConsumerGroup: "rg",
		Offsets: []*pb.QueueOffset{{Topic: "rmq-offsets", Offset: 5}}}); err != nil {
		t.Fatal(err)
	}
	g.quiesce()
	slave := (m + 1) % 3
	query := &remoting.Command{Code: remoting.CodeQueryConsumerOffset, Opaque: 1,
		ExtFields: map[string]string{"consumerGroup": "rg", "topic": "rmq-offsets", "queueId": "0"}}
	if resp := g.remotingCall(slave, query); resp.Code != 0 || resp.ExtFields["offset"] != "5" {
		t.Fatalf("the slave answers code %d %q, offset %q; want 0 and 5", resp.Code, resp.Remark, resp.ExtFields["offset"])
	}
}

// A group with no offset on a queue that still holds its first message,
// among the commitlog's newest writes, starts it at 0, as RocketMQ's
// brokers answer its clients (ConsumerManageProcessor.queryConsumerOffset):
// a group started after the first sends to a new topic reads them, where
// it would otherwise start at the end. Asked without zero_if_young (what
// `raftmq` shows as committed), or by a RocketMQ 5 client that sets
// setZeroIfNotFound=false, none is none.
func TestAGroupNewToAYoungQueueStartsItAtZero(t *testing.T) {
	g := newGroup(t, 3, func(c *Config) { c.YoungQueueBytes = 8 << 10 })
	g.createTopic("young", 1)
	g.createTopic("later", 1)
	m := g.master()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	query := func(zero bool) int64 {
		t.Helper()
		r, err := g.client(m).QueryConsumerOffset(ctx, &pb.QueryConsumerOffsetRequest{ConsumerGroup: "new", Topic: "young", ZeroIfYoung: zero})
		if err != nil {
			t.Fatal(err)
		}
		return r.Offset
	}
	remotingQuery := func(ext map[string]string) *remoting.Command {
		t.Helper()
		fields := map[string]string{"consumerGroup": "new", "topic": "young", "queueId": "0"}
		for k, v := range ext {
			fields[k] = v
		}
		return g.remotingCall(m, &remoting.Command{Code: remoting.CodeQueryConsumerOffset, Opaque: 1, ExtFields: fields})
	}
	if off := query(true); off != -1 {
		t.Fatalf("an empty queue answers %d, want -1: nothing to start at", off)
	}
	for i := range 3 {
		if _, err := g.client(m).SendMessage(ctx, oneMessage("young", 0, fmt.Sprint("first ", i))); err != nil {
			t.Fatal(err)
		}
	}
	if off := query(true); off != 0 {
		t.Fatalf("a young queue answers %d, want 0", off)
	}
	if off := query(false); off != -1 {
		t.Fatalf("without zero_if_young a young queue answers %d, want -1: nothing is committed", off)
	}
	if resp := remotingQuery(nil); resp.Code != 0 || resp.ExtFields["offset"] != "0" {
		t.Fatalf("RocketMQ's query of a young queue: code %d %q, offset %q; want 0 and 0", resp.Code, resp.Remark, resp.ExtFields["offset"])
	}
	if resp := remotingQuery(map[string]string{"setZeroIfNotFound": "false"}); resp.Code != remoting.CodeQueryNotFound {
		t.Fatalf("RocketMQ's query with setZeroIfNotFound=false: code %d %q; want QUERY_NOT_FOUND", resp.Code, resp.Remark)
	}
	// 16 KiB written since: the queue's first message is no longer among
	// the newest 8 KiB.
	body := strings.Repeat("x", 1024)
	for range 16 {
		if _, err := g.client(m).SendMessage(ctx, oneMessage("later", 0, body)); err != nil {
			t.Fatal(err)
		}
	}
	if off := query(true); off != -1 {
		t.Fatalf("a queue whose first message is 16 KiB behind the end answers %d, want -1", off)
	}
	if resp := remotingQuery(nil); resp.Code != remoting.CodeQueryNotFound {
		t.Fatalf("RocketMQ's query of a queue no longer young: code %d %q, offset %q; want QUERY_NOT_FOUND", resp.Code, resp.Remark, resp.ExtFields["offset"])
	}
	// A committed offset always wins.
	if _, err := g.client(m).UpdateConsumerOffset(ctx, &pb.UpdateConsumerOffsetRequest{ConsumerGroup: "new",
		Offsets: []*pb.QueueOffset{{Topic: "young", Offset: 2}}}); err != nil {
		t.Fatal(err)
	}
	if off := query(true); off != 2 {
		t.Fatalf("with an offset committed the query answers %d, want 2", off)
	}
}
