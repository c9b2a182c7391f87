package rocketmq

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
)

// procCluster is a name server and one group of 3 broker replicas, each
// its own raftmq process, so a replica can be killed.
type procCluster struct {
	t       *testing.T
	ns      string
	grpc    []string
	brokers []*exec.Cmd
	cli     []string // the flags raftmq's commands need (a secured cluster's)
}

// startProcCluster starts the name server and 3 replicas of broker-a on
// loopback ports and waits for the group to have a master. With a
// certificate directory (raftmq certs) and a policy, every node runs with
// TLS, encrypted gossip and access control, and cli are the flags
// raftmq's commands then need.
func startProcCluster(t *testing.T) *procCluster { return startSecuredProcCluster(t, "", "", nil) }

func startSecuredProcCluster(t *testing.T, certs, policy string, cli []string) *procCluster {
	t.Helper()
	base := freeBase(t)
	addr := func(p int) string { return fmt.Sprintf("127.0.0.1:%d", base+p) }
	c := &procCluster{t: t, ns: addr(0), cli: cli}
	secure := func(name string) []string {
		if certs == "" {
			return nil
		}
		return []string{"--tls-ca", filepath.Join(certs, "ca.pem"), "--tls-cert", filepath.Join(certs, name, "cert.pem"),
			"--tls-key", filepath.Join(certs, name, "key.pem"), "--gossip-key-file", filepath.Join(certs, "gossip.key"), "--acl", policy}
	}
	startProc(t, append([]string{"namesrv", "--grpc", addr(0), "--gossip", addr(1), "--log-level", "error"}, secure("namesrv-1")...)...)
	var peers []string
	for i := 1; i <= 3; i++ {
		peers = append(peers, fmt.Sprintf("%d=%s", i, addr(10*i+1)))
	}
	dir := t.TempDir()
	for i := 1; i <= 3; i++ {
		c.grpc = append(c.grpc, addr(10*i))
		c.brokers = append(c.brokers, startProc(t, append([]string{"broker", "--group", "broker-a", "--id", fmt.Sprint(i), "--dir", filepath.Join(dir, fmt.Sprint(i)),
			"--grpc", addr(10 * i), "--raft", addr(10*i + 1), "--gossip", addr(10*i + 2), "--peers", strings.Join(peers, ","), "--join", addr(1),
			"--segment-size", "8MiB", "--raft-timeout", "500ms", "--log-level", "error"}, secure(fmt.Sprintf("broker-a-%d", i))...)...))
	}
	c.master()
	return c
}

func startProc(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(raftmqBin, args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

// master is the index of the replica `raftmq cluster list` shows as the
// master, once there is one.
func (c *procCluster) master() int {
	m := -1
	waitUntil(c.t, 30*time.Second, "a master in the routes", func() bool {
		out, err := exec.Command(raftmqBin, append([]string{"cluster", "list", "--namesrv", c.ns}, c.cli...)...).Output()
		if err != nil {
			return false
		}
		sc := bufio.NewScanner(strings.NewReader(string(out)))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) >= 4 && f[2] == "master" {
				for i, g := range c.grpc {
					if g == f[3] && c.brokers[i] != nil {
						m = i
						return true
					}
				}
			}
		}
		return false
	})
	return m
}

func (c *procCluster) kill(i int) {
	c.brokers[i].Process.Kill()
	c.brokers[i].Wait()
	c.brokers[i] = nil
}

// The official producer sends through a kill -9 of the master: sends fail
// while the master is gone, and go on to the new master once the client
// learns the route from the name server (at its 30 s poll); the official
// consumer then reads every message whose send was acknowledged.
func TestEveryAckedSendSurvivesAMasterKill(t *testing.T) {
	c := startProcCluster(t)
	raftmq(t, "topic", "create", "--namesrv", c.ns, "--name", "through-kill", "--queues", "4")
	waitRoute(t, c.ns, "through-kill")
	p := startProducer(t, c.ns)

	var mu sync.Mutex
	var acked []string
	failed := 0
	ackedSince := func(n int) bool { mu.Lock(); defer mu.Unlock(); return len(acked) >= n }
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			body := fmt.Sprintf("m-%05d", i)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			r, err := p.SendSync(ctx, primitive.NewMessage("through-kill", []byte(body)))
			cancel()
			mu.Lock()
			if err == nil && r.Status == primitive.SendOK {
				acked = append(acked, body)
			} else {
				failed++
			}
			mu.Unlock()
			if err != nil {
				time.Sleep(50 * time.Millisecond)
			}
		}
	}()
	waitUntil(t, 20*time.Second, "sends before the kill", func() bool { return ackedSince(200) })
	old := c.master()
	c.kill(old)
	mu.Lock()
	atKill := len(acked)
	mu.Unlock()
	if m := c.master(); m == old {
		t.Fatal("the killed replica is still the master in the routes")
	}
	waitUntil(t, 60*time.Second, "sends acknowledged by the new master", func() bool { return ackedSince(atKill + 200) })
	close(stop)
	<-done
	mu.Lock()
	t.Logf("%d sends acknowledged (%d before the kill), %d failed", len(acked), atKill, failed)
	want := append([]string(nil), acked...)
	mu.Unlock()

	d := newDeliveries()
	startConsumer(t, c.ns, "after-kill", "through-kill", d.listener("c"))
	waitUntil(t, 60*time.Second, "every acknowledged message consumed", func() bool { return d.all(want) })
}
