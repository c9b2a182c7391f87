package broker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/raftmq/raftmq/cluster/pb"
)

// A replica that missed more than the Raft log a master retains gets a
// snapshot: metadata, and how far the commitlog reached (NATS Streaming's
// approach: the snapshot is small and the data is caught up out of band).
// catchUp copies the commitlog up to that point from a peer, whole batches
// at a time, through CopyCommitlog; the copy is byte-identical, because
// every replica's commitlog is a prefix of the master's. When the store is
// the Raft log, the copy goes to where the snapshot's Raft entry ends
// (fsm.install), and a peer serves Raft's own entries it applied past
// what it dispatched (committedEnd).
//
// It runs inside the state machine's Restore, which holds the Raft
// snapshot install open, so it is bounded by CatchUpTimeout: what it copied
// stays, and an unfinished copy fails the install, which the master retries
// (from further on, each time).
func (b *Broker) catchUp(to int64, index uint64) error {
	ctx, cancel := context.WithTimeout(b.ctx, b.cfg.CatchUpTimeout)
	defer cancel()
	err := errNoPeer
	for _, addr := range b.peerAddrs() {
		err = b.copyFrom(ctx, addr, to)
		if _, end := b.store.CommitlogOffsets(); err == nil && end >= to {
			break
		} else if err == nil {
			err = fmt.Errorf("peer %s: its commitlog ends at %d", addr, end)
		}
		b.log.Warn("commitlog catch-up from peer failed", "peer", addr, "err", err)
	}
	if _, end := b.store.CommitlogOffsets(); end < to || b.store.LastRaftIndex() < index {
		return fmt.Errorf("broker: catch-up reached commitlog offset %d and raft index %d of %d and %d: %w", end, b.store.LastRaftIndex(), to, index, err)
	}
	b.catchUps.Add(1)
	b.log.Info("commitlog caught up from peer", "raft_index", index, "end_offset", to)
	return nil
}

// peerAddrs lists the other replicas' gRPC addresses, the master first.
func (b *Broker) peerAddrs() []string {
	leaderID, leader := b.leaderInfo()
	var out []string
	if leader != "" && leaderID != b.self {
		out = append(out, leader)
	}
	if f := b.node.Raft.GetConfiguration(); f.Error() == nil {
		for _, srv := range f.Configuration().Servers {
			id, err := strconv.Atoi(string(srv.ID))
			if err != nil || int32(id) == b.self || int32(id) == leaderID {
				continue
			}
			if addr := b.meta.replicaAddr(int32(id)); addr != "" {
				out = append(out, addr)
			}
		}
	}
	return out
}

func (b *Broker) copyFrom(ctx context.Context, addr string, to int64) error {
	// Only a replica of this group may hand this one its commitlog.
	conn, err := grpc.NewClient(addr, b.groupReplicaCreds(),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxResponseSize(b.cfg))))
	if err != nil {
		return err
	}
	defer conn.Close()
	_, from := b.store.CommitlogOffsets()
	stream, err := pb.NewBrokerClient(conn).CopyCommitlog(ctx, &pb.CopyCommitlogRequest{FromOffset: from, ToOffset: to})
	if err != nil {
		return err
	}
	for {
		chunk, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := b.store.AppendRaw(chunk.Offset, chunk.Data); err != nil {
			return err
		}
	}
}

// copyChunk is the size CopyCommitlog aims at per message (whole batches:
// a chunk may be larger by one Raft entry).
const copyChunk = 1 << 20

// readTo is where a read of the commitlog asked to end at to (0: its end)
// ends: at most where this replica's commitlog ends with Raft's own
// entries it applied (storage.CommittedEnd), as it reports it.
func (b *Broker) readTo(to int64) int64 {
	end := b.store.CommittedEnd(b.node.Raft.AppliedIndex())
	if to > 0 {
		end = min(end, to)
	}
	return end
}

// CopyCommitlog streams this replica's commitlog from FromOffset to
// ToOffset (0: its end) to a replica catching up.
func (s *service) CopyCommitlog(req *pb.CopyCommitlogRequest, stream grpc.ServerStreamingServer[pb.CommitlogChunk]) error {
	if req.FromOffset < 0 || req.ToOffset < 0 {
		return invalid(pb.ErrorReason_ILLEGAL_ARGUMENT, "offsets must not be negative")
	}
	to := s.b.readTo(req.ToOffset)
	for from := req.FromOffset; ; {
		data, err := s.b.store.ReadCommitlog(from, to, copyChunk)
		if err != nil {
			return storeError(err)
		}
		if len(data) == 0 {
			return nil
		}
		if err := stream.Send(&pb.CommitlogChunk{Offset: from, Data: data}); err != nil {
			return err
		}
		from += int64(len(data))
	}
}

// ChecksumCommitlog hashes this replica's commitlog over a range of whole
// batches, so that replicas can be compared without copying their logs:
// after quiescence every replica of a group must give the same hash.
func (s *service) ChecksumCommitlog(ctx context.Context, req *pb.ChecksumCommitlogRequest) (*pb.ChecksumCommitlogResponse, error) {
	if req.FromOffset < 0 || req.ToOffset < 0 {
		return nil, invalid(pb.ErrorReason_ILLEGAL_ARGUMENT, "offsets must not be negative")
	}
	if req.ToOffset > 0 && req.ToOffset < req.FromOffset {
		return nil, invalid(pb.ErrorReason_ILLEGAL_ARGUMENT, "to_offset is below from_offset")
	}
	from := req.FromOffset
	if clMin, _ := s.b.store.CommitlogOffsets(); from == 0 {
		from = clMin
	}
	h := sha256.New()
	pos, to := from, s.b.readTo(req.ToOffset)
	for {
		if err := ctx.Err(); err != nil {
			return nil, status.FromContextError(err).Err()
		}
		data, err := s.b.store.ReadCommitlog(pos, to, copyChunk)
		if err != nil {
			return nil, storeError(err)
		}
		if len(data) == 0 {
			break
		}
		h.Write(data)
		pos += int64(len(data))
	}
	return &pb.ChecksumCommitlogResponse{FromOffset: from, ToOffset: pos, Sha256: hex.EncodeToString(h.Sum(nil))}, nil
}
