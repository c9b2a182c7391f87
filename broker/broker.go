package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"golang.org/x/net/netutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/pb"
	"github.com/raftmq/raftmq/remoting"
	"github.com/raftmq/raftmq/storage"
)

// Broker is one replica of a broker group: its store, its Raft member (the
// leader is the group's master), and the gRPC services.
type Broker struct {
	cfg  Config
	log  *slog.Logger
	self int32

	store *storage.Store
	meta  *metadata
	fsm   *fsm
	node  *cluster.RaftNode
	ms    *cluster.Membership // nil without gossip
	ops   *cluster.OpsServer  // nil without HTTPAddr
	// stopRaftMetrics gives back the process's go-metrics sink
	// (Config.RaftMetrics); nil without it.
	stopRaftMetrics func()
	metrics         *metrics

	grpc *grpc.Server
	lis  net.Listener

	batcher  *batcher
	calls    raftCalls
	proposer proposer   // Raft entries through node, counted in calls
	gate     *writeGate // the pause of writes for a Raft log's move (raftlogmove.go)
	holds    *holdService
	// sendWorkers run streamed sends (sendworkers.go).
	sendWorkers *sendWorkers
	// producerIDs counts the producer ids issued per connection
	// (producers.go).
	producerIDs *producerIDs
	offsets     *offsetCommitter
	consumers   *consumerTable
	resets      *offsetResets // the master's notices of reset offsets (resets.go)
	// checkStreams: the transactional producers' check-back streams open
	// to this replica as master (checkstreams.go).
	checkStreams *checkStreams
	remoting     *remoting.Server // RocketMQ's clients on the gRPC port (remoting.go); nil when off
	// clientConns are the clients that heartbeat here, by their
	// connections (clientconns.go).
	clientConns *clientConns
	locks       *queueLocks

	// master: leader and past the Barrier that makes its state complete.
	master atomic.Bool
	// catchUps counts commitlog copies from peers (snapshot restores).
	catchUps atomic.Int64
	delays   []time.Duration // retry delay levels 1..n
	ladder   timerLadder     // the timer ladder's delays (timers.go)

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed atomic.Bool
	// closing is closed when Close begins: it ends the send streams
	// (sendstream.go), which would otherwise hold gRPC's graceful stop.
	closing chan struct{}
	// moveBegun: this replica applied the move of the group's Raft log
	// (raftlogmove.go), and snapshots.
	moveBegun chan struct{}
}

// Start opens the replica's store, starts its Raft member (bootstrapping
// the group on first start) and serves gRPC on cfg.GRPCAddr.
func Start(cfg Config) (*Broker, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	delays, err := parseDelayLevels(cfg.DelayLevels)
	if err != nil {
		return nil, err
	}
	if len(delays) > timerQueueBase {
		return nil, fmt.Errorf("broker: %d delay levels, more than %d", len(delays), timerQueueBase)
	}
	// How long each part of the start took, in the "broker started" line:
	// a restart after a power cut took seconds more in each round of the
	// long power-loss drill, after the store had recovered.
	began := time.Now()
	// The store recovers its commitlog by the rules of its Raft log's
	// place: asked for the other place, refuse before it opens.
	if cfg, err = moveIntoCommitlogIfDue(cfg); err != nil { // raftlogconvert.go
		return nil, err
	}
	if _, err := cluster.CheckRaftLogPlace(cfg.Raft.Dir, cfg.Store.RaftLog); err != nil {
		return nil, err
	}
	store, err := storage.Open(cfg.Store)
	if err != nil {
		return nil, err
	}
	storeOpened := time.Now()
	b := &Broker{
		cfg:          cfg,
		log:          cfg.Logger,
		self:         cfg.ReplicaID,
		store:        store,
		meta:         newMetadata(cfg.DedupWindow.Milliseconds(), cfg.MaxProducers),
		locks:        newQueueLocks(),
		resets:       newOffsetResets(),
		checkStreams: newCheckStreams(),
		closing:      make(chan struct{}),
		delays:       delays,
		ladder:       ladderFor(cfg),
	}
	b.producerIDs = newProducerIDs(cfg.MaxProducersPerConn)
	b.holds = newHoldService(cfg, store, b.master.Load)
	b.clientConns = newClientConns()
	b.consumers = newConsumerTable(cfg.ConsumerExpiry, func(group string) {
		b.holds.wakeGroup(group)
		b.clientConns.notify(group)
	})
	b.ctx, b.cancel = context.WithCancel(context.Background())
	b.fsm = &fsm{store: store, meta: b.meta, log: b.log, appended: b.holds.appended, stopped: make(chan struct{})}
	b.fsm.catchUp = b.catchUp
	b.fsm.onFail = b.onStoreFailed
	b.moveBegun = make(chan struct{}, 1)
	b.fsm.onMoveBegun = func() {
		select {
		case b.moveBegun <- struct{}{}:
		default:
		}
	}
	b.metrics = newMetrics(b)
	b.offsets = newOffsetCommitter(cfg.OffsetCommitInterval, b.meta, b.master.Load, b.apply, b.log)

	if b.lis, err = net.Listen("tcp", cfg.GRPCAddr); err != nil {
		store.Close()
		return nil, fmt.Errorf("broker: listen on %s: %w", cfg.GRPCAddr, err)
	}
	if cfg.Store.RaftLog { // entrylog.go
		cfg.Raft.EntryLog, cfg.Raft.RecordsAt = storeEntryLog{store}, recordsAt
		b.fsm.dispatchMode = true
	}
	// The Raft log must reach what the store applied from it (cluster:
	// checkLogHolds).
	cfg.Raft.AppliedIndex = store.WrittenRaftIndex()
	raftBegan := time.Now()
	if b.node, err = cluster.StartRaft(cfg.Raft, b.fsm); err != nil {
		b.lis.Close()
		store.Close()
		return nil, err
	}
	b.gate = &writeGate{moving: b.fsm.moving}
	b.proposer = proposer{apply: b.node.Apply, calls: &b.calls, replicationError: b.replicationError, gate: b.gate}
	b.batcher = newBatcher(cfg, b.proposer, b.metrics)
	unary, stream := b.serverInterceptors()
	b.grpc = grpc.NewServer(
		b.serverCreds(),
		grpc.NumStreamWorkers(uint32(max(cfg.StreamWorkers, 0))),
		grpc.ChainUnaryInterceptor(unary...),
		grpc.ChainStreamInterceptor(stream...),
		grpc.MaxConcurrentStreams(uint32(cfg.MaxConcurrentStreams)),
		// Static windows: no bandwidth ping after nearly every message
		// (cluster/pb/flowwindows.go).
		grpc.StaticStreamWindowSize(int32(cfg.StreamWindow)),
		grpc.StaticConnWindowSize(int32(cfg.ConnWindow)),
		grpc.MaxRecvMsgSize(cfg.EntryMaxBytes+1<<20),
		recvBuffers(), // grpcbuffers.go
		grpc.MaxSendMsgSize(maxResponseSize(cfg)),
		// A held pull is an idle RPC for up to its suspend timeout.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		// Consumers leave their groups when their connection ends
		// (clientconns.go).
		grpc.StatsHandler(connTracker{ended: func(c *grpcConn) { b.connClosed(c); b.producerIDs.closed(c) }, streamedSends: cfg.MaxConcurrentStreams}),
	)
	b.sendWorkers = b.startSendWorkers(max(cfg.StreamWorkers, 0)) // stopped by b.cancel, on every path from here
	pb.RegisterBrokerServer(b.grpc, &service{b: b})

	raftStarted := time.Now()
	if err = b.startGossip(); err == nil {
		err = b.startOps()
	}
	gossipStarted := time.Now()
	if err != nil {
		if b.ms != nil {
			b.ms.Close()
		}
		b.grpc.Stop() // its stream workers
		b.cancel()
		b.node.Close()
		b.lis.Close()
		store.Close()
		return nil, err
	}
	b.goLoop(b.watchStore)
	b.goLoop(b.leaderLoop)
	b.goLoop(b.batcher.run)
	b.goLoop(b.holds.run)
	b.goLoop(b.offsets.run)
	b.goLoop(b.scheduleLoop)
	b.goLoop(b.moveSnapshotLoop)
	b.goLoop(b.transactionCheckLoop)
	served := netutil.LimitListener(b.lis, b.cfg.MaxConnections)
	if !cfg.DisableRemoting {
		b.remoting = remoting.NewServer(remoting.ServerConfig{Handlers: b.remotingHandlers(), OnClose: b.remotingClosed, Logger: b.log})
		if cfg.TLS != nil {
			served = remoting.ShareTLS(served, cfg.TLS.ServerConfig(), b.remoting, &b.wg)
		} else {
			served = remoting.Share(served, b.remoting, &b.wg)
		}
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		if err := b.grpc.Serve(served); err != nil {
			b.log.Error("grpc server stopped", "err", err)
		}
	}()
	st := b.node.Started // raft_start's parts (cluster.StartTimes says which grow)
	b.log.Info("broker started", "grpc", cfg.AdvertiseGRPC, "raft", cfg.Raft.BindAddr, "raft_log", RaftLogFlag(b.fsm.ownRaftLog()),
		"store_open", storeOpened.Sub(began), "raft_start", raftStarted.Sub(raftBegan),
		slog.Group("raft_steps", "stable_open", st.StableOpen, "log_open", st.LogOpen, "snapshots_open", st.SnapshotsOpen,
			"new_raft", st.NewRaft, "restore", st.Restore, "entries_after_snapshot", st.EntriesAfterSnapshot),
		"gossip_and_ops", gossipStarted.Sub(raftStarted), "total", time.Since(began))
	return b, nil
}

func (b *Broker) goLoop(f func(ctx context.Context)) {
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		f(b.ctx)
	}()
}

// Addr is the address the gRPC server listens on.
func (b *Broker) Addr() string { return b.lis.Addr().String() }

// OpsAddr is where /metrics and /healthz are served ("" when off).
func (b *Broker) OpsAddr() string {
	if b.ops == nil {
		return ""
	}
	return b.ops.Addr()
}

// IsMaster reports whether this replica is the group's master now.
func (b *Broker) IsMaster() bool { return b.master.Load() }

// HeldPulls is the number of pulls held for long polling now.
func (b *Broker) HeldPulls() int { return b.holds.size() }

// Raft is the replica's Raft member (for tests and tooling).
func (b *Broker) Raft() *raft.Raft { return b.node.Raft }

// Store is the replica's store (for tests and tooling).
func (b *Broker) Store() *storage.Store { return b.store }

// Close stops serving, answers held pulls, stops Raft and closes the store.
// It does not hand leadership over; see TransferLeadership.
func (b *Broker) Close() error {
	if !b.closed.CompareAndSwap(false, true) {
		return nil
	}
	b.master.Store(false)
	close(b.closing)
	b.holds.wakeAll()
	b.checkStreams.closeAll()
	if b.ops != nil {
		b.ops.Close()
	}
	stopped := make(chan struct{})
	go func() {
		b.grpc.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(2 * time.Second):
		b.grpc.Stop()
		<-stopped
	}
	if b.remoting != nil {
		b.lis.Close() // ends the demux's accept loop
		b.remoting.Close()
	}
	// Cancel first: the loops stop (gossip updates among them), and a
	// snapshot restore copying the commitlog (catch-up), which holds the
	// state machine Raft's shutdown waits for, gives up.
	b.cancel()
	if b.ms != nil {
		// Leave, so name servers drop this replica from routes.
		if err := b.ms.Close(); err != nil {
			b.log.Warn("leaving gossip", "err", err)
		}
	}
	b.calls.close()
	err := b.node.Close()
	b.wg.Wait()
	if b.stopRaftMetrics != nil {
		b.stopRaftMetrics()
	}
	if serr := b.store.Close(); err == nil {
		err = serr
	}
	return err
}

// TransferLeadership hands the master role to another replica (on SIGTERM,
// before Close), so writers wait for no election. hashicorp/raft gives a
// transfer one election timeout and then keeps the leadership ("leadership
// transfer timeout"); a follower busy on a loaded machine can need longer,
// so a timed-out transfer is tried again, up to transferTries times.
func (b *Broker) TransferLeadership() error {
	if !b.calls.begin() {
		return nil
	}
	defer b.calls.end()
	if b.node.Raft.State() == raft.Leader && b.fsm.failed() == nil {
		// The commits that rode on pulls since the last flush, or the
		// next master would answer the group with older offsets.
		b.offsets.flush(b.ctx)
	}
	err := b.handOver(b.node.Raft.LeadershipTransfer)
	if errors.Is(err, raft.ErrNotLeader) {
		return nil
	}
	return err
}

// handOver runs the leadership transfer start begins, tried again as
// retryTransfer says while this replica leads, up to transferTries times.
func (b *Broker) handOver(start func() raft.Future) error {
	leading := func() bool { return b.node.Raft.State() == raft.Leader }
	return retryTransfer(b.transferTries(), leading, func() error { return start().Error() })
}

// retryTransfer runs transfer, a leadership transfer, up to tries times
// while leading says this replica still leads. Besides a follower too
// busy to win within the transfer's election timeout, a transfer fails when
// its TimeoutNow goes out on a pooled connection to a replica that has
// restarted since: hashicorp/raft's NetworkTransport finds a stale
// connection only by using it ("failed to make TimeoutNow RPC to 3: EOF",
// TestProducerSequencesSurviveSnapshotsAndRestarts in CI on 1e643f6, and in
// 7 of 200 runs in a loop; 0 of 250 with the tries), and drops it, so the
// next try takes another pooled connection or dials afresh.
// ErrNotLeader and ErrLeadershipTransferInProgress end it at once: no try
// of this replica's can change those.
func retryTransfer(tries int, leading func() bool, transfer func() error) error {
	var err error
	for range tries {
		if !leading() {
			return nil
		}
		err = transfer()
		if err == nil || errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipTransferInProgress) {
			return err
		}
	}
	return err
}

// transferTries bounds a leadership transfer's attempts: one more than
// the connections the transport pools per peer (3 by default), so that
// the last dials afresh even if every pooled one went stale, and at least
// 3 for a follower that is slow to win.
func (b *Broker) transferTries() int { return max(3, b.node.PooledConns()+1) }

// leaderLoop is the only reader of Raft's leadership notifications. A new
// leader first waits on a Barrier (every earlier entry applied: the store
// and metadata are complete), announces its gRPC address through the log,
// and only then serves as master. A leader that steps down answers its
// held pulls so consumers go to the new master.
func (b *Broker) leaderLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case leader := <-b.node.LeaderChanges:
			if !leader {
				if b.master.Swap(false) {
					b.log.Info("no longer master")
				}
				b.resets.clear()
				b.gate.reopen()
				b.holds.wakeAll()
				b.checkStreams.closeAll()
				continue
			}
			elected := time.Now()
			if err := b.barrier(); err != nil {
				b.log.Warn("barrier as new leader failed", "err", err)
				continue
			}
			if err := b.apply(ctx, &pb.RaftCommand{Command: &pb.RaftCommand_Announce{Announce: &pb.MasterAnnounce{
				ReplicaId: b.self, GrpcAddress: b.cfg.AdvertiseGRPC, RaftLog: b.fsm.ownRaftLog(), // raftlogplace.go
			}}}); err != nil {
				b.log.Warn("announce as new master failed", "err", err)
				continue
			}
			if b.node.Raft.State() == raft.Leader && b.fsm.failed() == nil {
				b.master.Store(true)
				if b.fsm.failed() != nil { // onStoreFailed ran in between
					b.master.Store(false)
					continue
				}
				// ready_after: from leadership to serving, mostly the
				// Barrier's wait for the state machine to replay the
				// entries after its snapshot (cluster.StartTimes).
				b.log.Info("serving as master", "term", b.term(), "ready_after", time.Since(elected))
			}
		}
	}
}

func (b *Broker) term() uint64 {
	t, _ := strconv.ParseUint(b.node.Raft.Stats()["term"], 10, 64)
	return t
}

// raftCalls counts the Raft applies, barriers and leadership transfers
// waiting for their answers. hashicorp/raft v1.7.3 never answers a future
// still in its queues when it shuts down (the buffered apply channel, with
// BatchApplyCh; the channel to the state machine), so its waiter would
// wait for ever (seen here: a test's Close hung for good on a send
// proposed just before its master's Raft shut down). So Raft is shut down
// only after close has refused new calls and every call in flight has its
// answer, which a running Raft gives: committed and applied, leadership
// lost (a leader without a quorum steps down within LeaderLeaseTimeout),
// or not leader.
type raftCalls struct {
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// begin registers a call about to be made; false once closed (the call must
// not be made). end, once the call's future has answered.
func (c *raftCalls) begin() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.wg.Add(1)
	return true
}

func (c *raftCalls) end() { c.wg.Done() }

// close refuses new calls and waits for the calls in flight. Safe to call
// more than once, and from several goroutines.
func (c *raftCalls) close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.wg.Wait()
}

// proposer hands entries to the replica's Raft member: each is counted in
// calls from its Apply until its future answers (raftCalls says why), and
// Raft's failures become the statuses a client gets. The batcher proposes
// the send entries through it, and Broker.propose every other command.
type proposer struct {
	// apply is the Raft member's (cluster.RaftNode.Apply); a fake in the
	// batcher's unit tests.
	apply            func(data []byte, timeout time.Duration) raft.ApplyFuture
	calls            *raftCalls
	replicationError func(error) error // Broker.replicationError
	// gate refuses entries that write to the commitlog while the group's
	// Raft log moves (raftlogmove.go); nil: never.
	gate *writeGate
}

// start proposes data, an entry that writes to the commitlog when writes
// says so; Raft may take up to timeout to accept it. It fails when Raft
// is shutting down or the group's writes are paused; otherwise wait must
// follow.
func (p proposer) start(data []byte, writes bool, timeout time.Duration) (raft.ApplyFuture, error) {
	if writes && p.gate != nil {
		return p.gate.pass(func() (raft.ApplyFuture, error) { return p.startAny(data, timeout) })
	}
	return p.startAny(data, timeout)
}

func (p proposer) startAny(data []byte, timeout time.Duration) (raft.ApplyFuture, error) {
	if !p.calls.begin() {
		return nil, p.replicationError(raft.ErrRaftShutdown)
	}
	return p.apply(data, timeout), nil
}

// wait waits for f's answer, ends its call and maps Raft's error.
func (p proposer) wait(f raft.ApplyFuture) error {
	err := f.Error()
	p.calls.end()
	if err != nil {
		return p.replicationError(err)
	}
	return nil
}

// barrier waits for every earlier entry to be applied.
func (b *Broker) barrier() error {
	if !b.calls.begin() {
		return raft.ErrRaftShutdown
	}
	defer b.calls.end()
	return b.node.Raft.Barrier(b.cfg.SendTimeout).Error()
}

// apply proposes a metadata command and waits for it to be applied.
func (b *Broker) apply(ctx context.Context, cmd *pb.RaftCommand) error {
	_, err := b.propose(ctx, cmd)
	return err
}

// propose proposes a command, waits for it to be applied here and returns
// what the state machine made of it.
func (b *Broker) propose(ctx context.Context, cmd *pb.RaftCommand) (*applyResult, error) {
	return b.proposeVia(ctx, cmd, func(data []byte, timeout time.Duration) (raft.ApplyFuture, error) {
		return b.proposer.start(data, writesCommitlog(cmd), timeout)
	})
}

// proposeVia is propose with the entry handed to Raft by start.
func (b *Broker) proposeVia(ctx context.Context, cmd *pb.RaftCommand, start func(data []byte, timeout time.Duration) (raft.ApplyFuture, error)) (*applyResult, error) {
	data, err := encodeCommand(cmd)
	if err != nil {
		return nil, err
	}
	timeout := b.cfg.SendTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = time.Until(d)
	}
	f, err := start(data, timeout)
	if err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- b.proposer.wait(f) }()
	select {
	case err := <-done:
		if err != nil {
			return nil, err
		}
		r, _ := f.Response().(*applyResult)
		if r == nil {
			r = &applyResult{}
		}
		if r.err != nil {
			return nil, b.appliedError(r.err)
		}
		return r, nil
	case <-ctx.Done():
		return nil, statusError(codes.DeadlineExceeded, pb.ErrorReason_TIMEOUT, "not confirmed in time: it may or may not be applied", nil)
	}
}

// requireMaster returns a NOT_LEADER status unless this replica is master
// (a STORE_ERROR one when its store failed).
func (b *Broker) requireMaster() error {
	if err := b.failedError(); err != nil {
		return err
	}
	if b.master.Load() {
		return nil
	}
	return b.notLeader()
}

// caughtUp reports whether this replica has heard from a master and
// applied every entry it knows to be committed. A replica just restarted
// learns the commit index with the master's first heartbeat, and is
// behind until it has replayed its log up to it.
func (b *Broker) caughtUp() bool {
	if id, _ := b.leaderInfo(); id == 0 {
		return false
	}
	stats := b.node.Raft.Stats()
	commit, err1 := strconv.ParseUint(stats["commit_index"], 10, 64)
	applied, err2 := strconv.ParseUint(stats["applied_index"], 10, 64)
	return err1 == nil && err2 == nil && commit > 0 && applied >= commit
}

// leaderInfo returns the master's replica id and gRPC address as far as
// this replica knows (0, "" when it knows none).
func (b *Broker) leaderInfo() (int32, string) {
	_, id := b.node.Raft.LeaderWithID()
	n, err := strconv.Atoi(string(id))
	if err != nil || n < 1 || n > math.MaxInt32 {
		return 0, ""
	}
	return int32(n), b.meta.replicaAddr(int32(n))
}

func (b *Broker) notLeader() error {
	id, addr := b.leaderInfo()
	meta := map[string]string{"leader": addr}
	if id > 0 {
		meta["leader_id"] = strconv.Itoa(int(id))
	}
	return statusError(codes.FailedPrecondition, pb.ErrorReason_NOT_LEADER, "this replica is not the master of "+b.cfg.Group, meta)
}

// notLeaderUnknown: leadership was lost while the entry was in flight; it
// may still be committed by the new master.
func (b *Broker) notLeaderUnknown() error {
	id, addr := b.leaderInfo()
	return statusError(codes.Unavailable, pb.ErrorReason_NOT_LEADER,
		"leadership lost during replication: the send may or may not be stored",
		map[string]string{"leader": addr, "leader_id": strconv.Itoa(int(id)), "outcome": "unknown"})
}

// replicationError maps a failed Raft apply to a status a client can act
// on: not the leader (redirect), or an outcome it cannot know.
func (b *Broker) replicationError(err error) error {
	if b.fsm.failed() != nil {
		return b.inFlightFailedError()
	}
	switch {
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return b.notLeader()
	case errors.Is(err, raft.ErrLeadershipLost):
		return b.notLeaderUnknown()
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return statusError(codes.DeadlineExceeded, pb.ErrorReason_TIMEOUT, "replication is backed up: "+err.Error(), nil)
	case errors.Is(err, raft.ErrRaftShutdown):
		return errShuttingDown
	default:
		return storeError(err)
	}
}

var errShuttingDown = statusError(codes.Unavailable, pb.ErrorReason_NOT_LEADER, "broker shutting down", nil)

// every calls f at each tick of interval d until ctx ends: the replica's
// periodic work (hold checks, offset commits, gossip, the schedule).
func every(ctx context.Context, d time.Duration, f func(now time.Time)) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			f(now)
		}
	}
}

// maxResponseSize bounds the largest message a broker sends: a pull (its
// byte cap, plus the one record it returns past it) or a commitlog copy
// chunk (whole batches past copyChunk, with a segment's blank padding).
func maxResponseSize(cfg Config) int {
	return max(cfg.PullMaxBytes, copyChunk+2*cfg.EntryMaxBytes) + cfg.Store.MaxMessageSize + 1<<20
}

var errNoPeer = errors.New("broker: no peer to copy the commitlog from")
