package broker

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/raftmq/raftmq/cluster/pb"
	"github.com/raftmq/raftmq/message"
)

// acked is what a sender was told about one message.
type acked struct {
	body  string
	queue int32
	res   *pb.SendResult
}

// sendRedirecting sends to replica i and follows NOT_LEADER answers to the
// master they name, until the send succeeds or d passes. It returns the
// last error when it never succeeded.
func (g *group) sendRedirecting(i int, req *pb.SendMessageRequest, d time.Duration) (*pb.SendMessageResponse, int, error) {
	deadline := time.Now().Add(d)
	var lastErr error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		resp, err := g.client(i).SendMessage(ctx, req)
		cancel()
		if err == nil {
			return resp, i, nil
		}
		lastErr = err
		reason, meta := ReasonOf(err)
		if reason != pb.ErrorReason_NOT_LEADER {
			// Unavailable (a stopped replica) or a timeout: try the next.
			i = (i + 1) % len(g.cfgs)
			time.Sleep(5 * time.Millisecond)
			continue
		}
		next := -1
		for j, c := range g.cfgs {
			if c.GRPCAddr == meta["leader"] && meta["leader"] != "" {
				next = j
			}
		}
		if next < 0 {
			next = (i + 1) % len(g.brokers)
			time.Sleep(5 * time.Millisecond)
		}
		i = next
	}
	return nil, i, lastErr
}

// sendBodies sends one message each, prefix-first to prefix-(last-1), to
// queue n%queues of topic through replica i (following redirects), and
// returns their acks.
func (g *group) sendBodies(i int, topic string, queues int32, prefix string, first, last int) []acked {
	g.t.Helper()
	var acks []acked
	for n := first; n < last; n++ {
		body, q := fmt.Sprintf("%s-%d", prefix, n), int32(n)%queues
		resp, _, err := g.sendRedirecting(i, oneMessage(topic, q, body), 5*time.Second)
		if err != nil {
			g.t.Fatalf("send %s: %v", body, err)
		}
		acks = append(acks, acked{body: body, queue: q, res: resp.Results[0]})
	}
	return acks
}

func oneMessage(topic string, queue int32, body string) *pb.SendMessageRequest {
	return &pb.SendMessageRequest{Topic: topic, QueueId: queue, Messages: []*pb.Message{{Body: []byte(body), Tags: "t", Keys: []string{body}}}}
}

// checkIdentical waits for quiescence, then checks every running replica
// holds the same commitlog bytes as the first, and every acked message
// under its message id, with its body.
func (g *group) checkIdentical(acks []acked) {
	g.t.Helper()
	// Quiesced, the replicas' commitlogs are compared as each stands; an
	// entry appended while they are read (a new leader's first entries,
	// after an election the race detector's pauses can bring about) makes
	// one a prefix of another: then they are read again. Different bytes
	// where both have some fail at once.
	anyRunning := false
	for i := range g.cfgs {
		anyRunning = anyRunning || g.running(i)
	}
	if !anyRunning {
		g.t.Fatal("no replica running")
	}
	var running []int
	waitFor(g.t, 20*time.Second, func() bool {
		g.quiesce()
		var ds []*pb.DescribeBrokerResponse
		if running, ds = g.describeRunning(); ds == nil {
			return false // one did not answer: ask again
		}
		ref := commitlogBytes(g.t, g.cfgs[running[0]], ds[0].CommitlogMaxOffset)
		equal := true
		for k, i := range running[1:] {
			log := commitlogBytes(g.t, g.cfgs[i], ds[k+1].CommitlogMaxOffset)
			if n := min(len(ref), len(log)); !bytes.Equal(ref[:n], log[:n]) {
				g.t.Fatalf("replica %d's commitlog (%d bytes) differs from replica %d's (%d bytes) within their first %d bytes",
					i+1, len(log), running[0]+1, len(ref), n)
			}
			equal = equal && len(log) == len(ref)
		}
		return equal
	})
	for _, i := range running {
		// The checksum the drills compare replicas by hashes those bytes.
		sum, err := g.client(i).ChecksumCommitlog(context.Background(), &pb.ChecksumCommitlogRequest{})
		if err != nil {
			g.t.Fatalf("replica %d: checksum: %v", i+1, err)
		}
		if want := sha256.Sum256(commitlogBytes(g.t, g.cfgs[i], sum.ToOffset)); sum.Sha256 != hex.EncodeToString(want[:]) {
			g.t.Fatalf("replica %d: checksum %s to offset %d, want %x", i+1, sum.Sha256, sum.ToOffset, want)
		}
		for _, a := range acks {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			resp, err := g.client(i).QueryMessageById(ctx, &pb.QueryMessageByIdRequest{MsgId: a.res.MsgId})
			cancel()
			if err != nil {
				g.t.Fatalf("replica %d lacks acked message %s: %v", i+1, a.res.MsgId, err)
			}
			r, _ := message.Decode(resp.Records[0])
			if string(r.Body) != a.body || r.QueueID != a.queue || r.QueueOffset != a.res.QueueOffset {
				g.t.Fatalf("replica %d: message %s is %q at %d@%d, acked as %q at %d@%d", i+1, a.res.MsgId, r.Body, r.QueueID, r.QueueOffset, a.body, a.queue, a.res.QueueOffset)
			}
		}
	}
}

func TestReplicatedSendsAreOnEveryReplica(t *testing.T) {
	g := newGroup(t, 3, nil)
	g.createTopic("orders", 4)
	m := g.master()
	var (
		mu   sync.Mutex
		acks []acked
		wg   sync.WaitGroup
	)
	for s := 0; s < 16; s++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			at := m
			for n := 0; n < 40; n++ {
				q := int32((s + n) % 4)
				req := oneMessage("orders", q, fmt.Sprintf("s%d-n%d", s, n))
				if n%5 == 0 { // some batches
					req.Messages = append(req.Messages, &pb.Message{Body: []byte(fmt.Sprintf("s%d-n%d-b", s, n))})
				}
				resp, i, err := g.sendRedirecting(at, req, 10*time.Second)
				if err != nil {
					t.Errorf("send: %v", err)
					return
				}
				at = i
				mu.Lock()
				for i, r := range resp.Results {
					acks = append(acks, acked{body: string(req.Messages[i].Body), queue: q, res: r})
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	// No two acks share a place. (Offsets are dense in the store; a send
	// retried after an unknown outcome may leave an unacked copy between
	// acked ones.)
	seen := map[int32]map[int64]bool{}
	for _, a := range acks {
		if seen[a.queue] == nil {
			seen[a.queue] = map[int64]bool{}
		}
		if seen[a.queue][a.res.QueueOffset] {
			t.Fatalf("queue %d offset %d acked twice", a.queue, a.res.QueueOffset)
		}
		seen[a.queue][a.res.QueueOffset] = true
	}
	g.checkIdentical(acks)
}

func TestSlaveAnswersNotLeaderWithMasterAddress(t *testing.T) {
	g := newGroup(t, 3, nil)
	g.createTopic("t1", 1)
	m := g.master()
	slave := (m + 1) % 3
	// The announcement reaches slaves through the log.
	waitFor(t, 5*time.Second, func() bool { d := g.describe(slave); return d != nil && d.MasterAddress != "" })
	_, err := g.client(slave).SendMessage(context.Background(), oneMessage("t1", 0, "x"))
	reason, meta := ReasonOf(err)
	if reason != pb.ErrorReason_NOT_LEADER || meta["leader"] != g.cfgs[m].GRPCAddr {
		t.Fatalf("send to a slave: %v (reason %v, leader %q, want %q)", err, reason, meta["leader"], g.cfgs[m].GRPCAddr)
	}
	resp, _, err := g.sendRedirecting(slave, oneMessage("t1", 0, "x"), 5*time.Second)
	if err != nil || len(resp.Results) != 1 {
		t.Fatalf("redirected send: %v", err)
	}
}

// load is senders sending one message at a time, round robin over a
// topic's queues, following NOT_LEADER redirects, recording every ack.
type load struct {
	mu      sync.Mutex
	acks    []acked
	wg      sync.WaitGroup
	stop    chan struct{}
	stopped sync.Once
}

func (g *group) startLoad(t *testing.T, senders int, topic string, queues int32, patience time.Duration) *load {
	l := &load{stop: make(chan struct{})}
	t.Cleanup(func() { l.end() }) // no sender outlives a failed test
	m := g.master()
	for s := 0; s < senders; s++ {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			at := m
			for n := 0; ; n++ {
				select {
				case <-l.stop:
					return
				default:
				}
				q := int32(n) % queues
				body := fmt.Sprintf("s%d-n%d", s, n)
				resp, i, err := g.sendRedirecting(at, oneMessage(topic, q, body), patience)
				if err != nil {
					t.Errorf("send %s never succeeded: %v", body, err)
					return
				}
				at = i
				l.mu.Lock()
				l.acks = append(l.acks, acked{body: body, queue: q, res: resp.Results[0]})
				l.mu.Unlock()
			}
		}()
	}
	return l
}

func (l *load) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acks)
}

// grow waits until n more messages were acknowledged.
func (l *load) grow(t *testing.T, n int) {
	t.Helper()
	before := l.count()
	waitFor(t, 15*time.Second, func() bool { return l.count() >= before+n })
}

// end stops the senders and returns the acks.
func (l *load) end() []acked {
	l.stopped.Do(func() { close(l.stop) })
	l.wg.Wait()
	return l.acks
}

// Kill the master while senders run: a new master takes over, senders
// redirect, and every acknowledged message is on every replica, including
// the old master once it is back.
func TestMasterKilledUnderLoad(t *testing.T) {
	g := newGroup(t, 3, nil)
	g.createTopic("load", 2)
	m := g.master()
	l := g.startLoad(t, 8, "load", 2, 10*time.Second)
	l.grow(t, 200)
	g.stop(m)
	if g.master() == m {
		t.Fatal("the stopped replica is still master")
	}
	l.grow(t, 200)
	g.start(m)
	l.grow(t, 200)
	acks := l.end()
	if t.Failed() {
		return
	}
	g.checkIdentical(acks)
}

// compactedLog makes a group snapshot and drop its Raft log often, so that
// a replica that misses a few hundred entries needs a snapshot.
func compactedLog(c *Config) {
	c.Raft.SnapshotThreshold = 32
	c.Raft.TrailingLogs = 8
	c.Raft.SnapshotInterval = 20 * time.Millisecond
	// The log drops compacted entries a segment at a time.
	c.Raft.LogSegmentSize = 16 << 10
}

// A replica that missed more than the master's retained Raft log gets a
// snapshot and copies the commitlog from a peer; it ends byte-identical.
func TestReplicaBehindRetainedLogCatchesUpBySnapshotAndCopy(t *testing.T) {
	g := newGroup(t, 3, compactedLog)
	g.createTopic("far", 2)
	m := g.master()
	behind := (m + 1) % 3
	left := g.describe(behind).AppliedIndex
	g.stop(behind)
	var acks []acked
	for n := 0; n < 300; n++ {
		req := &pb.SendMessageRequest{Topic: "far", QueueId: int32(n % 2)}
		for k := 0; k < 1+n%4; k++ {
			req.Messages = append(req.Messages, &pb.Message{Body: []byte(fmt.Sprintf("n%d-k%d-%s", n, k, bytes.Repeat([]byte("x"), n%300)))})
		}
		resp, _, err := g.sendRedirecting(m, req, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range resp.Results {
			acks = append(acks, acked{body: string(req.Messages[i].Body), queue: req.QueueId, res: r})
		}
	}
	// The master's log no longer holds what the stopped replica lacks.
	waitFor(t, 10*time.Second, func() bool { return !g.brokers[m].node.LogHolds(left + 1) })
	g.start(behind)
	g.checkIdentical(acks)
	if n := g.brokers[behind].catchUps.Load(); n == 0 {
		t.Fatal("the replica caught up without copying the commitlog: the test did not reach the snapshot path")
	}
}
