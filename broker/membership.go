package broker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/raftmq/raftmq/cluster/pb"
)

// Membership changes, as operators make them (issue #16): through the
// master, with hashicorp/raft's configuration changes. A new replica joins
// as a non-voter, so that a replica still copying the commitlog neither
// counts toward the quorum of every send nor can be elected, and is made a
// voter only once it has applied what the master had when the call began.

// defaultCatchUp bounds AddReplica's wait for the new replica when the
// request names no timeout.
const defaultCatchUp = 5 * time.Minute

// membershipChangeTimeout bounds how long one configuration change waits
// to be enqueued (hashicorp/raft's timeout argument).
const membershipChangeTimeout = 10 * time.Second

func (s *service) AddReplica(ctx context.Context, req *pb.AddReplicaRequest) (*pb.MembershipResponse, error) {
	b := s.b
	if req.Id < 1 {
		return nil, invalid(pb.ErrorReason_ILLEGAL_ARGUMENT, "a replica id >= 1 is needed")
	}
	for what, addr := range map[string]string{"raft_address": req.RaftAddress, "grpc_address": req.GrpcAddress} {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, invalid(pb.ErrorReason_ILLEGAL_ARGUMENT, fmt.Sprintf("%s %q is not HOST:PORT", what, addr))
		}
	}
	if err := b.requireMaster(); err != nil {
		return nil, err
	}
	id := raft.ServerID(strconv.Itoa(int(req.Id)))
	servers, err := b.servers()
	if err != nil {
		return nil, err
	}
	for _, srv := range servers {
		switch {
		case srv.ID == id && srv.Address != raft.ServerAddress(req.RaftAddress):
			return nil, conflict(fmt.Sprintf("replica %d is in the group at %s", req.Id, srv.Address))
		case srv.ID != id && srv.Address == raft.ServerAddress(req.RaftAddress):
			return nil, conflict(fmt.Sprintf("%s is replica %s's address", req.RaftAddress, srv.ID))
		case srv.ID == id && srv.Suffrage == raft.Voter:
			return b.membership() // added already: the call is idempotent
		}
	}
	timeout := defaultCatchUp
	if req.CatchUpTimeoutMs > 0 {
		timeout = time.Duration(req.CatchUpTimeoutMs) * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// Only a replica of this group may be asked: its certificate says so.
	conn, err := grpc.NewClient(req.GrpcAddress, b.groupReplicaCreds())
	if err != nil {
		return nil, invalid(pb.ErrorReason_ILLEGAL_ARGUMENT, "grpc_address: "+err.Error())
	}
	defer conn.Close()
	joiner := pb.NewBrokerClient(conn)
	if err := b.checkJoiner(ctx, req.GrpcAddress, joiner); err != nil {
		return nil, err
	}
	target := b.node.Raft.AppliedIndex()
	if err := b.node.Raft.AddNonvoter(id, raft.ServerAddress(req.RaftAddress), 0, membershipChangeTimeout).Error(); err != nil {
		return nil, b.membershipError("add replica "+string(id)+" as a non-voter", err)
	}
	b.log.Info("replica added as a non-voter; waiting for it to catch up", "replica", req.Id, "raft", req.RaftAddress, "target_index", target)
	if err := b.waitApplied(ctx, req.GrpcAddress, joiner, target); err != nil {
		return nil, err
	}
	if err := b.node.Raft.AddVoter(id, raft.ServerAddress(req.RaftAddress), 0, membershipChangeTimeout).Error(); err != nil {
		return nil, b.membershipError("make replica "+string(id)+" a voter", err)
	}
	b.log.Info("replica caught up and made a voter", "replica", req.Id)
	return b.membership()
}

// checkJoiner asks the replica at addr, until it answers, whether it may
// join: a replica of this group, keeping its Raft log where this one does
// (raftlogplace.go). Refused now, it has stored nothing of the group's.
func (b *Broker) checkJoiner(ctx context.Context, addr string, client pb.BrokerClient) error {
	return pollJoiner(ctx, client, func(d *pb.DescribeBrokerResponse) (bool, error) {
		if err := b.otherGroup(addr, d); err != nil {
			return false, err
		}
		if own := b.fsm.ownRaftLog(); d.RaftLog != pb.RaftLogPlace_RAFT_LOG_UNDECLARED && d.RaftLog != own {
			return false, conflict(fmt.Sprintf("the replica at %s keeps its Raft log in %s and this group in %s: start it again on an empty data directory with --raft-log %s",
				addr, raftLogWhere(d.RaftLog), raftLogWhere(own), RaftLogFlag(own)))
		}
		return true, nil
	}, func(last error) error {
		return statusError(codes.DeadlineExceeded, pb.ErrorReason_TIMEOUT, fmt.Sprintf(
			"the new replica at %s did not answer before the catch-up timeout (last error: %v); it was not added", addr, last), nil)
	})
}

// waitApplied polls the replica at addr until it has applied index target.
func (b *Broker) waitApplied(ctx context.Context, addr string, client pb.BrokerClient, target uint64) error {
	var applied uint64
	return pollJoiner(ctx, client, func(d *pb.DescribeBrokerResponse) (bool, error) {
		if err := b.otherGroup(addr, d); err != nil {
			return false, err
		}
		applied = d.AppliedIndex
		return applied >= target, nil
	}, func(last error) error {
		return statusError(codes.DeadlineExceeded, pb.ErrorReason_TIMEOUT, fmt.Sprintf(
			"the new replica at %s applied index %d of %d before the catch-up timeout (last error: %v); it stays a non-voter: call again to wait on, or remove it",
			addr, applied, target, last), nil)
	})
}

// otherGroup refuses a replica of another group than this one.
func (b *Broker) otherGroup(addr string, d *pb.DescribeBrokerResponse) error {
	if d.Group != b.cfg.Group {
		return conflict(fmt.Sprintf("%s is a replica of group %s, not %s", addr, d.Group, b.cfg.Group))
	}
	return nil
}

// pollJoiner asks a new replica to describe itself every 100 ms until
// done says it is done or refuses it, or until ctx ends: then timedOut,
// given the last call's error, says so.
func pollJoiner(ctx context.Context, client pb.BrokerClient, done func(*pb.DescribeBrokerResponse) (bool, error), timedOut func(last error) error) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		d, err := client.DescribeBroker(ctx, &pb.DescribeBrokerRequest{})
		if err == nil {
			if ok, err := done(d); ok || err != nil {
				return err
			}
		} else {
			last = err
		}
		select {
		case <-ctx.Done():
			return timedOut(last)
		case <-tick.C:
		}
	}
}

func (s *service) RemoveReplica(_ context.Context, req *pb.RemoveReplicaRequest) (*pb.MembershipResponse, error) {
	b := s.b
	if req.Id < 1 {
		return nil, invalid(pb.ErrorReason_ILLEGAL_ARGUMENT, "a replica id >= 1 is needed")
	}
	if err := b.requireMaster(); err != nil {
		return nil, err
	}
	if req.Id == b.self {
		return nil, conflict(fmt.Sprintf("replica %d is the master: transfer the leadership first (transfer-leader)", req.Id))
	}
	servers, err := b.servers()
	if err != nil {
		return nil, err
	}
	id := raft.ServerID(strconv.Itoa(int(req.Id)))
	found := false
	for _, srv := range servers {
		found = found || srv.ID == id
	}
	if !found {
		return b.membership() // not a member: the call is idempotent
	}
	if err := b.node.Raft.RemoveServer(id, 0, membershipChangeTimeout).Error(); err != nil {
		return nil, b.membershipError("remove replica "+string(id), err)
	}
	b.log.Info("replica removed from the group", "replica", req.Id)
	return b.membership()
}

func (s *service) TransferLeader(ctx context.Context, req *pb.TransferLeaderRequest) (*pb.MembershipResponse, error) {
	b := s.b
	if req.ToId < 0 {
		return nil, invalid(pb.ErrorReason_ILLEGAL_ARGUMENT, "to_id is a replica id, or 0 for any")
	}
	if err := b.requireMaster(); err != nil {
		return nil, err
	}
	if req.ToId == b.self {
		return b.membership()
	}
	servers, err := b.servers()
	if err != nil {
		return nil, err
	}
	self, to := raft.ServerID(strconv.Itoa(int(b.self))), raft.ServerID(strconv.Itoa(int(req.ToId)))
	var (
		others int
		addr   raft.ServerAddress
	)
	for _, srv := range servers {
		if srv.Suffrage != raft.Voter || srv.ID == self {
			continue
		}
		others++
		if srv.ID == to {
			addr = srv.Address
		}
	}
	switch {
	case others == 0:
		return nil, conflict("the group has no other voter to hand the master role to")
	case req.ToId != 0 && addr == "":
		return nil, conflict(fmt.Sprintf("replica %d is not a voter of the group", req.ToId))
	}
	b.offsets.flush(ctx) // as TransferLeadership does
	start := b.node.Raft.LeadershipTransfer
	if req.ToId != 0 {
		start = func() raft.Future { return b.node.Raft.LeadershipTransferToServer(to, addr) }
	}
	if err := b.handOver(start); err != nil {
		return nil, b.transferError(err)
	}
	// The new master is known to this replica once it has heard from it.
	for tick := time.NewTicker(20 * time.Millisecond); ; {
		if id, _ := b.leaderInfo(); id > 0 && id != b.self {
			tick.Stop()
			return b.membership()
		}
		select {
		case <-ctx.Done():
			tick.Stop()
			return nil, statusError(codes.DeadlineExceeded, pb.ErrorReason_TIMEOUT, "the leadership was handed over, but no new master was heard of before the call's deadline", nil)
		case <-tick.C:
		}
	}
}

// servers is the group's latest Raft configuration.
func (b *Broker) servers() ([]raft.Server, error) {
	f := b.node.Raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, statusError(codes.Unavailable, pb.ErrorReason_STORE_ERROR, "read the raft configuration: "+err.Error(), nil)
	}
	return f.Configuration().Servers, nil
}

// membership answers a membership call with the configuration now.
func (b *Broker) membership() (*pb.MembershipResponse, error) {
	servers, err := b.servers()
	if err != nil {
		return nil, err
	}
	leaderID, _ := b.leaderInfo()
	out := &pb.MembershipResponse{MasterId: leaderID}
	for _, srv := range servers {
		id, err := strconv.Atoi(string(srv.ID))
		if err != nil {
			continue
		}
		r := &pb.ReplicaInfo{Id: int32(id), RaftAddress: string(srv.Address), GrpcAddress: b.meta.replicaAddr(int32(id)), Master: int32(id) == leaderID}
		if srv.Suffrage == raft.Voter {
			out.Voters = append(out.Voters, r)
		} else {
			out.Nonvoters = append(out.Nonvoters, r)
		}
	}
	return out, nil
}

// membershipError maps a failed configuration change to a status.
func (b *Broker) membershipError(what string, err error) error {
	if st := b.raftRefusal(what, err); st != nil {
		return st
	}
	return conflict(what + ": " + err.Error())
}

// transferError maps a leadership transfer that failed after its target
// was checked. Past raft's refusals, what is left is transient: the
// target did not catch up or win within an election timeout, or its
// TimeoutNow did not reach it (it is down), each still after handOver's
// tries. Raft's errors for these are unexported, so they are told apart by
// being none of the others. The target may yet win from a TimeoutNow that
// arrived, hence TIMEOUT's "outcome unknown".
func (b *Broker) transferError(err error) error {
	const what = "transfer the leadership"
	if st := b.raftRefusal(what, err); st != nil {
		return st
	}
	return statusError(codes.Unavailable, pb.ErrorReason_TIMEOUT, what+": "+err.Error()+"; the target may be down or not caught up yet: try again", nil)
}

// raftRefusal is the status of a membership call raft refused for this
// replica's state rather than for the change itself (shutting down, not
// leading, or busy with another change or transfer), nil for any other
// error. Shutting down is answered as replicationError answers it.
func (b *Broker) raftRefusal(what string, err error) error {
	switch {
	case errors.Is(err, raft.ErrRaftShutdown):
		return errShuttingDown
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost):
		return b.notLeader()
	case errors.Is(err, raft.ErrEnqueueTimeout), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return statusError(codes.Unavailable, pb.ErrorReason_TIMEOUT, what+": "+err.Error()+"; try again", nil)
	}
	return nil
}

func conflict(msg string) error {
	return statusError(codes.FailedPrecondition, pb.ErrorReason_MEMBERSHIP_CONFLICT, msg, nil)
}
