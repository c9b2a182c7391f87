package broker

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"

	"github.com/raftmq/raftmq/cluster/pb"
	"github.com/raftmq/raftmq/message"
	"github.com/raftmq/raftmq/storage"
)

// batcher is group commit: it merges the sends waiting at a moment into
// one Raft entry (one append, one fsync on each replica's Raft log, one
// commitlog write). A lone sender gets an entry of its own at once. While
// eagerEntries entries are in flight, sends wait and pile up, and the next
// entry takes them all; only a full entry (EntryMaxMessages or
// EntryMaxBytes) goes out beyond that, up to MaxInflightEntries. Once an
// entry finishes, the next waits up to GroupCommitWait for as many sends
// as the company it expects (company): synchronous senders answered by the
// entry come back, and would otherwise miss it. Company of a send or two
// is not waited for (companyWorthWaiting).
//
// Why one: every entry costs each replica a log append with its fsync,
// and the master ~0.7-0.9 ms of CPU, most of it in the kernel (socket
// writes and reads, fsync, futex wakeups: strace counted ~19 syscalls per
// entry on the master, at 14-25 us each on our VMs), whatever it carries:
// with 1 sync sender the master spent 713-931 us of CPU per message, with
// batches of 64 about 14 (deploy/bench-local.sh, 2026-12-01). So fewer,
// larger entries win while the CPU is the limit, as it is with three
// replicas on two cores. Measured 2026-12-01, one against two in flight:
// 16 sync clients of 3 broker processes 4344 and 3858 msgs/s against 3698
// and 3283 (+17%, two paired runs), batched and 1 client unchanged; in
// process (BenchmarkProduce3Replica, enc=records) senders=16/batch=1 4657
// and 5722 against 3972 and 4395, 256x1 18.1k against 15.4k, 256x32 35.3k
// against 32.6k. (An earlier choice of two, on 2026-11-30, counted
// messages per entry on a loaded machine, not throughput.) Full entries
// still go out beyond it, so many batch senders keep several in flight.
//
// It needs of its replica only what it is given: a proposer for its
// entries, the caps of an entry and of the entries in flight, how long Raft
// may take to accept one (SendTimeout), the two histograms it observes
// each entry in, and the one it observes each wait for company in.
type batcher struct {
	proposer    proposer
	caps        entryCaps
	maxInflight int32         // MaxInflightEntries, full entries included
	timeout     time.Duration // SendTimeout: Raft's time to take an entry
	companyWait time.Duration // GroupCommitWait: see company
	// applySeconds and applyMessages observe each entry: its time from
	// Apply to applied here, and its messages (metrics.go).
	applySeconds, applyMessages prometheus.Observer
	// waitedForCompany and waitedInVain observe each wait for company
	// that ended with the company come, or with the wait run out.
	waitedForCompany, waitedInVain prometheus.Observer

	reqs     chan *sendReq
	inflight atomic.Int32
	// queued counts the sends given to run and not yet proposed (in reqs
	// or in the entry run builds): a send proposes alone only when there
	// are none, so that it never overtakes them.
	queued atomic.Int32
	// released has a token when an entry finished since run last looked.
	released chan struct{}
	// company is how many sends the next entry expects: those of the entry
	// that finished last and those queued when it did (the senders of
	// that entry come back with their next sends once answered). While
	// fewer wait, and for at most companyWait after that entry finished,
	// the next entry waits for them rather than going out with some: 16
	// synchronous senders otherwise split into two cohorts that take
	// turns, each entry carrying half of them. A lone sender's company is
	// itself: it never waits. freedAt is when that entry finished (unix ns).
	company atomic.Int32
	freedAt atomic.Int64
	wg      sync.WaitGroup
}

// eagerEntries is how many entries may be in flight before the batcher
// waits for a full entry or a finished one.
const eagerEntries = 1

// companyWorthWaiting is the least company the next entry waits for.
// Below it, waiting would merge a send or two more into the entry, and
// when the senders do not come back at once (producers at a steady rate
// rather than as fast as they are answered) a send queued behind an entry
// paid the whole GroupCommitWait. 4 producers at 1000 msgs/s in all
// (raftmq dev, bench produce and e2e --rate 1000, 2026-12-04): acks p50
// 1.68 and 2.08 ms against 2.64 and 2.81 before, send to receive 2.31 and
// 2.94 against 3.40 and 3.23; p99 unchanged. 16 synchronous senders
// expect 12 to 16 and keep the wait (15.8-15.9 messages an entry, as
// before, deploy/bench-local.sh).
const companyWorthWaiting = 4

// sendReq is one send's messages, as records in the commitlog's layout
// (package message), checked: n records.
type sendReq struct {
	records []byte
	n       int
	seq     sendSeq          // an idempotent producer's numbers (producer 0: none)
	done    chan sendOutcome // buffered: the waiter may have left
}

type sendOutcome struct {
	results []storage.AppendResult
	err     error
}

// entryCaps are an entry's caps: EntryMaxMessages and EntryMaxBytes.
type entryCaps struct {
	messages, bytes int
}

func newBatcher(cfg Config, p proposer, m *metrics) *batcher {
	return &batcher{
		proposer:         p,
		caps:             entryCaps{messages: cfg.EntryMaxMessages, bytes: cfg.EntryMaxBytes},
		maxInflight:      int32(cfg.MaxInflightEntries),
		timeout:          cfg.SendTimeout,
		companyWait:      cfg.GroupCommitWait,
		applySeconds:     m.applySeconds,
		applyMessages:    m.applyMessages,
		waitedForCompany: m.companyWaits.WithLabelValues("company"),
		waitedInVain:     m.companyWaits.WithLabelValues("timeout"),
		reqs:             make(chan *sendReq, cfg.MaxPendingSends),
		released:         make(chan struct{}, 1),
	}
}

// submit stores n records through the next entry and waits for their
// outcome or ctx. A lone send, with no entry in flight and none queued,
// proposes its own entry from the caller's goroutine and waits for it
// there (proposeAlone); any other is queued for run.
func (bt *batcher) submit(ctx context.Context, records []byte, n int, seq sendSeq) ([]storage.AppendResult, error) {
	if bt.goesAlone(true) { // an entry takes any one send
		res, err := bt.proposeAlone([]*sendReq{{records: records, n: n, seq: seq}}, n, len(records))
		switch {
		case err != nil:
			return nil, err
		case res.refusal(0) != nil:
			return nil, res.refusal(0)
		}
		return res.results, nil
	}
	r := &sendReq{records: records, n: n, seq: seq, done: make(chan sendOutcome, 1)}
	bt.queued.Add(1)
	select {
	case bt.reqs <- r:
	default:
		bt.queued.Add(-1)
		return nil, errTooManySends()
	}
	return r.await(ctx, nil)
}

// submitAll hands sends, which came together (the sends of one streamed
// request), to group commit together; each one's outcome comes on its
// done channel (await). Together, they join one entry when they fit it:
// handed over one by one, the first of a request that found the group
// idle went out alone and the rest in the entry after, and each send was
// waited for on a goroutine of its own. Like a lone send, they propose
// their own entry at once, and wait for it here, when nothing is in
// flight or queued.
func (bt *batcher) submitAll(sends []*sendReq) {
	if len(sends) == 0 { // an entry without records would fail every replica's store
		return
	}
	n, bytes := 0, 0
	for _, r := range sends {
		n += r.n
		bytes += len(r.records)
	}
	if bt.goesAlone(n <= bt.caps.messages && bytes <= bt.caps.bytes) {
		res, err := bt.proposeAlone(sends, n, bytes)
		deliver(sends, res, err)
		return
	}
	bt.queued.Add(int32(len(sends)))
	for i, r := range sends {
		select {
		case bt.reqs <- r:
		default:
			bt.queued.Add(-int32(len(sends) - i))
			for _, r := range sends[i:] {
				r.done <- sendOutcome{err: errTooManySends()}
			}
			return
		}
	}
}

// goesAlone says whether sends that fit one entry propose it at once, and
// takes the in-flight slot for it if so: no send is queued (it would be
// overtaken) and the last entry's senders are not expected back (alone).
func (bt *batcher) goesAlone(fit bool) bool {
	return fit && bt.queued.Load() == 0 && bt.alone() && bt.claim(eagerEntries)
}

// await waits for the send's outcome until ctx ends or deadline fires.
func (r *sendReq) await(ctx context.Context, deadline <-chan time.Time) ([]storage.AppendResult, error) {
	select {
	case o := <-r.done:
		return o.results, o.err
	case <-ctx.Done():
	case <-deadline:
	}
	return nil, statusError(codes.DeadlineExceeded, pb.ErrorReason_TIMEOUT,
		"send not confirmed in time: it may or may not be stored", nil)
}

// awaitAll waits for the outcome of each send of reqs, in turn, until ctx
// ends or the send's deadline passes. A timer is set only for a send not
// answered yet: the sends of one entry are answered together, so after
// the first there is mostly none to wait for (a timer set for each was 3%
// of the master's CPU under 16 synchronous senders, 2026-12-04).
func awaitAll(ctx context.Context, reqs []*sendReq, deadlines []time.Time) []sendOutcome {
	outs := make([]sendOutcome, len(reqs))
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for j, r := range reqs {
		var deadline <-chan time.Time
		if len(r.done) == 0 {
			wait := time.Until(deadlines[j])
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			deadline = timer.C
		}
		outs[j].results, outs[j].err = r.await(ctx, deadline)
	}
	return outs
}

func errTooManySends() error {
	return statusError(codes.ResourceExhausted, pb.ErrorReason_TOO_MANY_REQUESTS, "too many sends waiting for replication", nil)
}

// claim takes an in-flight slot if fewer than limit entries are in
// flight.
func (bt *batcher) claim(limit int32) bool {
	for {
		n := bt.inflight.Load()
		if n >= limit {
			return false
		}
		if bt.inflight.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// run builds entries until ctx ends; then it fails what is still queued.
func (bt *batcher) run(ctx context.Context) {
	defer bt.wg.Wait()
	var next entryBuild
	// waitingSince is when next, free to go but for company, began to
	// wait for it; zero while it has not.
	var waitingSince time.Time
	lingers := time.NewTimer(time.Hour) // reset before each use: Go 1.23 timers keep no stale tick
	lingers.Stop()
	for {
		if next.empty() {
			select {
			case r := <-bt.reqs:
				next.add(r)
			case <-ctx.Done():
				bt.failQueued(nil)
				return
			}
		}
		// Take what queued up, within the caps.
	drain:
		for !next.full(bt.caps) {
			select {
			case r := <-bt.reqs:
				next.take(r, bt.caps)
			default:
				break drain
			}
		}
		wait := bt.companyLeft(&next)
		if wait > 0 && waitingSince.IsZero() && bt.inflight.Load() < eagerEntries {
			waitingSince = time.Now()
		}
		if (wait <= 0 && bt.claim(eagerEntries)) || (next.full(bt.caps) && bt.claim(bt.maxInflight)) {
			if !waitingSince.IsZero() {
				bt.observeWait(&next, time.Since(waitingSince))
				waitingSince = time.Time{}
			}
			bt.queued.Add(-int32(len(next.batch)))
			bt.propose(next.batch, next.n, next.bytes)
			next = next.rest()
			continue
		}
		// Wait for an entry to finish, for more sends while the next
		// entry has room, or for the end of the wait for company.
		var more <-chan *sendReq
		if !next.full(bt.caps) {
			more = bt.reqs
		}
		var waited <-chan time.Time
		if wait > 0 && bt.inflight.Load() < eagerEntries {
			lingers.Reset(wait)
			waited = lingers.C
		}
		select {
		case <-bt.released:
		case r := <-more:
			next.take(r, bt.caps)
		case <-waited:
		case <-ctx.Done():
			bt.failQueued(next.all())
			return
		}
	}
}

// observeWait observes the wait for company of next, which lasted d and
// is over: ended by the company come (or next full), or run out.
func (bt *batcher) observeWait(next *entryBuild, d time.Duration) {
	if bt.companyCame(next) {
		bt.waitedForCompany.Observe(d.Seconds())
	} else {
		bt.waitedInVain.Observe(d.Seconds())
	}
}

// alone says a send arriving to an empty queue expects no company: the
// last entry was one sender's, or the wait for its senders is over.
func (bt *batcher) alone() bool {
	return bt.company.Load() <= 1 || bt.companyWaitLeft() == 0
}

// companyLeft is how much longer the next entry waits for company: 0
// once it holds as many sends as company expects, is full, or the wait
// since the last entry finished is over.
func (bt *batcher) companyLeft(next *entryBuild) time.Duration {
	if bt.companyCame(next) {
		return 0
	}
	return bt.companyWaitLeft()
}

// companyCame says next waits for no more company: it holds as many sends
// as company expects, or is full.
func (bt *batcher) companyCame(next *entryBuild) bool {
	return len(next.batch) >= int(bt.company.Load()) || next.full(bt.caps)
}

// companyWaitLeft is what is left of GroupCommitWait since the last entry
// finished.
func (bt *batcher) companyWaitLeft() time.Duration {
	return max(0, time.Until(time.Unix(0, bt.freedAt.Load()).Add(bt.companyWait)))
}

// entryBuild is the next entry's sends, and a send that did not fit it
// (the first of the entry after).
type entryBuild struct {
	batch    []*sendReq
	n, bytes int
	carry    *sendReq
}

func (e *entryBuild) empty() bool { return len(e.batch) == 0 }

func (e *entryBuild) add(r *sendReq) {
	e.batch = append(e.batch, r)
	e.n += r.n
	e.bytes += len(r.records)
}

// take adds r to this entry, or carries it to the next when it does not
// fit.
func (e *entryBuild) take(r *sendReq, caps entryCaps) {
	if e.fits(r, caps) {
		e.add(r)
	} else {
		e.carry = r
	}
}

// fits says whether r joins this entry within the caps (an empty entry
// takes any one send: sends are checked against the caps on arrival).
func (e *entryBuild) fits(r *sendReq, caps entryCaps) bool {
	return e.empty() || (e.n+r.n <= caps.messages && e.bytes+len(r.records) <= caps.bytes)
}

// full: nothing more joins this entry, because a send already did not fit
// or the caps are reached.
func (e *entryBuild) full(caps entryCaps) bool {
	return e.carry != nil || e.n >= caps.messages || e.bytes >= caps.bytes
}

// rest is the build that follows this one: the carried send, if any.
func (e *entryBuild) rest() entryBuild {
	var next entryBuild
	if e.carry != nil {
		next.add(e.carry)
	}
	return next
}

func (e *entryBuild) all() []*sendReq {
	if e.carry != nil {
		return append(e.batch, e.carry)
	}
	return e.batch
}

// propose applies one entry and, in the background, hands each sender its
// part of the result.
func (bt *batcher) propose(batch []*sendReq, n, bytes int) {
	data, at := entryData(batch, bytes)
	f, applied, err := bt.apply(data, at)
	if err != nil {
		deliver(batch, nil, err)
		return
	}
	bt.wg.Add(1)
	go func() {
		defer bt.wg.Done()
		res, err := bt.outcome(f, n, len(batch), applied)
		deliver(batch, res, err)
	}()
}

// deliver hands each send of batch its part of its entry's result res, or
// err.
func deliver(batch []*sendReq, res *applyResult, err error) {
	i := 0
	for j, r := range batch {
		switch {
		case err != nil:
			r.done <- sendOutcome{err: err}
		case res.refusal(j) != nil:
			r.done <- sendOutcome{err: res.refusal(j)}
		default:
			r.done <- sendOutcome{results: res.results[i : i+r.n]}
		}
		i += r.n
	}
}

// entryData is the Raft entry of batch's sends (bytes of records in all),
// and where its records begin: a sendRecordsEntry, or a sequencedEntry
// when an idempotent producer's send is among them.
func entryData(batch []*sendReq, bytes int) ([]byte, int) {
	var data []byte
	if sequenced(batch) {
		data = appendSequencedHeader(make([]byte, 0, 32*len(batch)+bytes), batch)
	} else {
		data = append(make([]byte, 0, 1+bytes), sendRecordsEntry)
	}
	at := len(data)
	for _, r := range batch {
		data = append(data, r.records...)
	}
	return data, at
}

// proposeAlone applies an entry of batch's sends (n records, bytes of
// them) and waits for it on the caller's goroutine, which holds an
// in-flight slot. That saves a lone sender two goroutine handoffs (to run,
// and back from propose's waiter), each a futex wake and a wait on another
// thread: about 16 wakes in all per message under one sync sender (go tool
// trace, 2026-12-02). It waits past ctx if Raft does: Raft fails the entry
// when the master loses its lease or stops, and only the sends holding the
// slot can wait so.
func (bt *batcher) proposeAlone(batch []*sendReq, n, bytes int) (*applyResult, error) {
	data, at := entryData(batch, bytes)
	f, applied, err := bt.apply(data, at)
	if err != nil {
		return nil, err
	}
	return bt.outcome(f, n, len(batch), applied)
}

// apply stamps the entry's store time and hands it to Raft. The caller
// holds an in-flight slot: on an error it is released here, otherwise by
// outcome.
func (bt *batcher) apply(data []byte, recordsAt int) (raft.ApplyFuture, time.Time, error) {
	if err := message.SetStoreTime(data[recordsAt:], time.Now().UnixMilli()); err != nil {
		bt.release(0)
		return nil, time.Time{}, statusError(codes.Internal, pb.ErrorReason_STORE_ERROR, err.Error(), nil)
	}
	applied := time.Now()
	f, err := bt.proposer.start(data, true, bt.timeout)
	if err != nil {
		bt.release(0)
		return nil, time.Time{}, err
	}
	return f, applied, nil
}

// outcome waits for an applied entry of n messages in sends sends,
// releases its slot and returns the state machine's result, or the error
// a sender gets.
func (bt *batcher) outcome(f raft.ApplyFuture, n, sends int, applied time.Time) (*applyResult, error) {
	err := bt.proposer.wait(f)
	bt.release(sends)
	if err != nil {
		return nil, err
	}
	bt.applySeconds.Observe(time.Since(applied).Seconds())
	bt.applyMessages.Observe(float64(n))
	res, _ := f.Response().(*applyResult)
	switch {
	case res == nil:
		return nil, bt.proposer.replicationError(errors.New("no result from the state machine"))
	case res.err != nil:
		return nil, bt.proposer.replicationError(res.err)
	}
	return res, nil
}

// release counts an entry of sends finished (0: one that failed to
// start), sets the company the next entry expects, and wakes run if it
// waits for one.
func (bt *batcher) release(sends int) {
	company := int32(sends) + bt.queued.Load()
	if company < companyWorthWaiting {
		company = 1 // expect none: see companyWorthWaiting
	}
	bt.company.Store(company)
	bt.freedAt.Store(time.Now().UnixNano())
	bt.inflight.Add(-1)
	select {
	case bt.released <- struct{}{}:
	default:
	}
}

// failQueued fails held, the sends run had taken, and every send still
// queued.
func (bt *batcher) failQueued(held []*sendReq) {
	for _, r := range held {
		bt.queued.Add(-1)
		r.done <- sendOutcome{err: errShuttingDown}
	}
	for {
		select {
		case r := <-bt.reqs:
			bt.queued.Add(-1)
			r.done <- sendOutcome{err: errShuttingDown}
		default:
			return
		}
	}
}
