package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/raftmq/raftmq/client"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/cluster/pb"
)

// The Docker drills run the drills against deploy/docker-compose.yml: 2 name
// servers and 2 broker groups x 3 replicas in containers of raftmq:dev, the
// faults driven with plain docker kill|stop|start|pause|network disconnect
// on container names. The test process is the client, on the host: it
// reaches the containers at the addresses they advertise on the compose
// network, as a user's client on the host does.

const (
	composeFile = "../deploy/docker-compose.yml"
	dockerNet   = "raftmq" // the compose file's network
)

var (
	dockerGroups = map[string][]string{ // group -> containers, replica ids 1..3
		"broker-a": {"broker-a-1", "broker-a-2", "broker-a-3"},
		"broker-b": {"broker-b-1", "broker-b-2", "broker-b-3"},
	}
	dockerNameServers = []string{"namesrv-1", "namesrv-2"}
	imageOnce         sync.Once
	imageErr          error
)

type dockerCluster struct {
	t       *testing.T
	brokers map[string]pb.BrokerClient // container -> client
}

// newDockerCluster starts the compose cluster afresh (down, then up: Debian's
// docker-compose 1.29 fails when it recreates a container) and waits for
// every replica to answer and both groups to have a master. It skips unless
// RAFTMQ_E2E_DOCKER=1; with it set, no Docker is a failure.
func newDockerCluster(t *testing.T) *dockerCluster {
	if os.Getenv("RAFTMQ_E2E_DOCKER") != "1" {
		t.Skip("the Docker drills run with RAFTMQ_E2E_DOCKER=1 (they build raftmq:dev with deploy/build.sh and replace any cluster " +
			"deploy/docker-compose.yml runs; RAFTMQ_E2E_KEEP=1 leaves a failed drill's cluster up): RAFTMQ_E2E_DOCKER=1 go test -v -run Docker ./e2e")
	}
	if out, err := exec.Command("docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		t.Fatalf("RAFTMQ_E2E_DOCKER=1 but no Docker daemon answers: %v: %s", err, out)
	}
	imageOnce.Do(func() {
		out, err := exec.Command("bash", "../deploy/build.sh").CombinedOutput()
		if err != nil {
			imageErr = fmt.Errorf("deploy/build.sh: %v: %s", err, out)
		}
	})
	if imageErr != nil {
		t.Fatal(imageErr)
	}
	compose(t, "down", "-v", "--timeout", "1")
	compose(t, "up", "-d")
	c := &dockerCluster{t: t, brokers: map[string]pb.BrokerClient{}}
	t.Cleanup(func() {
		if t.Failed() {
			c.logs()
			if os.Getenv("RAFTMQ_E2E_KEEP") == "1" {
				t.Log("RAFTMQ_E2E_KEEP=1: the failed drill's cluster is left running")
				return
			}
		}
		compose(t, "down", "-v", "--timeout", "1")
	})
	for _, names := range dockerGroups {
		for _, name := range names {
			conn, err := grpc.NewClient("passthrough:///"+name+":10911", dockerCreds(t), grpc.WithContextDialer(dockerDial))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close() })
			c.brokers[name] = pb.NewBrokerClient(conn)
		}
	}
	for group, names := range dockerGroups {
		clustertest.WaitFor(t, 60*time.Second, group+" up with a master", func() bool {
			for _, name := range names {
				if c.describe(name) == nil {
					return false
				}
			}
			return c.master(group) != ""
		})
	}
	return c
}

func compose(t *testing.T, args ...string) {
	t.Helper()
	composeEnv(t, nil, args...)
}

// docker runs a docker command, failing the test if it fails.
func docker(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("docker", args...).CombinedOutput(); err != nil {
		t.Fatalf("docker %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// dockerFreeze pauses or unpauses a container and waits until docker
// reports it in that state. docker unpause once exited non-zero in CI
// (8d69e7f's run) while the container did resume, as its log shows: what
// the drill needs is the state, so a failed command is logged and tried
// again until the state is reached or 10 s have passed.
func dockerFreeze(t *testing.T, verb, name string, paused bool) {
	t.Helper()
	want := fmt.Sprint(paused)
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := exec.Command("docker", verb, name).CombinedOutput()
		if err == nil {
			return
		}
		state, _ := exec.Command("docker", "inspect", "-f", "{{.State.Paused}}", name).Output()
		t.Logf("docker %s %s: %v: %s (paused: %s)", verb, name, err, bytes.TrimSpace(out), bytes.TrimSpace(state))
		if string(bytes.TrimSpace(state)) == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("docker %s %s: still not paused=%s after 10 s", verb, name, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// containerIP is a container's address on the compose network, "" when it
// has none (stopped, or disconnected).
func containerIP(name string) string {
	out, err := exec.Command("docker", "inspect", "-f",
		fmt.Sprintf(`{{with index .NetworkSettings.Networks %q}}{{.IPAddress}}{{end}}`, dockerNet), name).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// dockerDial dials an address the harness names by container
// ("broker-a-1:10911") at the container's current address; the addresses
// the cluster advertises are IPs already, and are dialed as they are.
func dockerDial(ctx context.Context, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if net.ParseIP(host) == nil {
		ip := containerIP(host)
		if ip == "" {
			return nil, fmt.Errorf("container %s has no address on network %s", host, dockerNet)
		}
		addr = net.JoinHostPort(ip, port)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

func (c *dockerCluster) nameServers() []string {
	var out []string
	for _, ns := range dockerNameServers {
		out = append(out, ns+":9876")
	}
	return out
}

func (c *dockerCluster) clientOptions() []client.Option {
	return []client.Option{client.WithDialer(dockerDial), client.WithTLS(dockerTLS(c.t))}
}

// dockerTLS is the TLS of the drills' clients: the compose cluster's CA and
// user admin's certificate (deploy/build.sh makes them).
func dockerTLS(t *testing.T) *tls.Config {
	t.Helper()
	cfg, err := client.NodeTLSConfig("../deploy/certs/ca.pem", "../deploy/certs/user-admin/cert.pem", "../deploy/certs/user-admin/key.pem")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func dockerCreds(t *testing.T) grpc.DialOption {
	return grpc.WithTransportCredentials(credentials.NewTLS(dockerTLS(t)))
}

func (c *dockerCluster) describe(name string) *pb.DescribeBrokerResponse {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	d, err := c.brokers[name].DescribeBroker(ctx, &pb.DescribeBrokerRequest{})
	if err != nil {
		return nil
	}
	return d
}

// master returns the container of the group's master, "" when none of the
// reachable replicas is master.
func (c *dockerCluster) master(group string) string {
	best, term := "", uint64(0)
	for _, name := range dockerGroups[group] {
		if d := c.describe(name); d != nil && d.Master && d.Term >= term {
			best, term = name, d.Term
		}
	}
	return best
}

// awaitMaster waits for the group to have a master and returns it.
func (c *dockerCluster) awaitMaster(group string) string {
	var m string
	clustertest.WaitFor(c.t, 30*time.Second, group+" master", func() bool {
		m = c.master(group)
		return m != ""
	})
	return m
}

func (c *dockerCluster) createTopic(t *testing.T, topic string, queues int32) {
	for group := range dockerGroups {
		createOnMaster(t, topic+" on "+group, func() pb.BrokerClient { return c.brokers[c.awaitMaster(group)] }, topic, queues)
	}
	// Wait until a name server routes it on both groups, so the load
	// starts on the whole topic. Only one: the clients ask the other
	// first, which may not route it on both yet (the push consumers follow
	// its routes as they change).
	c.awaitRoute("namesrv-2", topic, 20*time.Second)
}

// awaitRoute waits until name server ns routes topic on every group, each
// with a master.
func (c *dockerCluster) awaitRoute(ns, topic string, within time.Duration) {
	t := c.t
	conn, err := grpc.NewClient("passthrough:///"+ns+":9876", dockerCreds(t), grpc.WithContextDialer(dockerDial))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// What the name server last answered, for a drill that fails here (CI
	// at b8e6f96: namesrv-2 did not route the rolling restart's topic on
	// both groups within 20 s, once in 2 runs, nothing in the logs to say
	// why).
	var last string
	defer func() {
		if t.Failed() {
			t.Logf("%s's last answer for %s: %s", ns, topic, last)
		}
	}()
	clustertest.WaitFor(t, within, ns+" routing "+topic+" on every group", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		r, err := pb.NewNameServerClient(conn).GetRoute(ctx, &pb.GetRouteRequest{Topic: topic})
		last = fmt.Sprintf("%v, %v", r, err)
		if err != nil || len(r.Groups) != len(dockerGroups) {
			return false
		}
		for _, g := range r.Groups {
			if g.MasterId == 0 {
				return false
			}
		}
		return true
	})
}

func (c *dockerCluster) recordReplicas(t *testing.T, h *History) {
	for group, names := range dockerGroups {
		replicas := map[string]pb.BrokerClient{}
		for _, name := range names {
			replicas[name] = c.brokers[name]
		}
		recordGroup(t, h, group, replicas)
	}
}

// caughtUp waits until a restarted replica has applied what its group's
// master had applied when it was called.
func (c *dockerCluster) caughtUp(name, group string) {
	m := c.awaitMaster(group)
	d := c.describe(m)
	clustertest.WaitFor(c.t, 30*time.Second, name+" caught up", func() bool {
		r := c.describe(name)
		return d != nil && r != nil && r.AppliedIndex >= d.AppliedIndex
	})
}

// logs prints the tail of every container's log, for a failed drill, and
// keeps the whole logs in RAFTMQ_E2E_LOGS (a directory) when it is set.
func (c *dockerCluster) logs() {
	names := append([]string{}, dockerNameServers...)
	for _, group := range []string{"broker-a", "broker-b"} {
		names = append(names, dockerGroups[group]...)
	}
	dir := os.Getenv("RAFTMQ_E2E_LOGS")
	for _, name := range names {
		out, _ := exec.Command("docker", "logs", "--tail", "20", name).CombinedOutput()
		c.t.Logf("--- docker logs %s:\n%s", name, out)
		if dir != "" {
			all, _ := exec.Command("docker", "logs", "--timestamps", name).CombinedOutput()
			path := filepath.Join(dir, c.t.Name()+"-"+name+".log")
			if err := os.WriteFile(path, all, 0o644); err != nil {
				c.t.Logf("keep %s's log: %v", name, err)
			}
		}
	}
}

// Drill 1: no fault; the baseline the others are compared with.
func TestDockerDrillBaseline(t *testing.T) {
	c := newDockerCluster(t)
	runDrill(t, "docker baseline", c, func() { time.Sleep(5 * time.Second) })
}

// Drill 2: every 10 s for 60 s, kill -9 a group's master (the groups in
// turn), and start it again 5 s later.
func TestDockerDrillMasterKilled(t *testing.T) {
	c := newDockerCluster(t)
	runDrill(t, "docker master kill -9 every 10 s for 60 s", c, func() {
		for round := 0; round < 6; round++ {
			victim := c.awaitMaster([]string{"broker-a", "broker-b"}[round%2])
			docker(t, "kill", victim)
			time.Sleep(5 * time.Second) // the outage
			docker(t, "start", victim)
			time.Sleep(5 * time.Second) // until the next kill
		}
	})
}

// Drill 3: stop a follower for 30 s, then start it: it catches up and ends
// identical.
func TestDockerDrillFollowerStopped(t *testing.T) {
	c := newDockerCluster(t)
	runDrill(t, "docker follower stopped 30 s", c, func() {
		m := c.awaitMaster("broker-a")
		var follower string
		for _, name := range dockerGroups["broker-a"] {
			if name != m {
				follower = name
				break
			}
		}
		docker(t, "stop", follower)
		time.Sleep(30 * time.Second) // the outage
		docker(t, "start", follower)
		c.caughtUp(follower, "broker-a")
	})
}

// Drill 4: cut a master off the network for 20 s, then reconnect it at the
// same address. The others elect a master; the old one steps down.
func TestDockerDrillMasterDisconnected(t *testing.T) {
	c := newDockerCluster(t)
	runDrill(t, "docker master disconnected 20 s", c, func() {
		m := c.awaitMaster("broker-a")
		ip := containerIP(m)
		docker(t, "network", "disconnect", dockerNet, m)
		time.Sleep(20 * time.Second) // the partition
		docker(t, "network", "connect", "--ip", ip, "--alias", m, dockerNet, m)
		c.caughtUp(m, "broker-a")
	})
}

// Drill 5: kill one name server and leave it down: clients go on through
// the other.
func TestDockerDrillNameServerKilled(t *testing.T) {
	c := newDockerCluster(t)
	runDrill(t, "docker name server killed", c, func() {
		docker(t, "kill", dockerNameServers[0])
		time.Sleep(5 * time.Second)
	})
}

// Drill 5b: cut one name server off the network for 10 s, then reconnect
// it (issue #16 item 5): clients go on through the other, and the one cut
// off routes the whole cluster again once it is back: it finds its way
// back into the gossip pool it was declared dead in.
func TestDockerDrillNameServerIsolated(t *testing.T) {
	c := newDockerCluster(t)
	runDrill(t, "docker name server cut off 10 s", c, func() {
		ns := dockerNameServers[0]
		ip := containerIP(ns)
		docker(t, "network", "disconnect", dockerNet, ns)
		time.Sleep(10 * time.Second) // the partition
		docker(t, "network", "connect", "--ip", ip, "--alias", ns, dockerNet, ns)
		c.awaitRoute(ns, "drill", 30*time.Second)
	})
}

// Drill 6: restart every broker container in turn (docker stop sends
// SIGTERM: a master hands its leadership over first), each once the one
// before has caught up.
func TestDockerDrillRollingRestart(t *testing.T) {
	c := newDockerCluster(t)
	runDrill(t, "docker rolling restart", c, func() {
		for _, group := range []string{"broker-a", "broker-b"} {
			for _, name := range dockerGroups[group] {
				docker(t, "stop", name)
				docker(t, "start", name)
				c.caughtUp(name, group)
			}
		}
	})
}

// Drill 7: freeze a master for 5 s (docker pause).
func TestDockerDrillMasterPaused(t *testing.T) {
	c := newDockerCluster(t)
	runDrill(t, "docker master paused 5 s", c, func() {
		m := c.awaitMaster("broker-a")
		dockerFreeze(t, "pause", m, true)
		time.Sleep(5 * time.Second) // the freeze
		dockerFreeze(t, "unpause", m, false)
	})
}

// Drill 8: broker-a's Raft log moves from its replicas' WALs into their
// commitlogs under load, the cluster having begun on WALs
// (RAFTMQ_RAFT_LOG=wal, as clusters before 2026-12-04 did): the move
// begins (writes to broker-a pause), each container is recreated under
// the compose file's default, --raft-log auto, which moves it as it
// starts (stopped with SIGTERM, the master last), and the move ends.
// broker-a's orderly senders wait out the pause, an outage of the
// drill's own; the round-robin sender's sends go to broker-b meanwhile,
// which stays on its WALs. Nothing acknowledged is lost and each group's
// replicas end identical.
func TestDockerDrillRaftLogMove(t *testing.T) {
	t.Setenv("RAFTMQ_RAFT_LOG", "wal")
	c := newDockerCluster(t)
	move := func() *pb.MoveRaftLogResponse {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		resp, err := c.brokers[c.awaitMaster("broker-a")].MoveRaftLog(ctx, &pb.MoveRaftLogRequest{})
		if err != nil {
			t.Logf("move-raft-log: %v", err) // a master changing hands: asked again
			return nil
		}
		return resp
	}
	var begun, ended time.Time
	h := driveDrill(t, c, func(h *History) {
		begun = time.Now()
		if resp := move(); resp == nil || resp.GroupRaftLog != pb.RaftLogPlace_RAFT_LOG_MOVING {
			t.Fatalf("the move's beginning answered %v", resp)
		}
		auto := append(os.Environ(), "RAFTMQ_RAFT_LOG=auto")
		for range dockerGroups["broker-a"] {
			name := ""
			m := c.awaitMaster("broker-a")
			for _, n := range dockerGroups["broker-a"] { // a follower on its WAL first, the master last
				if d := c.describe(n); d != nil && d.RaftLog == pb.RaftLogPlace_RAFT_LOG_WAL && (name == "" || name == m) {
					name = n
				}
			}
			at := time.Now()
			composeEnv(t, auto, "stop", "-t", "10", name)
			stopped := time.Now()
			composeEnv(t, auto, "rm", "-f", name)
			composeEnv(t, auto, "up", "-d", "--no-deps", name)
			created := time.Now()
			clustertest.WaitFor(t, 60*time.Second, name+" in the commitlog", func() bool {
				d := c.describe(name)
				return d != nil && d.RaftLog == pb.RaftLogPlace_RAFT_LOG_COMMITLOG
			})
			serving := time.Now()
			c.caughtUp(name, "broker-a")
			t.Logf("%s moved: stopped in %v, recreated in %v, serving in the commitlog %v later, caught up %v later", name,
				stopped.Sub(at).Round(time.Millisecond), created.Sub(stopped).Round(time.Millisecond),
				serving.Sub(created).Round(time.Millisecond), time.Since(serving).Round(time.Millisecond))
		}
		clustertest.WaitFor(t, 60*time.Second, "the move's end", func() bool {
			resp := move()
			return resp != nil && resp.GroupRaftLog == pb.RaftLogPlace_RAFT_LOG_COMMITLOG
		})
		ended = time.Now()
		h.Outage(begun, ended)
	})
	r := checkDrill(t, "docker raft log move", c, h)
	for _, g := range r.RecoveryGaps {
		if g > 10*time.Second {
			t.Fatalf("a write gap of %v besides the move's pause (the limit is 10 s)", g)
		}
	}
	other := h.AcksOn("broker-b", begun, ended)
	t.Logf("broker-a's writes paused %v; broker-b acknowledged %d sends meanwhile", ended.Sub(begun).Round(time.Millisecond), other)
	if other == 0 {
		t.Error("broker-b acknowledged no send while broker-a's writes paused")
	}
	for _, name := range dockerGroups["broker-b"] {
		if d := c.describe(name); d == nil || d.RaftLog != pb.RaftLogPlace_RAFT_LOG_WAL || d.GroupRaftLog != pb.RaftLogPlace_RAFT_LOG_WAL {
			t.Errorf("%s, not moved, describes itself as %v", name, d)
		}
	}
}

// composeEnv runs docker-compose with env as its environment (nil: the
// test's).
func composeEnv(t *testing.T, env []string, args ...string) {
	t.Helper()
	cmd := exec.Command("docker-compose", append([]string{"-f", composeFile}, args...)...)
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("docker-compose %s: %v: %s", strings.Join(args, " "), err, out)
	}
}
