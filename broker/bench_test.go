package broker

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/cluster/pb"
	"github.com/raftmq/raftmq/message"
	"github.com/raftmq/raftmq/storage"
)

// Benchmarks of the whole broker group: in process, real gRPC over
// loopback, real Raft over loopback TCP with raft-boltdb stores (fsync on),
// real stores. Every replica, the Raft members and the clients share this
// process and its cores.
//
// Units: one benchmark op is one message of 1 KiB body (b.SetBytes(1024):
// MB/s is payload), whatever the messages per RPC or per Raft entry.
// "msgs/s" is b.N over the wall time of the timed part. Latency benchmarks
// report percentiles in ms. "peakRSS_MB" is the process's VmHWM, reset
// (clear_refs 5) when the benchmark function starts, read when its timed
// part ends: the peak of this run, replicas and clients together.
// "cpu_cores" is the process's user+system CPU time during the timed part
// over its wall time (2 = both cores of the machine busy).
//
// Each call of a benchmark function starts its own group (the setup is not
// timed), sends one warm-up message to every queue, waits for the group to
// be quiet and for the store's background preallocation of the commitlog
// to be done and on disk, and only then starts the timer.
//
// Raft timings: see benchTweak; the bare-Raft ceiling uses the same. The
// store is production-like (256 MiB segments, default consume queue and
// index file sizes, default flush and checkpoint intervals), as are the
// entry and message caps.

const (
	benchBody   = 1024
	benchQueues = 8
	benchTopic  = "bench"
)

// benchTweak turns the test config into a production-like one: fsync on;
// heartbeat, election and lease timeouts of 500 ms (between the tests' and
// hashicorp/raft's 1 s defaults: with the tests' 100 ms, a 3-replica group
// under batch load lost its leader within seconds on a 2-core machine,
// failing sends with NOT_LEADER); the tests' 5 ms commit timeout.
//
// RAFTMQ_BENCH_SERIAL_LEADER_LOG=1 has the master write its Raft log
// before it replicates (cluster.RaftConfig.SerialLeaderLog), for A/B runs
// of one build. RAFTMQ_BENCH_RAFT_LOG=commitlog keeps the Raft log in the
// commitlog (storage.Config.RaftLog, entrylog.go) instead of the WAL.
func benchTweak(c *Config) {
	c.Raft.SerialLeaderLog = os.Getenv("RAFTMQ_BENCH_SERIAL_LEADER_LOG") == "1"
	c.Store.RaftLog = os.Getenv("RAFTMQ_BENCH_RAFT_LOG") == "commitlog"
	c.Raft.HeartbeatTimeout = 500 * time.Millisecond
	c.Raft.ElectionTimeout = 500 * time.Millisecond
	c.Raft.LeaderLeaseTimeout = 500 * time.Millisecond
	c.Raft.CommitTimeout = 5 * time.Millisecond
	c.Store.SegmentSize = 256 << 20
	c.Store.QueueEntriesPerFile = 0 // 300,000
	c.Store.IndexSlots = 0          // 1,000,000
	c.Store.IndexEntries = 0        // 4,000,000
	c.Store.FlushInterval = 0       // 200 ms
	c.Store.CheckpointInterval = 0  // 1 s
	c.Store.RetentionAge = -1
	c.Store.RetentionDiskRatio = 2
	c.MaxMessageSize = 0 // 4 MiB
	c.EntryMaxBytes = 0  // 4 MiB
	c.OffsetCommitInterval = 0
}

func benchBodyBytes() []byte {
	rng := rand.New(rand.NewPCG(7, 11))
	body := make([]byte, benchBody)
	for i := range body {
		body[i] = byte(rng.Uint32())
	}
	return body
}

// benchGroup starts a group of n replicas with the bench config, creates
// the bench topic, warms every queue up and returns it with its master.
func benchGroup(b *testing.B, n int) (*group, int) {
	b.Helper()
	g := newGroup(b, n, benchTweak)
	g.createTopic(benchTopic, benchQueues)
	m := g.master()
	body := benchBodyBytes()
	for q := int32(0); q < benchQueues; q++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := g.client(m).SendMessage(ctx, &pb.SendMessageRequest{Topic: benchTopic, QueueId: q, Messages: []*pb.Message{{Tags: "t", Body: body}}})
		cancel()
		if err != nil {
			b.Fatalf("warm-up send: %v", err)
		}
	}
	g.quiesce()
	g.settleSegments(b)
	return g, m
}

// settleSegments waits until the background preallocation of every
// replica's commitlog (zero-filling ahead of the writer, or of a whole next
// segment, depending on the store's version) has stopped growing the files
// and is on disk, so setup I/O does not run into the timed part.
func (g *group) settleSegments(b *testing.B) {
	b.Helper()
	for _, cfg := range g.cfgs {
		dir := filepath.Join(cfg.Dir, "store", "commitlog")
		deadline := time.Now().Add(20 * time.Second)
		last, stableSince := int64(-1), time.Now()
		for time.Now().Before(deadline) {
			var sum int64
			names, _ := os.ReadDir(dir)
			for _, n := range names {
				if fi, err := n.Info(); err == nil {
					sum += fi.Size()
					if st, ok := fi.Sys().(*syscall.Stat_t); ok {
						sum += st.Blocks * 512
					}
				}
			}
			if sum != last {
				last, stableSince = sum, time.Now()
			} else if time.Since(stableSince) >= 100*time.Millisecond {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		names, _ := os.ReadDir(dir)
		for _, n := range names {
			if f, err := os.Open(filepath.Join(dir, n.Name())); err == nil {
				f.Sync() // waits for the zero-fill's writeback
				f.Close()
			}
		}
	}
}

// term is the Raft term on the master's replica.
func (g *group) benchTerm(m int) uint64 { return g.brokers[m].term() }

// --- RSS and percentiles ---------------------------------------------------

func resetPeakRSS() { _ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

// peakRSSMB is VmHWM in MiB; 0 when unknown.
func peakRSSMB() float64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			if err != nil {
				return 0
			}
			return kb / 1024
		}
	}
	return 0
}

// cpuTime is the process's user plus system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the cores the process kept busy, on average, since
// cpu0 (a cpuTime) over elapsed: 2 is both cores of this machine.
func reportCPU(b *testing.B, cpu0 time.Duration, elapsed time.Duration) {
	if elapsed > 0 {
		b.ReportMetric(float64(cpuTime()-cpu0)/float64(elapsed), "cpu_cores")
	}
}

func reportPeakRSS(b *testing.B) {
	if mb := peakRSSMB(); mb > 0 {
		b.ReportMetric(mb, "peakRSS_MB")
	}
}

// pct is the nearest-rank q-quantile of sorted d, in ms.
func pct(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.999999) - 1
	i = min(max(i, 0), len(sorted)-1)
	return float64(sorted[i]) / float64(time.Millisecond)
}

func reportPercentiles(b *testing.B, name string, d []time.Duration) {
	s := slices.Clone(d)
	slices.Sort(s)
	b.ReportMetric(pct(s, 0.50), name+"_p50_ms")
	b.ReportMetric(pct(s, 0.99), name+"_p99_ms")
}

// claim takes up to k of the messages left in *left; 0 when none are.
func claim(left *atomic.Int64, k int) int {
	after := left.Add(-int64(k))
	before := after + int64(k)
	if before <= 0 {
		return 0
	}
	return int(min(int64(k), before))
}

// --- 1. produce throughput -------------------------------------------------

// BenchmarkProduce1Replica and BenchmarkProduce3Replica: senders
// goroutines share one client connection to the master; sender i sends to
// queue i%8, one message (batch=1) or 32 messages (batch=32) per
// SendMessage, each waiting for its answer before the next. b.N messages in
// all. rpc_p50/p99 is the SendMessage latency the senders saw. enc=records
// sends the messages encoded as records (what the SDK's producer sends),
// enc=fields as protobuf fields (what older producers send).
func BenchmarkProduce1Replica(b *testing.B) { benchProduceMatrix(b, 1) }
func BenchmarkProduce3Replica(b *testing.B) { benchProduceMatrix(b, 3) }

func benchProduceMatrix(b *testing.B, replicas int) {
	for _, batch := range []int{1, 32} {
		for _, senders := range []int{16, 256} {
			for _, records := range []bool{true, false} {
				enc := map[bool]string{true: "records", false: "fields"}[records]
				b.Run(fmt.Sprintf("senders=%d/batch=%d/enc=%s", senders, batch, enc), func(b *testing.B) {
					benchProduce(b, replicas, senders, batch, records)
				})
			}
		}
	}
}

func benchProduce(b *testing.B, replicas, senders, batch int, records bool) {
	resetPeakRSS()
	g, m := benchGroup(b, replicas)
	client := g.client(m)
	body := benchBodyBytes()
	msgs := make([]*pb.Message, batch)
	for i := range msgs {
		msgs[i] = &pb.Message{Tags: "t", Body: body}
	}
	// encoded[q][:k] is the first k messages as records for queue q.
	encoded := make([][][]byte, benchQueues)
	for q := range encoded {
		var buf []byte
		for range batch {
			var err error
			if buf, err = message.Append(buf, &message.Message{Topic: benchTopic, QueueID: int32(q), Tags: "t", Body: body}); err != nil {
				b.Fatal(err)
			}
			encoded[q] = append(encoded[q], buf)
		}
	}
	term0 := g.benchTerm(m)

	var left atomic.Int64
	left.Store(int64(b.N))
	var failures atomic.Int64
	var firstErr atomic.Value
	lat := make([][]time.Duration, senders)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for s := 0; s < senders; s++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for {
				n := claim(&left, batch)
				if n == 0 {
					return
				}
				q := s % benchQueues
				req := &pb.SendMessageRequest{Topic: benchTopic, QueueId: int32(q), Messages: msgs[:n]}
				if records {
					req.Messages, req.Records = nil, encoded[q][n-1]
				}
				t0 := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				_, err := client.SendMessage(ctx, req)
				cancel()
				lat[s] = append(lat[s], time.Since(t0))
				if err != nil {
					if failures.Add(1) == 1 {
						firstErr.Store(err)
					}
				}
			}
		}()
	}
	timedRun(b, start, &wg, &failures, &firstErr, "sends")
	reportPercentiles(b, "rpc", slices.Concat(lat...))
	reportPeakRSS(b)
	if t := g.benchTerm(m); t != term0 {
		b.Logf("Raft term went from %d to %d during the run", term0, t)
	}
}

// --- 2. sync-send latency ----------------------------------------------------

// BenchmarkSendLatency3Replica: one sender, one 1 KiB message per
// SendMessage, each answered before the next, round robin over the queues.
func BenchmarkSendLatency3Replica(b *testing.B) {
	resetPeakRSS()
	g, m := benchGroup(b, 3)
	client := g.client(m)
	body := benchBodyBytes()
	lat := make([]time.Duration, 0, b.N)
	b.SetBytes(benchBody)
	b.ResetTimer()
	cpu0, t0 := cpuTime(), time.Now()
	for i := 0; i < b.N; i++ {
		req := &pb.SendMessageRequest{Topic: benchTopic, QueueId: int32(i % benchQueues), Messages: []*pb.Message{{Tags: "t", Body: body}}}
		s := time.Now()
		if _, err := client.SendMessage(context.Background(), req); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(s))
	}
	elapsed := time.Since(t0)
	b.StopTimer()
	reportCPU(b, cpu0, elapsed)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
	reportPercentiles(b, "send", lat)
	reportPeakRSS(b)
}

// --- 3. arrival to held-pull answer ------------------------------------------

// BenchmarkHeldPullLatency3Replica: per op, a pull is held on the master
// (suspend 60 s; the periodic hold check runs every 30 s, so only the
// arrival answers it), then one 1 KiB message is sent to its queue. Times,
// all taken in this process:
//
//	send:  SendMessage call -> its answer (replication + apply + gRPC)
//	pull:  SendMessage call -> the held pull's answer at the client
//	apply_to_answer: the master's state machine appended the message
//	       (its appended hook, which wakes held pulls) -> the pull's
//	       answer at the client: the notify path
//	ack_to_answer: the send's answer -> the pull's answer (negative when
//	       the pull is answered first; reported as signed ms)
func BenchmarkHeldPullLatency3Replica(b *testing.B) {
	resetPeakRSS()
	g, m := benchGroup(b, 3)
	br := g.brokers[m]
	// Stamp the master's appends. The field is read only by send entries,
	// all of which come after this write (through gRPC, the batcher and
	// Raft's apply channel).
	var applied atomic.Int64
	prev := br.fsm.appended
	br.fsm.appended = func(res []storage.AppendResult) {
		applied.Store(time.Now().UnixNano())
		prev(res)
	}
	client := g.client(m)
	body := benchBodyBytes()
	const queue = 3
	_, next := br.store.QueueOffsets(benchTopic, queue)

	type answer struct {
		resp *pb.PullMessageResponse
		err  error
		at   time.Time
	}
	var sendLat, pullLat, notifyLat []time.Duration
	var ackToAnswer []time.Duration
	b.SetBytes(benchBody)
	b.ResetTimer()
	cpu0, t0 := cpuTime(), time.Now()
	for i := 0; i < b.N; i++ {
		out := make(chan answer, 1)
		go func(off int64) {
			resp, err := client.PullMessage(context.Background(), &pb.PullMessageRequest{
				ConsumerGroup: "bench", Topic: benchTopic, QueueId: queue, QueueOffset: off, SuspendTimeoutMs: 60_000,
			})
			out <- answer{resp, err, time.Now()}
		}(next)
		deadline := time.Now().Add(10 * time.Second)
		for br.holds.size() != 1 {
			if time.Now().After(deadline) {
				b.Fatal("pull not held within 10 s")
			}
			time.Sleep(20 * time.Microsecond)
		}
		t0 := time.Now()
		if _, err := client.SendMessage(context.Background(), &pb.SendMessageRequest{
			Topic: benchTopic, QueueId: queue, Messages: []*pb.Message{{Tags: "t", Body: body}},
		}); err != nil {
			b.Fatal(err)
		}
		acked := time.Now()
		a := <-out
		if a.err != nil {
			b.Fatal(a.err)
		}
		if a.resp.Status != pb.PullStatus_PULL_FOUND || len(a.resp.Records) != 1 || a.resp.NextBeginOffset != next+1 {
			b.Fatalf("held pull answered %v with %d records, next %d (want %d)", a.resp.Status, len(a.resp.Records), a.resp.NextBeginOffset, next+1)
		}
		next++
		sendLat = append(sendLat, acked.Sub(t0))
		pullLat = append(pullLat, a.at.Sub(t0))
		notifyLat = append(notifyLat, a.at.Sub(time.Unix(0, applied.Load())))
		ackToAnswer = append(ackToAnswer, a.at.Sub(acked))
	}
	b.StopTimer()
	reportCPU(b, cpu0, time.Since(t0))
	reportPercentiles(b, "send", sendLat)
	reportPercentiles(b, "pull", pullLat)
	reportPercentiles(b, "apply_to_answer", notifyLat)
	reportPercentiles(b, "ack_to_answer", ackToAnswer)
	reportPeakRSS(b)
}

// --- 4. bare hashicorp/raft ceiling ------------------------------------------

// nopFSM counts what it applies and snapshots nothing.
type nopFSM struct{ applied atomic.Uint64 }

func (f *nopFSM) Apply(*raft.Log) any { f.applied.Add(1); return nil }
func (f *nopFSM) Snapshot() (raft.FSMSnapshot, error) {
	return nopSnapshot{}, nil
}
func (f *nopFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	_, err := io.Copy(io.Discard, rc)
	return err
}

type nopSnapshot struct{}

func (nopSnapshot) Persist(sink raft.SnapshotSink) error { return sink.Close() }
func (nopSnapshot) Release()                             {}

// BenchmarkRaftApply3Node is the ceiling: three hashicorp/raft members in
// this process started by cluster.StartRaft (raft-boltdb, fsync on, the
// broker benchmarks' Raft timings, the same TCP transport) over a state machine that
// does nothing. appliers goroutines each call Apply on the leader and wait
// for it; an entry is one 1 KiB message (entry=1KiB, a Raft entry per
// message) or 32 of them (entry=32x1KiB, 32 KiB entries, as a send batch
// or a group-commit entry). One op is one 1 KiB message.
func BenchmarkRaftApply3Node(b *testing.B) {
	for _, per := range []int{1, 32} {
		for _, appliers := range []int{16, 256} {
			name := fmt.Sprintf("entry=1KiB/appliers=%d", appliers)
			if per > 1 {
				name = fmt.Sprintf("entry=%dx1KiB/appliers=%d", per, appliers)
			}
			b.Run(name, func(b *testing.B) { benchRaftApply(b, per, appliers) })
		}
	}
}

func benchRaftApply(b *testing.B, per, appliers int) {
	resetPeakRSS()
	leader := startBareRaft(b, 3)
	entry := make([]byte, per*benchBody)
	copy(entry, benchBodyBytes())
	for i := benchBody; i < len(entry); i += benchBody {
		copy(entry[i:], entry[:benchBody])
	}
	// Warm-up: one entry committed.
	if err := leader.Apply(entry, 10*time.Second).Error(); err != nil {
		b.Fatal(err)
	}

	var left atomic.Int64
	left.Store(int64(b.N))
	var failures atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	start := make(chan struct{})
	for a := 0; a < appliers; a++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for {
				n := claim(&left, per)
				if n == 0 {
					return
				}
				if err := leader.Apply(entry[:n*benchBody], 30*time.Second).Error(); err != nil {
					if failures.Add(1) == 1 {
						firstErr.Store(err)
					}
				}
			}
		}()
	}
	timedRun(b, start, &wg, &failures, &firstErr, "applies")
	reportPeakRSS(b)
}

// startBareRaft starts an n-member Raft group with the bench timings and
// returns its leader; b's cleanup shuts every member down.
func startBareRaft(b *testing.B, n int) *raft.Raft {
	b.Helper()
	dir := b.TempDir()
	addrs := clustertest.FreeAddrs(b, n)
	var nodes []*cluster.RaftNode
	stop := make(chan struct{})
	var drain sync.WaitGroup
	b.Cleanup(func() {
		for _, nd := range nodes {
			if err := nd.Close(); err != nil {
				b.Logf("close raft member: %v", err)
			}
		}
		close(stop)
		drain.Wait()
	})
	for id := 1; id <= n; id++ {
		cfg := testConfig(dir, id, addrs, addrs)
		benchTweak(&cfg)
		rc := cfg.Raft
		rc.ID = strconv.Itoa(id)
		rc.Dir = filepath.Join(dir, fmt.Sprintf("r%d", id), "raft")
		rc.Logger = quiet
		nd, err := cluster.StartRaft(rc, &nopFSM{})
		if err != nil {
			b.Fatal(err)
		}
		nodes = append(nodes, nd)
		drain.Add(1)
		go func() { // LeaderChanges must be read all the time
			defer drain.Done()
			for {
				select {
				case <-nd.LeaderChanges:
				case <-stop:
					return
				}
			}
		}()
	}
	var leader *raft.Raft
	waitFor(b, 10*time.Second, func() bool {
		for _, nd := range nodes {
			if nd.Raft.State() == raft.Leader {
				leader = nd.Raft
				return true
			}
		}
		return false
	})
	if err := leader.Barrier(10 * time.Second).Error(); err != nil {
		b.Fatal(err)
	}
	return leader
}

// timedRun times the workers waiting on start from their release to their
// end, reports msgs/s and CPU, and fails the benchmark if any op failed.
func timedRun(b *testing.B, start chan struct{}, wg *sync.WaitGroup, failures *atomic.Int64, firstErr *atomic.Value, what string) {
	b.SetBytes(benchBody)
	b.ResetTimer()
	cpu0, t0 := cpuTime(), time.Now()
	close(start)
	wg.Wait()
	elapsed := time.Since(t0)
	b.StopTimer()
	if n := failures.Load(); n > 0 {
		b.Fatalf("%d of the %s failed; first: %v", n, what, firstErr.Load())
	}
	reportCPU(b, cpu0, elapsed)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
}
