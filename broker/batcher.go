package broker

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/raftmq/raftmq/cluster/pb"
	"github.com/raftmq/raftmq/storage"
)

// batcher is group commit: it merges the sends waiting at a moment into
// one Raft entry (one append, one fsync on each replica's Raft log, one
// commitlog write), keeping up to MaxInflightEntries entries in flight.
// A lone sender gets an entry of its own at once; under load, sends pile
// up while entries are in flight and the next entry takes them all. Raft's
// own batching of entries comes on top, but a Raft entry per message tops
// out far lower (ARCHITECTURE §11).
type batcher struct {
	b        *Broker
	reqs     chan *sendReq
	inflight chan struct{}
	wg       sync.WaitGroup
}

type sendReq struct {
	msgs  []*pb.StoredMessage
	bytes int
	done  chan sendOutcome // buffered: the waiter may have left
}

type sendOutcome struct {
	results []storage.AppendResult
	err     error
}

func newBatcher(b *Broker) *batcher {
	return &batcher{
		b:        b,
		reqs:     make(chan *sendReq, b.cfg.MaxPendingSends),
		inflight: make(chan struct{}, b.cfg.MaxInflightEntries),
	}
}

// submit queues msgs for the next entry and waits for their outcome or ctx.
func (bt *batcher) submit(ctx context.Context, msgs []*pb.StoredMessage, bytes int) ([]storage.AppendResult, error) {
	r := &sendReq{msgs: msgs, bytes: bytes, done: make(chan sendOutcome, 1)}
	select {
	case bt.reqs <- r:
	default:
		return nil, statusError(codes.ResourceExhausted, pb.ErrorReason_TOO_MANY_REQUESTS, "too many sends waiting for replication", nil)
	}
	select {
	case o := <-r.done:
		return o.results, o.err
	case <-ctx.Done():
		return nil, statusError(codes.DeadlineExceeded, pb.ErrorReason_TIMEOUT,
			"send not confirmed in time: it may or may not be stored", nil)
	}
}

// run builds entries until ctx ends; then it fails what is still queued.
func (bt *batcher) run(ctx context.Context) {
	defer bt.wg.Wait()
	var carry *sendReq
	for {
		first := carry
		carry = nil
		if first == nil {
			select {
			case first = <-bt.reqs:
			case <-ctx.Done():
				bt.failQueued()
				return
			}
		}
		select {
		case bt.inflight <- struct{}{}:
		case <-ctx.Done():
			first.done <- sendOutcome{err: errShuttingDown}
			bt.failQueued()
			return
		}
		// Take what queued up while we waited for a slot, within the caps.
		batch := []*sendReq{first}
		n, size := len(first.msgs), first.bytes
	fill:
		for {
			select {
			case r := <-bt.reqs:
				if n+len(r.msgs) > bt.b.cfg.EntryMaxMessages || size+r.bytes > bt.b.cfg.EntryMaxBytes {
					carry = r
					break fill
				}
				batch = append(batch, r)
				n += len(r.msgs)
				size += r.bytes
			default:
				break fill
			}
		}
		bt.propose(batch, n)
	}
}

// propose applies one entry and, in the background, hands each sender its
// part of the result.
func (bt *batcher) propose(batch []*sendReq, n int) {
	all := make([]*pb.StoredMessage, 0, n)
	for _, r := range batch {
		all = append(all, r.msgs...)
	}
	data, err := proto.Marshal(&pb.RaftCommand{Command: &pb.RaftCommand_Send{Send: &pb.SendBatch{
		StoreTimestamp: time.Now().UnixMilli(),
		Messages:       all,
	}}})
	if err != nil {
		<-bt.inflight
		for _, r := range batch {
			r.done <- sendOutcome{err: statusError(codes.Internal, pb.ErrorReason_STORE_ERROR, err.Error(), nil)}
		}
		return
	}
	if !bt.b.calls.begin() { // Raft is shutting down
		<-bt.inflight
		err := bt.b.replicationError(raft.ErrRaftShutdown)
		for _, r := range batch {
			r.done <- sendOutcome{err: err}
		}
		return
	}
	applied := time.Now()
	f := bt.b.node.Raft.Apply(data, bt.b.cfg.SendTimeout)
	bt.wg.Add(1)
	go func() {
		defer bt.wg.Done()
		err := f.Error()
		bt.b.calls.end()
		<-bt.inflight
		if err == nil {
			bt.b.metrics.applySeconds.Observe(time.Since(applied).Seconds())
			bt.b.metrics.applyMessages.Observe(float64(len(all)))
		}
		var res *applyResult
		if err == nil {
			res, _ = f.Response().(*applyResult)
			if res == nil {
				err = errors.New("no result from the state machine")
			} else if res.err != nil {
				err = res.err
			}
		}
		i := 0
		for _, r := range batch {
			if err != nil {
				r.done <- sendOutcome{err: bt.b.replicationError(err)}
				continue
			}
			r.done <- sendOutcome{results: res.results[i : i+len(r.msgs)]}
			i += len(r.msgs)
		}
	}()
}

func (bt *batcher) failQueued() {
	for {
		select {
		case r := <-bt.reqs:
			r.done <- sendOutcome{err: errShuttingDown}
		default:
			return
		}
	}
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
