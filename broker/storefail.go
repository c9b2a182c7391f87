package broker

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/raftmq/raftmq/cluster/pb"
	"github.com/raftmq/raftmq/storage"
)

// A replica whose store fails (a write error, a full disk, a failed
// fdatasync, a topic's files that cannot be removed), or whose Raft log
// fails a write it made as master (cluster/leaderlog.go), stops: its state
// machine applies nothing after the entry the store could not take (see
// fsm.fail), it stops claiming master at once (gossip included), and
// watchStore hands leadership over if it has it, then stops its Raft
// member, so it neither votes nor stands for election, while the group's
// configuration still counts it: a group of 3 goes on with 2, as with a
// stopped replica. The process keeps answering /healthz (503, naming the
// failure), /metrics (raftmq_store_failed 1) and DescribeBroker; every
// other RPC, sends and pulls included, gets Unavailable with STORE_ERROR,
// so clients go to another replica. Restarted on a sound disk, the replica
// catches up from the Raft log and serves again.

// onStoreFailed runs once, in the goroutine that recorded the failure (the
// state machine's, in Apply): it must not block.
func (b *Broker) onStoreFailed() {
	b.master.Store(false)
	b.holds.wakeAll() // they answer STORE_ERROR (see longPoll)
}

// watchStore stops the replica's Raft member once its store has failed,
// from its own goroutine: Raft's Shutdown waits for the state machine, so
// the state machine cannot call it. A failure of the store's background
// flusher is recorded here; the state machine would see it only at the
// next entry.
func (b *Broker) watchStore(ctx context.Context) {
	select {
	case <-ctx.Done():
		return
	case <-b.store.Failed():
		b.fsm.fail(b.store.Err())
	case <-b.node.LogFailed(): // the master's write of its own Raft log
		b.fsm.fail(b.node.LogErr())
	case <-b.node.LogDamaged(): // the master read a damaged entry to send it
		b.fsm.fail(b.node.LogDamage())
	case <-b.fsm.stopped:
	}
	// A master hands over at once rather than let the others wait for an
	// election timeout: its Raft log is sound, only its store failed.
	if err := b.TransferLeadership(); err != nil {
		b.log.Warn("leadership transfer after the store failed", "err", err)
	}
	b.calls.close() // see raftCalls
	if err := b.node.Stop(); err != nil {
		b.log.Warn("raft shutdown after the store failed", "err", err)
	}
}

// readError answers a pull whose read failed. A read that found the store
// damaged (a record failing its CRC, a consume queue entry that does not
// match its record: storage.ErrCorrupt) never serves the damaged range,
// and stops the replica as a failed write does: one ERROR line naming the
// file, unhealthy, the leadership handed over, Raft stopped. The group
// serves from the others; the replica needs its data replaced (issue #16
// item 2). Reads by message id are not read here: an id is the user's,
// and one pointing inside a record reads as damage too.
func (b *Broker) readError(err error) error {
	if errors.Is(err, storage.ErrCorrupt) {
		b.fsm.fail(err)
		return b.failedError()
	}
	return storeError(err)
}

// failedError is the answer of a replica whose store failed, nil while it
// has not.
func (b *Broker) failedError() error {
	sf := b.fsm.failed()
	if sf == nil {
		return nil
	}
	return statusError(codes.Unavailable, pb.ErrorReason_STORE_ERROR,
		fmt.Sprintf("replica %d of %s has stopped serving: its %v; use another replica", b.self, b.cfg.Group, sf), nil)
}

// inFlightFailedError answers a command this replica proposed whose entry
// it could not apply because its store failed: the entry is committed to
// the group's Raft log, so the other replicas apply it, but this replica
// cannot say where a message went.
func (b *Broker) inFlightFailedError() error {
	return statusError(codes.Unavailable, pb.ErrorReason_STORE_ERROR,
		fmt.Sprintf("replica %d of %s could not apply the entry: its %v; the other replicas may store it", b.self, b.cfg.Group, b.fsm.failed()),
		map[string]string{"outcome": "unknown"})
}

// appliedError maps the error the state machine returned for an entry to
// a status.
func (b *Broker) appliedError(err error) error {
	if b.fsm.failed() != nil {
		return b.inFlightFailedError()
	}
	return storeError(err)
}

// servedWhenFailed is what a replica with a failed store still answers:
// how it is.
var servedWhenFailed = map[string]bool{pb.Broker_DescribeBroker_FullMethodName: true}

func (b *Broker) refuseUnaryWhenFailed(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := b.failedError(); err != nil && !servedWhenFailed[info.FullMethod] {
		return nil, err
	}
	return handler(ctx, req)
}

func (b *Broker) refuseStreamWhenFailed(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := b.failedError(); err != nil && !servedWhenFailed[info.FullMethod] {
		return err
	}
	return handler(srv, ss)
}
