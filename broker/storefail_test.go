package broker

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftmq/raftmq/cluster/pb"
	"github.com/raftmq/raftmq/remoting"
)

// errorLog records the Error lines of a logger and those derived from it.
type errorLog struct {
	mu    *sync.Mutex
	lines *[]map[string]string // message under "msg", then the attributes
	with  []slog.Attr
}

func newErrorLog() errorLog { return errorLog{mu: &sync.Mutex{}, lines: new([]map[string]string)} }

func (l errorLog) Enabled(_ context.Context, level slog.Level) bool { return level >= slog.LevelError }

func (l errorLog) Handle(_ context.Context, r slog.Record) error {
	line := map[string]string{"msg": r.Message}
	for _, a := range l.with {
		line[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool {
		line[a.Key] = a.Value.String()
		return true
	})
	l.mu.Lock()
	*l.lines = append(*l.lines, line)
	l.mu.Unlock()
	return nil
}

func (l errorLog) WithAttrs(as []slog.Attr) slog.Handler {
	l.with = append(slices.Clone(l.with), as...)
	return l
}

func (l errorLog) WithGroup(string) slog.Handler { return l }

func (l errorLog) all() []map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(*l.lines)
}

// faultyGroup is a group of 3 whose replicas' stores fail the system
// call op with errno while their broken flag is set (storage's DiskFault:
// the real store, told that the disk refused), each logging its Error
// lines to its own errorLog.
type faultyGroup struct {
	*group
	broken [3]atomic.Bool
	logs   [3]errorLog
}

func newFaultyGroup(t *testing.T, op string, errno syscall.Errno, tweak func(*Config)) *faultyGroup {
	fg := &faultyGroup{}
	for i := range fg.logs {
		fg.logs[i] = newErrorLog()
	}
	fg.group = newGroup(t, 3, func(c *Config) {
		i := c.ReplicaID - 1
		c.HTTPAddr = "127.0.0.1:0"
		c.Logger = slog.New(fg.logs[i])
		c.Store.DiskFault = func(o, path string) error {
			if o == op && fg.broken[i].Load() {
				return errno
			}
			return nil
		}
		if tweak != nil {
			tweak(c)
		}
	})
	return fg
}

func (g *group) metric(i int, name string) string {
	return fmt.Sprintf(`%s{group="broker-a",replica="%d"}`, name, i+1)
}

// waitFailed waits for replica i to report its failed store on /healthz
// and in its metrics, and checks what it says: the failure names the file
// and the error, the replica is not master, and its Raft member is shut
// down.
func (g *faultyGroup) waitFailed(t *testing.T, i int, file, errText string) {
	t.Helper()
	ops := "http://" + g.brokers[i].OpsAddr()
	var body string
	waitFor(t, 10*time.Second, func() bool {
		code, b, err := get(ops + "/healthz")
		body = b
		return err == nil && code == http.StatusServiceUnavailable && strings.Contains(b, "store failed")
	})
	if !strings.Contains(body, file) || !strings.Contains(body, errText) {
		t.Fatalf("/healthz of the failed replica says %q; want it to name %s and %q", body, file, errText)
	}
	var last string
	defer func() {
		if t.Failed() {
			t.Logf("the failed replica's last metrics:\n%s", last)
		}
	}()
	waitFor(t, 5*time.Second, func() bool {
		_, m, err := get(ops + "/metrics")
		last = m
		return err == nil &&
			strings.Contains(m, g.metric(i, "raftmq_store_failed")+" 1\n") &&
			strings.Contains(m, g.metric(i, "raftmq_master")+" 0\n") &&
			strings.Contains(m, g.metric(i, "raftmq_raft_state")+" 3\n") // shut down
	})
	if d := g.describe(i); d == nil || d.Master {
		t.Fatalf("the failed replica describes itself as %v", d)
	}
}

// checkOneErrorLine checks replica i logged exactly one Error line, naming
// file and the error, and that no other replica logged any.
func (g *faultyGroup) checkOneErrorLine(t *testing.T, i int, file, errText string) {
	t.Helper()
	for j := range g.logs {
		lines := g.logs[j].all()
		if j != i {
			if len(lines) != 0 {
				t.Errorf("replica %d, not failed, logged errors: %v", j+1, lines)
			}
			continue
		}
		if len(lines) != 1 {
			t.Fatalf("the failed replica logged %d Error lines, want 1: %v", len(lines), lines)
		}
		if l := lines[0]; !strings.HasPrefix(l["file"], file) || !strings.Contains(l["err"], errText) {
			t.Fatalf("the failed replica's Error line %v does not name the file %s and the error %q", l, file, errText)
		}
	}
}

// checkRefuses checks that replica i refuses sends and pulls with
// Unavailable and STORE_ERROR, so clients go to another replica.
func (g *group) checkRefuses(t *testing.T, i int, topic string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, serr := g.client(i).SendMessage(ctx, oneMessage(topic, 0, "refused"))
	_, perr := g.client(i).PullMessage(ctx, &pb.PullMessageRequest{ConsumerGroup: "cg", Topic: topic, SuspendTimeoutMs: 1000})
	for what, err := range map[string]error{"send": serr, "pull": perr} {
		if reason, _ := ReasonOf(err); status.Code(err) != codes.Unavailable || reason != pb.ErrorReason_STORE_ERROR {
			t.Fatalf("%s to the failed replica: %v (reason %v), want Unavailable, STORE_ERROR", what, err, reason)
		}
	}
	// RocketMQ's clients too, through the remoting gateway (which calls
	// the services past the gRPC interceptors).
	conn, err := net.DialTimeout("tcp", g.cfgs[i].GRPCAddr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r := bufio.NewReader(conn)
	for code, ext := range map[int32]map[string]string{
		remoting.CodeSendMessage: {"topic": topic, "queueId": "0"},
		remoting.CodePullMessage: {"consumerGroup": "cg", "topic": topic, "queueId": "0", "queueOffset": "0"},
	} {
		frame, _ := (&remoting.Command{Code: code, Opaque: code, ExtFields: ext, Body: []byte("refused")}).Encode(nil)
		conn.Write(frame)
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := remoting.ReadCommand(r, remoting.DefaultMaxFrame)
		if err != nil || resp.Code != remoting.CodeSystemError || !strings.Contains(resp.Remark, "stopped serving") {
			t.Fatalf("remoting code %d to the failed replica: %+v %v, want a system error saying it stopped serving", code, resp, err)
		}
	}
}

// A replica whose disk refuses a commitlog write (EIO) stops: it applies
// nothing after the entry it could not store, shuts its Raft member down,
// reports the failure on /healthz, in raftmq_store_failed and in one Error
// line, and refuses sends and pulls. The other two go on: sends keep
// being acknowledged, and every acknowledged message is on both, byte for
// byte. Restarted on a sound disk, the replica re-applies what it missed
// from the Raft log and ends identical. A failed fdatasync of the store's
// background flusher, between entries, stops the replica the same way.
func TestFailedStoreStopsReplica(t *testing.T) {
	for _, tc := range []struct{ victimIs, op string }{
		{"master", "write"},
		{"follower", "write"},
		{"follower", "fdatasync"},
	} {
		t.Run(tc.victimIs+"/"+tc.op, func(t *testing.T) {
			victimIs := tc.victimIs
			g := newFaultyGroup(t, tc.op, syscall.EIO, nil)
			g.createTopic("f", 2)
			g.createTopic("idle", 1)
			m := g.master()
			victim := m
			if victimIs == "follower" {
				victim = (m + 1) % 3
			}
			held := make(chan error, 1)
			if victimIs == "master" { // a pull waits on it for a message
				go func() {
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					_, err := g.client(victim).PullMessage(ctx, &pb.PullMessageRequest{ConsumerGroup: "cg", Topic: "idle", SuspendTimeoutMs: 20000})
					held <- err
				}()
				waitFor(t, 5*time.Second, func() bool { return g.brokers[victim].HeldPulls() == 1 })
			}
			l := g.startLoad(t, 4, "f", 2, 10*time.Second)
			l.grow(t, 50)

			g.broken[victim].Store(true)
			segments := filepath.Join(g.cfgs[victim].Dir, "store", "commitlog")
			g.waitFailed(t, victim, segments, "input/output error")
			if victimIs == "master" {
				select {
				case err := <-held:
					if reason, _ := ReasonOf(err); status.Code(err) != codes.Unavailable || reason != pb.ErrorReason_STORE_ERROR {
						t.Fatalf("the pull held by the failed master ended with %v, want Unavailable, STORE_ERROR", err)
					}
				case <-time.After(5 * time.Second):
					t.Fatal("the pull held by the failed master was not answered")
				}
			}
			l.grow(t, 100) // the group goes on without it
			if now := g.master(); now == victim {
				t.Fatal("the failed replica is master")
			}
			g.checkRefuses(t, victim, "f")
			acks := l.end()
			if t.Failed() {
				return
			}
			g.checkOneErrorLine(t, victim, segments, "input/output error")

			// What the failed replica holds is a prefix of the others'.
			_, end := g.brokers[victim].Store().CommitlogOffsets()
			g.stop(victim)
			g.checkIdentical(acks) // the survivors hold every ack
			if !bytes.Equal(commitlogBytes(t, g.cfgs[victim], end), commitlogBytes(t, g.cfgs[(victim+1)%3], end)) {
				t.Fatal("the failed replica's commitlog is not a prefix of the survivors'")
			}

			g.broken[victim].Store(false)
			g.start(victim)
			g.checkIdentical(acks)
			waitFor(t, 5*time.Second, func() bool {
				code, _, err := get("http://" + g.brokers[victim].OpsAddr() + "/healthz")
				return err == nil && code == http.StatusOK
			})
		})
	}
}

// A replica that cannot remove a deleted topic's consume queues stops as
// after a failed write; restarted on a sound disk it deletes the topic
// from the Raft log.
func TestFailedTopicDeletionStopsReplica(t *testing.T) {
	g := newFaultyGroup(t, "remove", syscall.EROFS, nil)
	g.createTopic("doomed", 1)
	g.createTopic("kept", 1)
	m := g.master()
	victim := (m + 1) % 3
	var acks []acked
	send := func(topic, body string) {
		t.Helper()
		resp, _, err := g.sendRedirecting(m, oneMessage(topic, 0, body), 10*time.Second)
		if err != nil {
			t.Fatalf("send %s: %v", body, err)
		}
		if topic == "kept" {
			acks = append(acks, acked{body: body, queue: 0, res: resp.Results[0]})
		}
	}
	send("doomed", "d1")
	send("kept", "k1")
	g.quiesce()

	g.broken[victim].Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := g.client(m).DeleteTopic(ctx, &pb.DeleteTopicRequest{Name: "doomed"}); err != nil {
		t.Fatalf("delete topic: %v", err)
	}
	queues := filepath.Join(g.cfgs[victim].Dir, "store", "consumequeue", "doomed")
	g.waitFailed(t, victim, queues, "read-only file system")
	for i := 0; i < 20; i++ {
		send("kept", fmt.Sprintf("k%d", i+2))
	}
	g.checkRefuses(t, victim, "kept")
	g.checkOneErrorLine(t, victim, queues, "read-only file system")

	g.stop(victim)
	g.checkIdentical(acks)
	g.broken[victim].Store(false)
	g.start(victim)
	g.checkIdentical(acks)
	if d := g.describe(victim); d == nil || slices.ContainsFunc(d.Topics, func(t *pb.TopicConfig) bool { return t.Name == "doomed" }) {
		t.Fatalf("the restarted replica's topics: %v", d)
	}
	if _, max := g.brokers[victim].Store().QueueOffsets("doomed", 0); max != 0 {
		t.Fatalf("the restarted replica still has the deleted topic's queue, to %d", max)
	}
}
