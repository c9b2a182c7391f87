package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/cluster/pb"
)

// freeRange finds n consecutive free TCP ports on 127.0.0.1 starting at a
// multiple of 100 (dev's layout needs ranges, not single ports).
func freeRange(t *testing.T, n int) int {
	t.Helper()
	for base := 20000 + (os.Getpid()%200)*100; base < 60000; base += 100 {
		ok := true
		for p := base; p < base+n && ok; p++ {
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
			if err != nil {
				ok = false
				continue
			}
			l.Close()
		}
		if ok {
			return base
		}
	}
	t.Fatal("no free port range")
	return 0
}

// startDev runs `raftmq dev` and returns its name server address once the
// cluster is ready (the example lines are printed).
func startDev(t *testing.T, bin, dir string, port, base int, extra ...string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"dev", "--dir", dir, "--port", fmt.Sprint(port), "--base-port", fmt.Sprint(base)}, extra...)...)
	first, r := startServer(t, cmd, "namesrv 127.0.0.1:")
	addr := strings.TrimSpace(strings.TrimPrefix(first, "namesrv "))
	for examples := 0; examples < 2; {
		line, err := r.ReadString('\n')
		switch {
		case err != nil:
			t.Fatalf("dev's output ended before its example lines: %v", err)
		case strings.Contains(line, "--namesrv "+addr):
			examples++
		case !strings.Contains(line, " metrics http://"): // --http's lines
			t.Fatalf("unexpected line %q", line)
		}
	}
	go io.Copy(io.Discard, r)
	return cmd, addr
}

// raftmq runs the binary and returns its output; it fails the test when
// the command fails.
func raftmq(t *testing.T, bin string, args ...string) string {
	t.Helper()
	// A command that hangs fails the test at the deadline rather than
	// hanging it.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("raftmq %v: %v\n%s", args, err, out)
	}
	return string(out)
}

func waitOutput(t *testing.T, d time.Duration, bin string, want string, args ...string) string {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		out, _ := exec.Command(bin, args...).CombinedOutput()
		if strings.Contains(string(out), want) {
			return string(out)
		}
		if time.Now().After(deadline) {
			t.Fatalf("raftmq %v never said %q; last output:\n%s", args, want, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The admin CLI against `raftmq dev`, end to end: real processes, real
// ports; dev stops cleanly on Ctrl-C and comes back with its data.
func TestAdminCLIAgainstDev(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	base := freeRange(t, 100)
	port := base + 90
	dev, ns := startDev(t, bin, dir, port, base)

	out := raftmq(t, bin, "cluster", "list", "--namesrv", ns)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "GROUP") || strings.Count(out, " master ") != 1 || strings.Count(out, " slave ") != 2 {
		t.Fatalf("cluster list:\n%s", out)
	}
	// New directories: every replica keeps its Raft log in its commitlog.
	for i, l := range lines {
		want := "commitlog"
		if i == 0 {
			want = "RAFT_LOG"
		}
		if f := strings.Fields(l); len(f) != 8 || f[7] != want {
			t.Fatalf("cluster list's RAFT_LOG column:\n%s", out)
		}
	}
	out = raftmq(t, bin, "topic", "create", "--namesrv", ns, "--name", "orders", "--queues", "8")
	if !strings.Contains(out, "created topic orders on broker-a") {
		t.Fatalf("topic create: %s", out)
	}
	// Routable within 2 s.
	route := waitOutput(t, 2*time.Second, bin, "queues 8/8", "topic", "route", "--namesrv", ns, "--name", "orders")
	if !strings.Contains(route, "topic orders\ngroup broker-a queues 8/8 perm rw") || strings.Count(route, "  master ") != 1 || strings.Count(route, "  slave  ") != 2 {
		t.Fatalf("topic route:\n%s", route)
	}
	// RAFTMQ_NAMESRV works in place of --namesrv.
	env := exec.Command(bin, "topic", "list")
	env.Env = append(os.Environ(), "RAFTMQ_NAMESRV="+ns)
	if out, err := env.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "orders" {
		t.Fatalf("topic list: %q %v", out, err)
	}
	raftmq(t, bin, "topic", "update", "--namesrv", ns, "--name", "orders", "--queues", "2", "--perm", "r")
	waitOutput(t, 2*time.Second, bin, "queues 2/2 perm r ", "topic", "route", "--namesrv", ns, "--name", "orders")
	// One attribute alone changes only it (issue #14: --perm alone failed
	// with "queue counts must be at least 1").
	if out := raftmq(t, bin, "topic", "update", "--namesrv", ns, "--name", "orders", "--perm", "rw"); !strings.Contains(out, "2 read / 2 write queues, perm rw") {
		t.Fatalf("topic update --perm alone:\n%s", out)
	}
	if out, err := exec.Command(bin, "topic", "update", "--namesrv", ns, "--name", "orders").CombinedOutput(); err == nil || !strings.Contains(string(out), "nothing to change") {
		t.Fatalf("topic update with nothing to change: %v\n%s", err, out)
	}
	raftmq(t, bin, "topic", "create", "--namesrv", ns, "--name", "keep", "--queues", "3")
	// Right after create, before the name server has learned it.
	raftmq(t, bin, "topic", "create", "--namesrv", ns, "--name", "just-made", "--queues", "1")
	if out := raftmq(t, bin, "topic", "update", "--namesrv", ns, "--name", "just-made", "--write-queues", "2"); !strings.Contains(out, "1 read / 2 write queues, perm rw") {
		t.Fatalf("topic update right after create:\n%s", out)
	}
	raftmq(t, bin, "topic", "delete", "--namesrv", ns, "--name", "just-made")
	raftmq(t, bin, "topic", "delete", "--namesrv", ns, "--name", "orders")
	waitOutput(t, 2*time.Second, bin, "no route for topic orders", "topic", "route", "--namesrv", ns, "--name", "orders")

	// The replicas agree (the topic operations went through Raft, and
	// these writes too).
	raftmq(t, bin, "produce", "--namesrv", ns, "--topic", "checked", "--count", "20", "--size", "64")
	// --mode batch: 20 messages in batches of 8, 8 and 4, each batch in
	// one queue at consecutive offsets.
	out = raftmq(t, bin, "produce", "--namesrv", ns, "--topic", "checked", "--count", "20", "--size", "64", "--mode", "batch", "--batch", "8")
	acks := strings.Split(strings.TrimSpace(out), "\n")
	if len(acks) != 20 {
		t.Fatalf("produce --mode batch printed %d acks:\n%s", len(acks), out)
	}
	for i, line := range acks {
		var id, group string
		var queue, off, firstQueue, firstOff int64
		first := acks[i-i%8]
		if _, err := fmt.Sscanf(line, "OK %s %s %d %d", &id, &group, &queue, &off); err != nil {
			t.Fatalf("ack %q: %v", line, err)
		}
		fmt.Sscanf(first, "OK %s %s %d %d", &id, &group, &firstQueue, &firstOff)
		if queue != firstQueue || off != firstOff+int64(i%8) {
			t.Fatalf("message %d of a batch at queue %d offset %d, the batch's first at %d/%d:\n%s", i, queue, off, firstQueue, firstOff, out)
		}
	}
	// --mode oneway: every message handed over is stored before exit
	// (issue #14: 2 of 3 were).
	raftmq(t, bin, "produce", "--namesrv", ns, "--topic", "oneway", "--count", "3", "--size", "16", "--mode", "oneway")
	if out := raftmq(t, bin, "consume", "--namesrv", ns, "--topic", "oneway", "--group", "ow", "--count", "3", "--timeout", "20s"); strings.Count(out, "message-") != 3 {
		t.Fatalf("one-way sends stored:\n%s", out)
	}
	// Timer messages (issue 17): held until due, then delivered once.
	sentAt := time.Now()
	ack := strings.Fields(raftmq(t, bin, "produce", "--namesrv", ns, "--topic", "timed", "--body", "later", "--delay", "1s"))
	var timed struct {
		Body       string
		Properties map[string]string
		StoreTime  int64
	}
	out = raftmq(t, bin, "consume", "--namesrv", ns, "--topic", "timed", "--group", "tm", "--count", "1", "--timeout", "20s", "--json")
	if err := json.Unmarshal([]byte(out), &timed); err != nil || len(ack) < 2 || timed.Body != "later" ||
		timed.Properties["ORIGIN_MESSAGE_ID"] != ack[1] || timed.Properties["TIMER_OUT_MS"] == "" || timed.StoreTime < sentAt.Add(time.Second).UnixMilli() {
		t.Fatalf("a message sent with --delay 1s (ack %q) received %s after it was sent: %v\n%s", ack, time.Since(sentAt), err, out)
	}
	if out, err := exec.Command(bin, "produce", "--namesrv", ns, "--topic", "timed", "--body", "x", "--delay", "1s", "--delay-level", "2").CombinedOutput(); err == nil || !strings.Contains(string(out), "one of --delay") {
		t.Fatalf("produce with two timers: %v\n%s", err, out)
	}
	// Transactions (issue 17): a committed one is delivered, a rolled-back
	// one is not; each prints its outcome.
	committed := strings.Fields(raftmq(t, bin, "produce", "--namesrv", ns, "--topic", "tx", "--body", "kept", "--transaction", "commit"))
	rolled := strings.Fields(raftmq(t, bin, "produce", "--namesrv", ns, "--topic", "tx", "--body", "dropped", "--transaction", "rollback"))
	if len(committed) != 6 || committed[5] != "commit" || len(rolled) != 6 || rolled[5] != "rollback" {
		t.Fatalf("produce --transaction printed %q and %q", committed, rolled)
	}
	raftmq(t, bin, "produce", "--namesrv", ns, "--topic", "tx", "--body", "after")
	out = raftmq(t, bin, "consume", "--namesrv", ns, "--topic", "tx", "--group", "txg", "--count", "2", "--timeout", "20s")
	if !strings.Contains(out, "kept") || !strings.Contains(out, "after") || strings.Contains(out, "dropped") {
		t.Fatalf("the transactions' topic holds:\n%s", out)
	}
	if out, err := exec.Command(bin, "produce", "--namesrv", ns, "--topic", "tx", "--body", "x", "--transaction", "maybe").CombinedOutput(); err == nil || !strings.Contains(string(out), "want commit, rollback or unknown") {
		t.Fatalf("produce --transaction maybe: %v\n%s", err, out)
	}
	out = raftmq(t, bin, "cluster", "check", "--namesrv", ns)
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 4 || strings.Count(out, " ok") != 3 || strings.Contains(out, " 0  ") {
		t.Fatalf("cluster check:\n%s", out)
	}

	// Errors are clear, and exit non-zero.
	for _, args := range [][]string{
		{"topic", "route", "--namesrv", ns, "--name", "missing"},
		{"topic", "create", "--namesrv", ns, "--name", "bad/name"},
		{"topic", "create", "--namesrv", ns, "--name", "x", "--group", "broker-z"},
		{"topic", "list"},
		{"cluster", "list", "--namesrv", "127.0.0.1:1"},
	} {
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "RAFTMQ_NAMESRV=")
		if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "raftmq:") {
			t.Fatalf("%v: %v %q", args, err, out)
		}
	}

	// Produce and consume, as the dev banner suggests.
	out = raftmq(t, bin, "produce", "--namesrv", ns, "--topic", "keep", "--count", "5", "--size", "32", "--json", "--key", "k1")
	var ids []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var r struct {
			Body, MsgID string
			Error       string
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil || r.Error != "" || !strings.HasPrefix(r.MsgID, "broker-a@") {
			t.Fatalf("produce --json line %q: %v", line, err)
		}
		ids = append(ids, r.MsgID)
	}
	if len(ids) != 5 {
		t.Fatalf("produce printed %d acks", len(ids))
	}
	stdin := exec.Command(bin, "produce", "--namesrv", ns, "--topic", "keep", "--tag", "S")
	stdin.Stdin = strings.NewReader("from stdin 1\nfrom stdin 2\n")
	if out, err := stdin.CombinedOutput(); err != nil || strings.Count(string(out), "OK broker-a@") != 2 {
		t.Fatalf("produce from stdin: %v\n%s", err, out)
	}
	out = raftmq(t, bin, "consume", "--namesrv", ns, "--topic", "keep", "--group", "g1", "--count", "7", "--json", "--timeout", "20s")
	got := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var m struct {
			MsgID, Topic, Body string
			Keys               []string
		}
		if err := json.Unmarshal([]byte(line), &m); err != nil || m.Topic != "keep" {
			t.Fatalf("consume --json line %q: %v", line, err)
		}
		got[m.MsgID] = true
	}
	for _, id := range ids {
		if !got[id] {
			t.Fatalf("consumed %v, missing %s", got, id)
		}
	}
	if len(got) != 7 {
		t.Fatalf("consumed %d messages, want 7", len(got))
	}
	// The group's offsets were committed: nothing more to read.
	if out := raftmq(t, bin, "consume", "--namesrv", ns, "--topic", "keep", "--group", "g1", "--timeout", "1s"); out != "" {
		t.Fatalf("second consume read again:\n%s", out)
	}
	// A tag filter: only the stdin messages.
	out = raftmq(t, bin, "consume", "--namesrv", ns, "--topic", "keep", "--group", "g2", "--tag", "S", "--timeout", "2s")
	if strings.Count(out, "tags=S") != 2 || strings.Count(out, "\n") != 2 {
		t.Fatalf("tag-filtered consume:\n%s", out)
	}

	// Group progress: g1 consumed everything.
	out = raftmq(t, bin, "group", "progress", "--namesrv", ns, "--group", "g1")
	if !strings.HasPrefix(out, "TOPIC") || !strings.Contains(out, "keep") || strings.Contains(out, "orders") {
		t.Fatalf("group progress:\n%s", out)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
		if f := strings.Fields(line); f[len(f)-1] != "0" {
			t.Fatalf("group progress shows lag after consuming all:\n%s", out)
		}
	}
	// Message queries by id and by key.
	if out := raftmq(t, bin, "msg", "query", "--namesrv", ns, "--id", ids[2]); !strings.Contains(out, "msgId="+ids[2]) || !strings.Contains(out, "message-2") {
		t.Fatalf("msg query --id:\n%s", out)
	}
	if out := raftmq(t, bin, "msg", "query", "--namesrv", ns, "--topic", "keep", "--key", "k1"); strings.Count(out, "msgId=") != 5 {
		t.Fatalf("msg query --key:\n%s", out)
	}
	// Not found: a clear message and a non-zero exit (issue #14: storage
	// internals; nothing at all and exit 0).
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"msg", "query", "--namesrv", ns, "--id", "broker-a@00000000FFFFFFFF"}, "no message with id broker-a@00000000FFFFFFFF on broker-a"},
		{[]string{"msg", "query", "--namesrv", ns, "--id", "broker-a@0000000000000001"}, "no message with id broker-a@0000000000000001 on broker-a"},
		{[]string{"msg", "query", "--namesrv", ns, "--topic", "keep", "--key", "no-such-key"}, `no message with key "no-such-key" in topic keep`},
		{[]string{"msg", "query", "--namesrv", ns, "--topic", "no-such-topic", "--key", "k1"}, `topic "no-such-topic" does not exist`},
		{[]string{"consume", "--namesrv", ns, "--topic", "no-such-topic", "--group", "g1", "--timeout", "2s"}, `topic "no-such-topic" does not exist`},
	} {
		out, err := exec.Command(bin, tc.args...).CombinedOutput()
		if _, exited := err.(*exec.ExitError); !exited || !strings.Contains(string(out), tc.want) || strings.Contains(string(out), "rpc error") {
			t.Errorf("%v: %v\n%s\nwant a non-zero exit saying %q", tc.args, err, out, tc.want)
		}
	}

	// A dead letter comes back with dlq resend.
	conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", base+1), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	// The connection closed at the end is the last one: the loop below
	// dials the leader anew on NOT_LEADER (a plain defer conn.Close() kept
	// the first, closed already, and leaked the leader's: goleak found it).
	defer func() { conn.Close() }()
	bc := pb.NewBrokerClient(conn)
	for {
		_, err := bc.ConsumerSendBack(context.Background(), &pb.ConsumerSendBackRequest{ConsumerGroup: "g3", MsgId: ids[0], DelayLevel: -1})
		if reason, meta := pb.ReasonOf(err); reason == pb.ErrorReason_NOT_LEADER {
			conn.Close()
			if conn, err = grpc.NewClient(meta["leader"], grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
				t.Fatal(err)
			}
			bc = pb.NewBrokerClient(conn)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		break
	}
	// The dead-letter topic is neither readable nor writable (RocketMQ's
	// perm 0): nothing consumes or sends to it by accident; dlq resend
	// is the way out.
	waitOutput(t, 5*time.Second, bin, "perm - ", "topic", "route", "--namesrv", ns, "--name", "%DLQ%g3")
	if out, err := exec.Command(bin, "consume", "--namesrv", ns, "--topic", "%DLQ%g3", "--group", "g3", "--count", "1", "--timeout", "3s").CombinedOutput(); err == nil || strings.Contains(string(out), "message-0") {
		t.Fatalf("consume of the dead-letter topic: %v\n%s", err, out)
	}
	if out, err := exec.Command(bin, "produce", "--namesrv", ns, "--topic", "%DLQ%g3", "--body", "sneak").CombinedOutput(); err == nil {
		t.Fatalf("produce to the dead-letter topic succeeded:\n%s", out)
	}
	out = waitOutput(t, 5*time.Second, bin, "resent 1 messages", "dlq", "resend", "--namesrv", ns, "--group", "g3")
	if out := raftmq(t, bin, "dlq", "resend", "--namesrv", ns, "--group", "g3"); !strings.Contains(out, "resent 0 messages") {
		t.Fatalf("second resend: %s", out)
	}
	if out := raftmq(t, bin, "consume", "--namesrv", ns, "--topic", "%RETRY%g3", "--group", "g3", "--count", "1", "--timeout", "10s"); !strings.Contains(out, "message-0") {
		t.Fatalf("resent dead letter not in the retry topic:\n%s", out)
	}

	// bench: a counted run ends on its own with a JSON summary last, and
	// --trace leaves an execution trace, stopped (its events flushed).
	tracePath := filepath.Join(t.TempDir(), "bench.trace")
	out = raftmq(t, bin, "bench", "produce", "--namesrv", ns, "--topic", "keep", "--clients", "4", "--count", "200", "--size", "100", "--json", "--trace", tracePath)
	if tr, err := os.ReadFile(tracePath); err != nil || len(tr) < 4<<10 || !bytes.HasPrefix(tr, []byte("go 1.")) || !bytes.Contains(tr[:16], []byte(" trace")) {
		t.Fatalf("bench produce --trace: %d bytes, starting %q (%v)", len(tr), tr[:min(len(tr), 16)], err)
	}
	lines = strings.Split(strings.TrimSpace(out), "\n")
	var sum struct {
		Sent, Failed int64
		MsgsPerSec   float64 `json:"msgs_per_sec"`
		P99          float64 `json:"p99_ms"`
		CPUSeconds   float64 `json:"cpu_seconds"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &sum); err != nil || sum.Sent != 200 || sum.Failed != 0 || sum.MsgsPerSec <= 0 || sum.P99 <= 0 || sum.CPUSeconds <= 0 {
		t.Fatalf("bench produce summary %+v (%v):\n%s", sum, err, out)
	}
	// bench consume reports the bytes it received (about 100 B each: the
	// topic's messages, whatever --size says) and a real latency (store
	// to receive).
	out = raftmq(t, bin, "bench", "consume", "--namesrv", ns, "--topic", "keep", "--group", "bench-c", "--count", "200", "--size", "1024", "--json")
	lines = strings.Split(strings.TrimSpace(out), "\n")
	var csum struct {
		Sent     int64
		MBPerSec float64 `json:"mb_per_sec"`
		P50      float64 `json:"p50_ms"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &csum); err != nil || csum.Sent < 200 || csum.P50 <= 0 || csum.MBPerSec <= 0 || strings.Contains(out, "messages of 1024 B") {
		t.Fatalf("bench consume summary %+v (%v):\n%s", csum, err, out)
	}
	// bench e2e on a topic nobody has sent to ends with what it sent
	// (issue #14: it waited forever), and counts nothing else: run
	// twice on one group, the second counts its own 100 only.
	for run := 0; run < 2; run++ {
		out = raftmq(t, bin, "bench", "e2e", "--namesrv", ns, "--topic", "fresh-e2e", "--group", "bench-e2e", "--count", "100", "--size", "64", "--json")
		lines = strings.Split(strings.TrimSpace(out), "\n")
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &sum); err != nil || sum.Sent != 100 || sum.P99 <= 0 || sum.P99 > 10_000 {
			t.Fatalf("bench e2e run %d summary %+v (%v):\n%s", run, sum, err, out)
		}
	}
	// --rate paces the sends: 40 messages at 200 a second take 195 ms at
	// least, so the rate cannot come out above 205 a second.
	out = raftmq(t, bin, "bench", "e2e", "--namesrv", ns, "--topic", "fresh-e2e", "--group", "bench-e2e", "--count", "40", "--rate", "200", "--clients", "4", "--size", "64", "--json")
	lines = strings.Split(strings.TrimSpace(out), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &sum); err != nil || sum.Sent != 40 || sum.MsgsPerSec > 205 || sum.P99 <= 0 {
		t.Fatalf("bench e2e --rate 200 summary %+v (%v):\n%s", sum, err, out)
	}
	if out, err := exec.Command(bin, "bench", "produce", "--namesrv", ns, "--rate", "-1").CombinedOutput(); err == nil || !strings.Contains(string(out), "--rate must not be negative") {
		t.Fatalf("bench produce --rate -1: %v\n%s", err, out)
	}

	// group list / describe: a push consumer (bench consume's) is a
	// member holding the topic's 3 queues.
	member := exec.Command(bin, "bench", "consume", "--namesrv", ns, "--topic", "keep", "--group", "gdesc", "--duration", "60s")
	if err := member.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { member.Process.Kill(); member.Wait() }()
	waitOutput(t, 10*time.Second, bin, "keep broker-a/0,1,2", "group", "describe", "--namesrv", ns, "--group", "gdesc")
	if out := raftmq(t, bin, "group", "describe", "--namesrv", ns, "--group", "gdesc"); !strings.Contains(out, "clustering") || !strings.Contains(out, "keep(*)") {
		t.Fatalf("group describe:\n%s", out)
	}
	waitOutput(t, 5*time.Second, bin, "gdesc", "group", "list", "--namesrv", ns)
	if out, err := exec.Command(bin, "group", "describe", "--namesrv", ns, "--group", "nobody").CombinedOutput(); err == nil || !strings.Contains(string(out), `consumer group "nobody" has no live members`) {
		t.Fatalf("group describe of a group without members: %v\n%s", err, out)
	}
	// group reset-offset, the member live: to latest, the group's lag is
	// 0 on every queue and stays so (the member's commits of its old
	// position do not undo it); the forms of --to.
	out = raftmq(t, bin, "group", "reset-offset", "--namesrv", ns, "--group", "gdesc", "--topic", "keep", "--to", "latest")
	if strings.Count(out, "reset group gdesc topic keep on broker-a queue") != 3 {
		t.Fatalf("group reset-offset --to latest:\n%s", out)
	}
	waitOutput(t, 5*time.Second, bin, "keep   broker-a  2", "group", "progress", "--namesrv", ns, "--group", "gdesc", "--topic", "keep")
	if out := raftmq(t, bin, "group", "progress", "--namesrv", ns, "--group", "gdesc", "--topic", "keep"); strings.Count(out, "  0\n") != 3 {
		t.Fatalf("group progress after a reset to latest, want lag 0 on 3 queues:\n%s", out)
	}
	for _, to := range []string{"earliest", "2026-01-01T00:00:00Z", "1"} {
		raftmq(t, bin, "group", "reset-offset", "--namesrv", ns, "--group", "gdesc", "--topic", "keep", "--to", to)
	}
	if out, err := exec.Command(bin, "group", "reset-offset", "--namesrv", ns, "--group", "gdesc", "--topic", "keep", "--to", "yesterday").CombinedOutput(); err == nil || !strings.Contains(string(out), `--to "yesterday": want earliest, latest`) {
		t.Fatalf("reset-offset --to yesterday: %v\n%s", err, out)
	}
	member.Process.Kill()
	member.Wait()

	dev.Process.Signal(syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- dev.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("dev exited with %v on Ctrl-C", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("dev did not stop on Ctrl-C")
	}
	// Back with its data.
	_, ns = startDev(t, bin, dir, port, base)
	waitOutput(t, 5*time.Second, bin, "group broker-a queues 3/3", "topic", "route", "--namesrv", ns, "--name", "keep")
}

// raftmq dev --http serves /metrics and /healthz on every node, at the
// ports dev --help documents (name server --port+2, replica base+4).
func TestDevServesMetricsWithHTTP(t *testing.T) {
	bin := buildBinary(t)
	base := freeRange(t, 100)
	port := base + 90
	startDev(t, bin, t.TempDir(), port, base, "--http")
	hc := &http.Client{Timeout: 2 * time.Second}
	for _, addr := range []string{fmt.Sprintf("127.0.0.1:%d", port+2), fmt.Sprintf("127.0.0.1:%d", base+4), fmt.Sprintf("127.0.0.1:%d", base+24)} {
		for _, path := range []string{"/healthz", "/metrics"} {
			clustertest.WaitFor(t, 10*time.Second, addr+path, func() bool {
				resp, err := hc.Get("http://" + addr + path)
				if err != nil {
					return false
				}
				resp.Body.Close()
				return resp.StatusCode == http.StatusOK
			})
		}
	}
	if out := raftmq(t, bin, "dev", "--help"); !strings.Contains(out, "gRPC base+1, Raft base+2, gossip base+3, HTTP base+4") {
		t.Fatalf("dev --help has no port layout:\n%s", out)
	}
}
