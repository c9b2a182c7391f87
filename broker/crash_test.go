package broker

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

const childEnv = "RAFTMQ_BROKER_CHILD"

// childSpec is what a child process needs to run replica ID of a test group.
type childSpec struct {
	Dir       string
	ID        int
	GRPCAddrs []string
	RaftAddrs []string
	RaftLog   bool // Store.RaftLog: the commitlog as the Raft log
	// KillAfter: the child kills itself (SIGKILL) after this step of a
	// move into the commitlog (moveStopsAfter), as a crash there would.
	KillAfter string
}

// runChildBroker runs one replica until it is killed; it says "ready" on
// stdout once it serves.
func runChildBroker() {
	var spec childSpec
	if err := json.Unmarshal([]byte(os.Getenv(childEnv)), &spec); err != nil {
		fmt.Println("bad spec:", err)
		os.Exit(2)
	}
	cfg := testConfig(spec.Dir, spec.ID, spec.GRPCAddrs, spec.RaftAddrs)
	cfg.Store.RaftLog = spec.RaftLog
	if spec.KillAfter != "" {
		moveStopsAfter = func(step string) error {
			if step == spec.KillAfter {
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {}
			}
			return nil
		}
	}
	b, err := Start(cfg)
	if err != nil {
		fmt.Println("start:", err)
		os.Exit(2)
	}
	_ = b
	fmt.Println("ready")
	select {}
}

// startChild starts cfg's replica as a child process and waits until it
// serves.
func startChild(t testing.TB, cfg Config) *exec.Cmd {
	t.Helper()
	cmd, out := launchChild(t, cfg, "")
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child replica %d: %q %v", cfg.ReplicaID, line, err)
	}
	return cmd
}

// launchChild starts replica cfg in a child process (killing itself
// after step killAfter of a move, when not "") and returns it with its
// stdout.
func launchChild(t testing.TB, cfg Config, killAfter string) (*exec.Cmd, io.Reader) {
	t.Helper()
	grpcAddrs := make([]string, len(cfg.Raft.Peers))
	raftAddrs := make([]string, len(cfg.Raft.Peers))
	for id, addr := range cfg.Raft.Peers {
		var n int
		fmt.Sscan(id, &n)
		raftAddrs[n-1] = addr
	}
	// The test config derives every replica's gRPC address from its index;
	// children need them all only to build the same config.
	grpcAddrs[cfg.ReplicaID-1] = cfg.GRPCAddr
	spec, _ := json.Marshal(childSpec{Dir: dirOf(cfg), ID: int(cfg.ReplicaID), GRPCAddrs: grpcAddrs, RaftAddrs: raftAddrs, RaftLog: cfg.Store.RaftLog, KillAfter: killAfter})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+string(spec))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, out
}

// dirOf is the group directory a replica's config was made from.
func dirOf(cfg Config) string {
	return cfg.Dir[:len(cfg.Dir)-len(fmt.Sprintf("/r%d", cfg.ReplicaID))]
}

// Replicas are real processes killed with SIGKILL at random moments under
// load, the master among them, and restarted on their data: no acked
// message is lost, and after catching up every replica's commitlog is
// byte-identical (no duplicate and no gap from replaying the Raft log).
func TestHardKilledReplicasRecover(t *testing.T) {
	g := makeGroup(t, 3, true, nil)
	g.createTopic("crash", 3)
	rng := rand.New(rand.NewPCG(11, 12))
	l := g.startLoad(t, 8, "crash", 3, 15*time.Second)
	for round := 0; round < 5; round++ {
		l.grow(t, 50+rng.IntN(200))
		victim := rng.IntN(3)
		if round%2 == 0 {
			victim = g.master()
		}
		g.procs[victim].Process.Signal(syscall.SIGKILL)
		g.procs[victim].Wait()
		g.procs[victim] = nil
		time.Sleep(time.Duration(rng.IntN(200)) * time.Millisecond) // a random outage, not a wait for a condition
		g.start(victim)
		t.Logf("round %d: killed replica %d after %d acks", round, victim+1, l.count())
	}
	l.grow(t, 100)
	acks := l.end()
	if t.Failed() {
		return
	}
	t.Logf("%d messages acknowledged", len(acks))
	g.checkIdentical(acks)
}
