package rocketmq

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/rlog"
)

// raftmqBin is the raftmq binary, built once for the package's tests.
var raftmqBin string

func TestMain(m *testing.M) {
	rlog.SetLogLevel("error")
	dir, err := os.MkdirTemp("", "raftmq-compat")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	raftmqBin = filepath.Join(dir, "raftmq")
	build := exec.Command("go", "build", "-o", raftmqBin, "./cmd/raftmq")
	build.Dir = "../.."
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building raftmq: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// freeBase is the first of 100 TCP ports free now (raftmq dev's layout
// needs a range).
func freeBase(t *testing.T) int {
	t.Helper()
	for base := 41000 + os.Getpid()%100*100; base < 60000; base += 100 {
		ok := true
		for p := base; p < base+100 && ok; p++ {
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

// startDev runs `raftmq dev` (with extra flags) and returns its name
// server address once it is ready.
func startDev(t *testing.T, extra ...string) string {
	t.Helper()
	base := freeBase(t)
	cmd := exec.Command(raftmqBin, append([]string{"dev", "--dir", t.TempDir(), "--port", fmt.Sprint(base + 90), "--base-port", fmt.Sprint(base)}, extra...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	deadline := time.After(60 * time.Second)
	ns := ""
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatal("raftmq dev exited")
			}
			if addr, found := strings.CutPrefix(line, "namesrv "); found && ns == "" {
				ns = addr
			}
			if strings.HasPrefix(line, "raftmq consume") { // the last line of its banner: ready
				go func() {
					for range lines {
					}
				}()
				return ns
			}
		case <-deadline:
			t.Fatal("raftmq dev not ready within 60 s")
		}
	}
}

// waitUntil polls cond until it holds, failing the test after d.
func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitRoute waits until the name server routes topic (a consumer's
// Start fails on a topic without a route).
func waitRoute(t *testing.T, ns, topic string) {
	t.Helper()
	waitUntil(t, 10*time.Second, "the route of "+topic, func() bool {
		return exec.Command(raftmqBin, "topic", "route", "--namesrv", ns, "--name", topic).Run() == nil
	})
}

func raftmq(t *testing.T, args ...string) string {
	t.Helper()
	return raftmqIn(t, "", args...)
}

// raftmqOut runs raftmq and returns its output and error.
func raftmqOut(args ...string) (string, error) {
	return raftmqWith("", args...)
}

func raftmqWith(stdin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, raftmqBin, args...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// raftmqIn runs raftmq with stdin (raftmq produce sends each line).
func raftmqIn(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	out, err := raftmqWith(stdin, args...)
	if err != nil {
		t.Fatalf("raftmq %v: %v\n%s", args, err, out)
	}
	return out
}

// The official client asks raftmq's name server for a topic's route over
// the remoting protocol, on the port raftmq's own clients use: it gets the
// topic's queues on its broker group, and for a topic that does not exist
// RocketMQ's "topic does not exist".
func TestOfficialClientGetsRoutesFromTheNameServer(t *testing.T) {
	ns := startDev(t)
	raftmq(t, "topic", "create", "--namesrv", ns, "--name", "compat", "--queues", "4")
	a, err := admin.NewAdmin(admin.WithResolver(primitive.NewPassthroughResolver([]string{ns})))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	var queues []*primitive.MessageQueue
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		queues, err = a.FetchPublishMessageQueues(ctx, "compat")
		cancel()
		if err == nil && len(queues) == 4 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("the official client's route query: %v", err)
	}
	var got []string
	for _, q := range queues {
		got = append(got, fmt.Sprintf("%s/%s/%d", q.Topic, q.BrokerName, q.QueueId))
	}
	sort.Strings(got)
	if want := "compat/broker-a/0 compat/broker-a/1 compat/broker-a/2 compat/broker-a/3"; strings.Join(got, " ") != want {
		t.Fatalf("queues %v, want %s", got, want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := a.FetchPublishMessageQueues(ctx, "no-such-topic"); err == nil {
		t.Fatal("a route for a topic that does not exist")
	}
}
