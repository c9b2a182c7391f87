package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/raftmq/raftmq/cluster/pb"
)

// group add-replica, remove-replica and transfer-leader: a broker group's
// membership, changed through its master (broker/membership.go).

func replicaCommands(ns *string) []*cobra.Command {
	var addGroup, raftAddr, grpcAddr string
	var addID int
	var catchUp time.Duration
	add := &cobra.Command{
		Use:   "add-replica",
		Short: "add a replica to a broker group: a non-voter until it has caught up, then a voter",
		Long: `Add replica --id of broker group --group, a broker started with
--join-group (and an empty --dir) at Raft address --raft and gRPC address
--grpc. The master adds it as a non-voter, which it replicates to (a
snapshot, the commitlog copied from a peer, then the log) while the group
takes writes; once it has applied what the master had applied when the
command began, the master makes it a voter. Waits up to --timeout for
that; a replica not caught up by then stays a non-voter: run the command
again to wait on, or remove it. Prints the membership: ID ROLE RAFT GRPC.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if addGroup == "" || addID < 1 || raftAddr == "" || grpcAddr == "" {
				return errors.New("--group, --id (>= 1), --raft and --grpc are required")
			}
			req := &pb.AddReplicaRequest{Id: int32(addID), RaftAddress: raftAddr, GrpcAddress: grpcAddr, CatchUpTimeoutMs: catchUp.Milliseconds()}
			return changeMembership(cmd.Context(), *ns, addGroup, catchUp+10*time.Second, func(ctx context.Context, b pb.BrokerClient) (*pb.MembershipResponse, error) {
				return b.AddReplica(ctx, req)
			})
		},
	}
	add.Flags().StringVar(&addGroup, "group", "", "broker group")
	add.Flags().IntVar(&addID, "id", 0, "the new replica's id")
	add.Flags().StringVar(&raftAddr, "raft", "", "the new replica's Raft address (its --advertise-raft or --raft)")
	add.Flags().StringVar(&grpcAddr, "grpc", "", "the new replica's gRPC address (its --advertise-grpc or --grpc)")
	add.Flags().DurationVar(&catchUp, "timeout", 5*time.Minute, "how long the new replica may take to catch up")

	var rmGroup string
	var rmID int
	remove := &cobra.Command{
		Use:   "remove-replica",
		Short: "take a replica out of a broker group (a dead one, to replace it)",
		Long: `Remove replica --id from broker group --group, through its master. The
master cannot remove itself: transfer-leader first. A removed replica that
still runs should be stopped; its data dir is of no further use. Prints the
membership: ID ROLE RAFT GRPC.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if rmGroup == "" || rmID < 1 {
				return errors.New("--group and --id (>= 1) are required")
			}
			return changeMembership(cmd.Context(), *ns, rmGroup, 15*time.Second, func(ctx context.Context, b pb.BrokerClient) (*pb.MembershipResponse, error) {
				return b.RemoveReplica(ctx, &pb.RemoveReplicaRequest{Id: int32(rmID)})
			})
		},
	}
	remove.Flags().StringVar(&rmGroup, "group", "", "broker group")
	remove.Flags().IntVar(&rmID, "id", 0, "the replica to remove")

	var trGroup string
	var to int
	transfer := &cobra.Command{
		Use:   "transfer-leader",
		Short: "hand a broker group's master role to another replica",
		Long: `Hand the master role of broker group --group to replica --to (default: any
caught-up voter), as before maintenance on the master. Prints the
membership once a new master is known: ID ROLE RAFT GRPC. A transfer the
target cannot take now (it is down, or not caught up within an election
timeout) fails with Unavailable: try again.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if trGroup == "" || to < 0 {
				return errors.New("--group is required, and --to is a replica id")
			}
			return changeMembership(cmd.Context(), *ns, trGroup, 15*time.Second, func(ctx context.Context, b pb.BrokerClient) (*pb.MembershipResponse, error) {
				return b.TransferLeader(ctx, &pb.TransferLeaderRequest{ToId: int32(to)})
			})
		},
	}
	transfer.Flags().StringVar(&trGroup, "group", "", "broker group")
	transfer.Flags().IntVar(&to, "to", 0, "the replica to hand over to (0: any)")
	return []*cobra.Command{add, remove, transfer, moveRaftLogCommand(ns)}
}

// moveRaftLogCommand is group move-raft-log: the move of a WAL group's
// Raft log into the commitlog (broker/raftlogmove.go).
func moveRaftLogCommand(ns *string) *cobra.Command {
	var group string
	var abort bool
	cmd := &cobra.Command{
		Use:   "move-raft-log",
		Short: "move a broker group's Raft log from its replicas' WALs into their commitlogs (writes pause meanwhile)",
		Long: `Move broker group --group's Raft log from each replica's WAL into its
commitlog (docs/commitlog-raft-log.md), through its master. The first run
begins the move: from the move's entry on, the group refuses writes
(sends, delayed messages' moves, transactions' ends, topic deletions)
with WRITES_PAUSED, so that every replica's commitlog ends in the same
place, and each replica takes a snapshot. Reads, consumer offsets and
metadata go on. Then restart each replica, with --raft-log auto (the
default) or commitlog: it moves its WAL into its commitlog as it starts
(auto leaves one that cannot move yet on its WAL, with a warning in its
log; --raft-log wal keeps it there). Run the command again: once
every voter keeps its log in the commitlog it ends the move, and writes
resume; until then it lists the voters still on their WAL. --abort takes
the group back to its WAL and resumes writes, while no voter has moved; it
answers once every voter has applied the abort.
Prints GROUP RAFT_LOG MOVE_INDEX WAL_REPLICAS.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if group == "" {
				return errors.New("--group is required")
			}
			return withCluster(cmd.Context(), *ns, func(a *admin, info *pb.ClusterInfoResponse) error {
				groups, err := targetGroups(info, group)
				if err != nil {
					return err
				}
				// The master asks each voter where it keeps its log, at
				// the address the name servers know.
				req := &pb.MoveRaftLogRequest{Abort: abort, GrpcAddresses: map[int32]string{}}
				for _, r := range groups[0].Replicas {
					req.GrpcAddresses[r.Id] = r.GrpcAddress
				}
				var resp *pb.MoveRaftLogResponse
				if err := a.onMasterWithin(cmd.Context(), groups[0], 15*time.Second, func(ctx context.Context, b pb.BrokerClient) (err error) {
					resp, err = b.MoveRaftLog(ctx, req)
					return err
				}); err != nil {
					return err
				}
				w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
				fmt.Fprintln(w, "GROUP\tRAFT_LOG\tMOVE_INDEX\tWAL_REPLICAS")
				place, index, wal := strings.ToLower(strings.TrimPrefix(resp.GroupRaftLog.String(), "RAFT_LOG_")), "-", "-"
				if resp.MoveIndex > 0 {
					index = fmt.Sprint(resp.MoveIndex)
				}
				if len(resp.WalReplicas) > 0 {
					ids := make([]string, len(resp.WalReplicas))
					for i, id := range resp.WalReplicas {
						ids[i] = fmt.Sprint(id)
					}
					wal = strings.Join(ids, ",")
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", group, place, index, wal)
				return w.Flush()
			})
		},
	}
	cmd.Flags().StringVar(&group, "group", "", "broker group")
	cmd.Flags().BoolVar(&abort, "abort", false, "abort the move begun, while no voter has moved: back to the WAL, writes resumed")
	return cmd
}

// changeMembership runs a membership call on the group's master and prints
// the membership it answers with.
func changeMembership(ctx context.Context, ns, group string, callTimeout time.Duration,
	call func(context.Context, pb.BrokerClient) (*pb.MembershipResponse, error)) error {
	return withCluster(ctx, ns, func(a *admin, info *pb.ClusterInfoResponse) error {
		groups, err := targetGroups(info, group)
		if err != nil {
			return err
		}
		a.timeout = max(a.timeout, callTimeout)
		var resp *pb.MembershipResponse
		if err := a.onMasterWithin(ctx, groups[0], callTimeout, func(ctx context.Context, b pb.BrokerClient) (err error) {
			resp, err = call(ctx, b)
			return err
		}); err != nil {
			return err
		}
		w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(w, "ID\tROLE\tRAFT\tGRPC")
		print := func(rs []*pb.ReplicaInfo, role string) {
			for _, r := range rs {
				role := role
				if r.Master {
					role = "master"
				}
				grpcAddr := r.GrpcAddress
				if grpcAddr == "" {
					grpcAddr = "-" // known once it has been master
				}
				fmt.Fprintf(w, "%d\t%s\t%s\t%s\n", r.Id, role, r.RaftAddress, grpcAddr)
			}
		}
		print(resp.Voters, "slave")
		print(resp.Nonvoters, "non-voter")
		return w.Flush()
	})
}
