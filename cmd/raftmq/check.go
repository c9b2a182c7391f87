package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/raftmq/raftmq/cluster/pb"
)

// clusterCheckCommand compares the replicas of every group: a divergence
// (two replicas holding different bytes at the same commitlog offsets) is
// the one fault Raft replication must never allow, so an operator can ask
// for proof, under load or after a drill.
func clusterCheckCommand(ns *string) *cobra.Command {
	return &cobra.Command{
		Use:   "check",
		Short: "compare each group's replicas by commitlog checksum over the range all of them hold; exit 1 on a divergence or an unreachable replica",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withCluster(cmd.Context(), *ns, func(a *admin, info *pb.ClusterInfoResponse) error {
				return checkReplicas(cmd.Context(), a, info)
			})
		},
	}
}

type replicaSum struct {
	id     int32
	client pb.BrokerClient
	end    int64
	sum    string
	err    error
}

// checkReplicas hashes every replica's commitlog up to the lowest end among
// a group's replicas. Every replica's log is a prefix of its master's, so
// that end is a whole-batch boundary on each, and the hashes must agree
// even while writes go on.
func checkReplicas(ctx context.Context, a *admin, info *pb.ClusterInfoResponse) error {
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "GROUP\tREPLICA\tTO_OFFSET\tSHA256\tSTATUS")
	bad := 0
	for _, g := range info.Groups {
		var reps []*replicaSum
		end := int64(-1)
		for _, r := range g.Replicas {
			rs := &replicaSum{id: r.Id}
			reps = append(reps, rs)
			if rs.client, rs.err = a.broker(r.GrpcAddress); rs.err != nil {
				continue
			}
			dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			d, err := rs.client.DescribeBroker(dctx, &pb.DescribeBrokerRequest{})
			cancel()
			if rs.err = err; err == nil && (end < 0 || d.CommitlogMaxOffset < end) {
				end = d.CommitlogMaxOffset
			}
		}
		first := ""
		for _, rs := range reps {
			status := "ok"
			switch {
			case rs.err != nil:
				status = "unreachable: " + rs.err.Error()
			case end == 0: // an empty log: nothing to compare (0 would mean "to its end")
				rs.sum = "-"
			default:
				cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
				resp, err := rs.client.ChecksumCommitlog(cctx, &pb.ChecksumCommitlogRequest{ToOffset: end})
				cancel()
				if err != nil {
					rs.err, status = err, "error: "+err.Error()
					break
				}
				rs.sum = resp.Sha256
				if first == "" {
					first = rs.sum
				} else if rs.sum != first {
					status = "DIVERGED"
				}
			}
			if status != "ok" {
				bad++
			}
			fmt.Fprintf(w, "%s\t%d\t%d\t%s\t%s\n", g.Group, rs.id, max(end, 0), rs.sum, status)
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if bad > 0 {
		return errors.New(fmt.Sprint(bad, " replica(s) diverged or could not be checked"))
	}
	return nil
}
