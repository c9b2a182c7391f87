package cluster

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go.etcd.io/bbolt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/raftmq/raftmq/cluster/clustertest"
)

// The tests here run real Raft groups on loopback over the WAL log store,
// each through a restart: the cases raft-wal has had bugs in (#31, fixed
// in v0.4.2 by #33: a restart after a tail truncation), a snapshot install,
// kill -9 while segments rotate, and the move of a bolt log into the WAL.

// logFSM keeps every command it applied, in order; its snapshot is the
// whole list. It starts empty on every start of its member, so after a
// restart it holds what Raft restored and replayed from the member's own
// snapshot and log.
type logFSM struct {
	mu      sync.Mutex
	entries []string
	// restores says, of each restore, whether it was of the member's
	// own snapshot at start (SnapshotAtStart).
	restores []bool
}

func (f *logFSM) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.entries = append(f.entries, string(l.Data))
	return nil
}

func (f *logFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return listSnapshot(append([]string(nil), f.entries...)), nil
}

func (f *logFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var entries []string
	if err := json.NewDecoder(rc).Decode(&entries); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.entries = entries
	f.restores = append(f.restores, SnapshotAtStart(rc))
	return nil
}

func (f *logFSM) restored() []bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]bool(nil), f.restores...)
}

func (f *logFSM) list() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.entries...)
}

type listSnapshot []string

func (s listSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := json.NewEncoder(sink).Encode([]string(s)); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (listSnapshot) Release() {}

// testGroup is a Raft group of members in this process, each with its own
// directory and address, that tests stop and start again.
type testGroup struct {
	t      *testing.T
	cfgs   []RaftConfig
	fsms   []*logFSM
	nodes  []*RaftNode
	drains []func()
}

// drainLeaderChanges reads n's leadership changes, as a broker's leader
// loop does (Raft blocks when nobody reads them), until the returned stop
// is called.
func drainLeaderChanges(n *RaftNode) (stop func()) {
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		for {
			select {
			case <-n.LeaderChanges:
			case <-done:
				return
			}
		}
	}()
	return func() { close(done); <-exited }
}

// testRaftConfig is member id's configuration with test timings (the
// heartbeat, election and lease timeouts all of timeout) and small log
// segments, so a few entries rotate them.
func testRaftConfig(id, dir string, peers map[string]string, timeout time.Duration) RaftConfig {
	return RaftConfig{
		ID: id, Dir: dir, BindAddr: peers[id], Peers: peers,
		HeartbeatTimeout: timeout, ElectionTimeout: timeout, LeaderLeaseTimeout: timeout,
		CommitTimeout:  5 * time.Millisecond,
		LogSegmentSize: 8 << 10,
		Logger:         quiet,
	}
}

func newTestGroup(t *testing.T, n int, timeout time.Duration, mod func(*RaftConfig)) *testGroup {
	t.Helper()
	addrs := clustertest.FreeAddrs(t, n)
	peers := map[string]string{}
	for i, a := range addrs {
		peers[strconv.Itoa(i+1)] = a
	}
	g := &testGroup{t: t, fsms: make([]*logFSM, n), nodes: make([]*RaftNode, n), drains: make([]func(), n)}
	for i := range addrs {
		cfg := testRaftConfig(strconv.Itoa(i+1), t.TempDir(), peers, timeout)
		if mod != nil {
			mod(&cfg)
		}
		g.cfgs = append(g.cfgs, cfg)
	}
	t.Cleanup(func() {
		for i := range g.nodes {
			if g.nodes[i] != nil {
				g.stop(i)
			}
		}
	})
	for i := range addrs {
		g.start(i)
	}
	return g
}

// start starts member i with a new, empty state machine.
func (g *testGroup) start(i int) {
	g.t.Helper()
	g.fsms[i] = &logFSM{}
	n, err := StartRaft(g.cfgs[i], g.fsms[i])
	if err != nil {
		g.t.Fatalf("start member %d: %v", i+1, err)
	}
	g.nodes[i] = n
	g.drains[i] = drainLeaderChanges(n)
}

func (g *testGroup) stop(i int) {
	g.t.Helper()
	err := g.nodes[i].Close()
	g.drains[i]()
	if err != nil {
		g.t.Errorf("stop member %d: %v", i+1, err)
	}
	g.nodes[i] = nil
}

// leader waits for a leader among the running members and returns it.
func (g *testGroup) leader() int {
	g.t.Helper()
	at := -1
	clustertest.WaitFor(g.t, 10*time.Second, "a leader", func() bool {
		for i, n := range g.nodes {
			if n != nil && n.Raft.State() == raft.Leader {
				at = i
				return true
			}
		}
		return false
	})
	return at
}

// apply commits entries named prefix-0 .. prefix-(count-1) of 1 KiB
// through member i, one at a time.
func (g *testGroup) apply(i int, prefix string, count int) []string {
	g.t.Helper()
	return g.applySized(i, prefix, count, 1024)
}

// applySized is apply with entries of size bytes.
func (g *testGroup) applySized(i int, prefix string, count, size int) []string {
	g.t.Helper()
	var out []string
	for k := 0; k < count; k++ {
		e := entrySized(prefix, k, size)
		for {
			err := g.nodes[i].Raft.Apply([]byte(e), 5*time.Second).Error()
			if err == nil {
				break
			}
			if !errors.Is(err, raft.ErrLeadershipLost) && !errors.Is(err, raft.ErrNotLeader) {
				g.t.Fatalf("apply %s on member %d: %v", e[:len(prefix)+6], i+1, err)
			}
			// Leadership moved (an election on a loaded machine): whether
			// the entry was committed is unknown. Once the new leader's
			// barrier is applied, its state machine holds every committed
			// entry; apply again only if the entry is not among them.
			i = g.leader()
			if err := g.nodes[i].Raft.Barrier(5 * time.Second).Error(); err != nil {
				continue
			}
			if slices.Contains(g.fsms[i].list(), e) {
				break
			}
		}
		out = append(out, e)
	}
	return out
}

func entry(prefix string, k int) string { return entrySized(prefix, k, 1024) }

func entrySized(prefix string, k, size int) string {
	head := fmt.Sprintf("%s-%05d:", prefix, k)
	return head + strings.Repeat("x", size-len(head))
}

// converge waits until every running member's state machine holds want.
func (g *testGroup) converge(want []string) {
	g.t.Helper()
	for i, n := range g.nodes {
		if n == nil {
			continue
		}
		clustertest.WaitFor(g.t, 10*time.Second, fmt.Sprintf("member %d applies %d entries", i+1, len(want)), func() bool {
			return len(g.fsms[i].list()) >= len(want)
		})
		sameEntries(g.t, fmt.Sprintf("member %d", i+1), g.fsms[i].list(), want)
	}
}

func sameEntries(t *testing.T, who string, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s holds %d entries, want %d", who, len(got), len(want))
	}
	for k := range want {
		if got[k] != want[k] {
			t.Fatalf("%s: entry %d is %.16q, want %.16q", who, k, got[k], want[k])
		}
	}
}

func lastLogIndex(n *RaftNode) uint64 {
	v, _ := strconv.ParseUint(n.Raft.Stats()["last_log_index"], 10, 64)
	return v
}

// A leader cut off from its followers appends entries that never commit,
// over several log segments. The others elect a new leader that writes
// other entries at those indexes; when the old leader comes back, the new
// leader clears that suffix from its log (a tail truncation across
// segments), and the old leader then restarts on that log (raft-wal #31
// panicked here) with exactly the committed entries.
func TestFollowerRestartsAfterItsLogSuffixWasCleared(t *testing.T) {
	g := newTestGroup(t, 3, 200*time.Millisecond, func(c *RaftConfig) {
		// One entry per log append, so the suffix spans segments.
		c.MaxAppendEntries = 1
	})
	old := g.leader()
	committed := g.apply(old, "first", 20)
	g.converge(committed)

	for i := range g.nodes {
		if i != old {
			g.stop(i)
		}
	}
	before := lastLogIndex(g.nodes[old])
	var futures []raft.ApplyFuture
	for k := 0; k < 40; k++ {
		futures = append(futures, g.nodes[old].Raft.Apply([]byte(entry("lost", k)), time.Second))
	}
	for _, f := range futures {
		if f.Error() == nil {
			t.Fatal("an entry committed without a quorum")
		}
	}
	suffix := lastLogIndex(g.nodes[old]) - before
	if suffix*1024 < 2*uint64(g.cfgs[old].LogSegmentSize) {
		t.Fatalf("the old leader appended %d entries alone, want over two segments' worth", suffix)
	}
	g.stop(old)

	for i := range g.nodes {
		if i != old {
			g.start(i)
		}
	}
	committed = append(committed, g.apply(g.leader(), "second", 60)...)
	g.start(old)
	g.converge(committed)

	g.stop(old)
	g.start(old)
	g.converge(committed)
	committed = append(committed, g.apply(g.leader(), "third", 10)...)
	g.converge(committed)
}

// A member that missed what the leader's log no longer holds installs a
// snapshot, appends on after it, and restarts on that log and snapshot.
func TestRestartAfterSnapshotInstall(t *testing.T) {
	g := newTestGroup(t, 3, 50*time.Millisecond, func(c *RaftConfig) {
		c.SnapshotThreshold = 16
		c.TrailingLogs = 4
		c.SnapshotInterval = 20 * time.Millisecond
	})
	l := g.leader()
	committed := g.apply(l, "before", 10)
	g.converge(committed)
	behind := (l + 1) % 3
	missed := lastLogIndex(g.nodes[behind]) + 1
	g.stop(behind)
	committed = append(committed, g.apply(l, "while-away", 100)...)
	clustertest.WaitFor(t, 10*time.Second, "the leader's log drops what the stopped member lacks", func() bool {
		return !g.nodes[l].LogHolds(missed)
	})
	g.start(behind)
	g.converge(committed)
	// Raft restores the state machine before it records the snapshot as
	// its own (installSnapshot), so the state converges a moment before
	// the stats say so: under load that moment failed CI.
	clustertest.WaitFor(t, 5*time.Second, "the member records the snapshot it installed", func() bool {
		return g.nodes[behind].Raft.Stats()["last_snapshot_index"] != "0"
	})
	committed = append(committed, g.apply(g.leader(), "after", 10)...)
	g.converge(committed)
	// The state machine can tell a leader's snapshot from its own at start
	// (a broker copies a peer's commitlog only for the former). The leader
	// may send more than one while the member catches up.
	if got := g.fsms[behind].restored(); len(got) == 0 || slices.Contains(got, true) {
		t.Fatalf("the installs' restores, at start or not: %v; want one or more, none at start", got)
	}

	g.stop(behind)
	g.start(behind)
	g.converge(committed)
	if got := g.fsms[behind].restored(); len(got) == 0 || !got[0] || slices.Contains(got[1:], true) {
		t.Fatalf("the restart's restores, at start or not: %v; want the first at start, no other", got)
	}
}

const killChildEnv = "RAFTMQ_CLUSTER_WAL_CHILD"

// runApplyChild is the child of TestKill9DuringSegmentRotation: a
// one-member group in the directory and at the address the environment
// names, applying entry("k", n) for n = what it holds on and on, printing
// "acked n" for each, until it is killed. Segments of 4 KiB rotate every
// few entries.
func runApplyChild(spec string) {
	dir, addr, _ := strings.Cut(spec, ",")
	cfg := testRaftConfig("1", dir, map[string]string{"1": addr}, 50*time.Millisecond)
	cfg.LogSegmentSize = 4 << 10
	cfg.MaxAppendEntries = 1
	fsm := &logFSM{}
	n, err := StartRaft(cfg, fsm)
	if err != nil {
		fmt.Println("start:", err)
		os.Exit(2)
	}
	leadAlone(n)
	applyUntilKilled(n, len(fsm.list()), func(k int) []byte { return []byte(entry("k", k)) })
}

// leadAlone readies the member of a one-member group in a child process:
// its leadership changes read, leadership won, and what was committed
// before it was last killed applied (a Barrier). It exits on a failure.
func leadAlone(n *RaftNode) {
	drainLeaderChanges(n)
	for deadline := time.Now().Add(10 * time.Second); n.Raft.State() != raft.Leader; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			fmt.Println("no leadership within 10 s")
			os.Exit(2)
		}
	}
	if err := n.Raft.Barrier(5 * time.Second).Error(); err != nil {
		fmt.Println("barrier:", err)
		os.Exit(2)
	}
}

// applyUntilKilled applies entry(k) for k from from on, printing "acked k"
// once each is committed, until the process is killed.
func applyUntilKilled(n *RaftNode, from int, entry func(int) []byte) {
	for k := from; ; k++ {
		if err := n.Raft.Apply(entry(k), 5*time.Second).Error(); err != nil {
			fmt.Println("apply:", err)
			os.Exit(2)
		}
		fmt.Printf("acked %d\n", k)
	}
}

// killApplyChild runs this test binary as a child with env set, reads
// its "acked k" lines (each k one more than the last, from acked+1), kills
// it with SIGKILL once it acked want, and returns the last k it acked.
func killApplyChild(t *testing.T, env string, round, acked, want int) int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	for acked < want && sc.Scan() {
		k, err := strconv.Atoi(strings.TrimPrefix(sc.Text(), "acked "))
		if err != nil || k != acked+1 {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("round %d: child said %q after ack %d", round, sc.Text(), acked)
		}
		acked = k
	}
	cmd.Process.Signal(syscall.SIGKILL)
	for sc.Scan() { // acks written before the kill
		if k, err := strconv.Atoi(strings.TrimPrefix(sc.Text(), "acked ")); err == nil {
			acked = k
		}
	}
	cmd.Wait()
	return acked
}

// A real process applying entries to a one-member group, its log
// rotating a segment every four entries, is killed with SIGKILL at random
// moments. Every restart recovers a log that holds every acknowledged
// entry, in order, with no gap and no duplicate.
func TestKill9DuringSegmentRotation(t *testing.T) {
	dir := t.TempDir()
	addr := clustertest.FreeAddrs(t, 1)[0]
	rng := rand.New(rand.NewPCG(3, 4))
	acked := -1
	for round := 0; round < 6; round++ {
		acked = killApplyChild(t, killChildEnv+"="+dir+","+addr, round, acked, acked+10+rng.IntN(60))

		cfg := testRaftConfig("1", dir, map[string]string{"1": addr}, 50*time.Millisecond)
		cfg.LogSegmentSize = 4 << 10
		fsm := &logFSM{}
		n, err := StartRaft(cfg, fsm)
		if err != nil {
			t.Fatalf("round %d: restart after kill -9: %v", round, err)
		}
		stopDrain := drainLeaderChanges(n)
		clustertest.WaitFor(t, 5*time.Second, "leader", func() bool { return n.Raft.State() == raft.Leader })
		if err := n.Raft.Barrier(5 * time.Second).Error(); err != nil {
			t.Fatal(err)
		}
		got := fsm.list()
		if len(got) <= acked {
			n.Close()
			t.Fatalf("round %d: %d entries recovered, entry %d was acknowledged", round, len(got), acked)
		}
		for k, e := range got {
			if e != entry("k", k) {
				n.Close()
				t.Fatalf("round %d: entry %d is %.12q", round, k, e)
			}
		}
		segs, _ := filepath.Glob(filepath.Join(dir, walDirName, "*.wal"))
		t.Logf("round %d: killed after ack %d, %d entries recovered, %d segments, %d interrupted rotations so far",
			round, acked, len(got), len(segs), sealedTailRepairs.Load())
		acked = len(got) - 1
		err = n.Close()
		stopDrain()
		if err != nil {
			t.Fatal(err)
		}
	}
}

// The state a kill -9 during a rotation can leave, made on purpose: the
// tail segment sealed in its file, the metadata from before the seal. The
// WAL opens, holds every entry, and takes appends again (raft-wal v0.4.2
// alone refuses them all with "segment is sealed").
func TestWALOpensAfterRotationInterruptedBeforeMetadata(t *testing.T) {
	dir := t.TempDir()
	hlog := hclog.NewNullLogger()
	w, err := openWAL(dir, 4<<10, hlog)
	if err != nil {
		t.Fatal(err)
	}
	meta := filepath.Join(dir, "wal-meta.db")
	// Entry 1 fits the 4 KiB segment; entry 2 fills it, so the append of
	// entry 2 seals it and starts the rotation, which may or may not get
	// to the metadata before the close. The metadata from before entry 2
	// is what a crash at that moment leaves.
	big := strings.Repeat("b", 8<<10)
	if err := w.StoreLogs([]*raft.Log{{Index: 1, Term: 1, Data: []byte(entry("r", 1))}}); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(meta)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.StoreLogs([]*raft.Log{{Index: 2, Term: 1, Data: []byte(big)}}); err != nil {
		t.Fatal(err)
	}
	idx := uint64(2)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(meta, before, 0o644); err != nil {
		t.Fatal(err)
	}
	repairs := sealedTailRepairs.Load()

	w, err = openWAL(dir, 4<<10, hlog)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if last, _ := w.LastIndex(); last != idx {
		t.Fatalf("last index %d after the repair, want %d", last, idx)
	}
	want := func(k uint64) string {
		if k == 2 {
			return big
		}
		return entry("r", int(k))
	}
	for k := uint64(1); k <= idx+3; k++ {
		if k > idx {
			if err := w.StoreLogs([]*raft.Log{{Index: k, Term: 1, Data: []byte(want(k))}}); err != nil {
				t.Fatalf("append %d after the repair: %v", k, err)
			}
		}
		var l raft.Log
		if err := w.GetLog(k, &l); err != nil || string(l.Data) != want(k) {
			t.Fatalf("entry %d: %v", k, err)
		}
	}
	if sealedTailRepairs.Load() != repairs+1 {
		t.Fatal("the sealed tail was not found")
	}
}

// A member whose log is in raft.db, as raftmq kept it before the WAL,
// moves it into the WAL on its first start: the group comes up with every
// entry, bolt's log is emptied, and later starts use the WAL alone. A copy
// left half-made by a crash is thrown away and made again.
func TestBoltLogMovesIntoTheWAL(t *testing.T) {
	addrs := clustertest.FreeAddrs(t, 3)
	peers := map[string]string{"1": addrs[0], "2": addrs[1], "3": addrs[2]}
	var old []string
	for k := 0; k < 50; k++ {
		old = append(old, entry("bolt", k))
	}
	g := &testGroup{t: t, fsms: make([]*logFSM, 3), nodes: make([]*RaftNode, 3), drains: make([]func(), 3)}
	for i := 0; i < 3; i++ {
		cfg := testRaftConfig(strconv.Itoa(i+1), t.TempDir(), peers, 50*time.Millisecond)
		writeBoltLog(t, cfg, old)
		g.cfgs = append(g.cfgs, cfg)
	}
	// Member 1 crashed during an earlier move.
	junk := filepath.Join(g.cfgs[0].Dir, walMigratingName)
	if err := os.MkdirAll(junk, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(junk, "00000000000000000001-0000000000000001.wal"), []byte("torn"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for i := range g.nodes {
			if g.nodes[i] != nil {
				g.stop(i)
			}
		}
	})
	for i := range 3 {
		g.start(i)
	}
	g.converge(old)
	committed := append(old, g.apply(g.leader(), "wal", 20)...)
	g.converge(committed)
	for i, cfg := range g.cfgs {
		if _, err := os.Stat(filepath.Join(cfg.Dir, walMigratingName)); !os.IsNotExist(err) {
			t.Errorf("member %d: %s left behind (%v)", i+1, walMigratingName, err)
		}
		if last, err := g.nodes[i].boltStore.LastIndex(); err != nil || last != 0 {
			t.Errorf("member %d: bolt's log still ends at %d (%v)", i+1, last, err)
		}
	}
	for i := range 3 {
		g.stop(i)
		g.start(i)
	}
	g.converge(committed)
}

// writeBoltLog lays out cfg.Dir as raftmq did before the WAL: raft.db
// holding the bootstrap configuration at index 1 and entries from index 2,
// all of term 1.
func writeBoltLog(t *testing.T, cfg RaftConfig, entries []string) {
	t.Helper()
	bolt, err := raftboltdb.NewBoltStore(filepath.Join(cfg.Dir, boltFileName))
	if err != nil {
		t.Fatal(err)
	}
	defer bolt.Close()
	conf := raft.EncodeConfiguration(Configuration(cfg.Peers))
	logs := []*raft.Log{{Index: 1, Term: 1, Type: raft.LogConfiguration, Data: conf}}
	for k, e := range entries {
		logs = append(logs, &raft.Log{Index: uint64(k + 2), Term: 1, Type: raft.LogCommand, Data: []byte(e)})
	}
	if err := bolt.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	if err := bolt.SetUint64([]byte("CurrentTerm"), 1); err != nil {
		t.Fatal(err)
	}
}

// A sealed segment keeps no write buffer: 40 appends of 880 KiB, two to a
// segment of 1 MiB, leave the heap about as it was, and every entry reads
// back. (raft-wal v0.4.2 alone keeps a 1 MiB buffer for each: 20 MiB.)
func TestSealedSegmentsLetGoOfTheirWriteBuffers(t *testing.T) {
	dir := t.TempDir()
	w, err := openWAL(dir, 1<<20, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	data := func(k uint64) []byte { return bytes.Repeat([]byte{byte(k)}, 110<<10) }
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapInuse
	}
	before := heap()
	var idx uint64
	for appends := 0; appends < 40; appends++ {
		var batch []*raft.Log
		for k := 0; k < 8; k++ {
			idx++
			batch = append(batch, &raft.Log{Index: idx, Term: 1, Data: data(idx)})
		}
		if err := w.StoreLogs(batch); err != nil {
			t.Fatal(err)
		}
	}
	grew := int64(heap()) - int64(before)
	for k := uint64(1); k <= idx; k++ {
		var l raft.Log
		if err := w.GetLog(k, &l); err != nil || !bytes.Equal(l.Data, data(k)) {
			t.Fatalf("entry %d: %v", k, err)
		}
	}
	if names, _ := filepath.Glob(filepath.Join(dir, "*.wal")); len(names) < 20 {
		t.Fatalf("%d segments, want 20 or more", len(names))
	}
	if grew > 8<<20 {
		t.Fatalf("the heap grew by %d MiB over 20 sealed segments", grew>>20)
	}
}

// A wal-meta.db left empty or without its buckets (a disk that lost what
// it had synced; raft-wal creates the file whole) is refused with an error
// naming it. raft-wal v0.4.2 alone panics on a nil bucket.
func TestDamagedWALMetadataIsRefusedByName(t *testing.T) {
	hlog := hclog.NewNullLogger()
	for name, damage := range map[string]func(path string) error{
		"empty": func(path string) error { return os.Truncate(path, 0) },
		"no buckets": func(path string) error {
			if err := os.Remove(path); err != nil {
				return err
			}
			db, err := bbolt.Open(path, 0o644, nil)
			if err != nil {
				return err
			}
			return db.Close()
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			w, err := openWAL(dir, 4<<10, hlog)
			if err != nil {
				t.Fatal(err)
			}
			if err := w.StoreLogs([]*raft.Log{{Index: 1, Term: 1, Data: []byte(entry("r", 1))}}); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			meta := filepath.Join(dir, "wal-meta.db")
			if err := damage(meta); err != nil {
				t.Fatal(err)
			}
			w, err = openWAL(dir, 4<<10, hlog)
			if err == nil {
				w.Close()
				t.Fatal("a damaged wal-meta.db opened")
			}
			if !strings.Contains(err.Error(), meta) || !strings.Contains(err.Error(), "damaged") {
				t.Fatalf("the error does not name the damaged file: %v", err)
			}
		})
	}
}
