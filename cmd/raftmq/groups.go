package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/raftmq/raftmq/cluster/pb"
)

// group list and group describe: who consumes, as the brokers know it from
// the members' heartbeats (RocketMQ's consumerConnection and
// consumerProgress are what people reach for when a queue "stops being
// consumed").

func groupMembersCommands(ns *string) []*cobra.Command {
	list := &cobra.Command{
		Use:   "list",
		Short: "the consumer groups with live members: GROUP MEMBERS MODE SUBSCRIPTIONS",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withCluster(cmd.Context(), *ns, func(a *admin, info *pb.ClusterInfoResponse) error {
				groups, err := liveGroups(cmd.Context(), a, info, "")
				if err != nil {
					return err
				}
				w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
				fmt.Fprintln(w, "GROUP\tMEMBERS\tMODE\tSUBSCRIPTIONS")
				for _, g := range groups {
					modes, subs := map[string]bool{}, map[string]bool{}
					for _, m := range g.Members {
						modes[strings.ToLower(m.Mode.String())] = true
						for _, s := range m.Subscriptions {
							subs[s.Topic] = true
						}
					}
					fmt.Fprintf(w, "%s\t%d\t%s\t%s\n", g.Group, len(g.Members), joinKeys(modes), joinKeys(subs))
				}
				return w.Flush()
			})
		},
	}
	var group string
	describe := &cobra.Command{
		Use:   "describe",
		Short: "a group's members: CLIENT MODE HEARTBEAT SUBSCRIPTIONS QUEUES",
		Long: `A consumer group's live members, as the brokers know them from heartbeats:
each member's client id, mode, time since its last heartbeat, subscriptions
(topic and tag expression) and the queues it consumes now (TOPIC
BROKER/QUEUE,...), which push consumers report in their heartbeats.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if group == "" {
				return errors.New("--group is required")
			}
			return withCluster(cmd.Context(), *ns, func(a *admin, info *pb.ClusterInfoResponse) error {
				groups, err := liveGroups(cmd.Context(), a, info, group)
				if err != nil {
					return err
				}
				if len(groups) == 0 {
					return fmt.Errorf("consumer group %q has no live members", group)
				}
				w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
				fmt.Fprintln(w, "CLIENT\tMODE\tHEARTBEAT\tSUBSCRIPTIONS\tQUEUES")
				for _, m := range groups[0].Members {
					var subs []string
					for _, s := range m.Subscriptions {
						subs = append(subs, s.Topic+"("+s.Expression+")")
					}
					age := time.Since(time.UnixMilli(m.LastHeartbeatMs)).Round(time.Second)
					fmt.Fprintf(w, "%s\t%s\t%v ago\t%s\t%s\n", m.ClientId, strings.ToLower(m.Mode.String()), age, strings.Join(subs, ","), heldString(m.Held))
				}
				return w.Flush()
			})
		},
	}
	describe.Flags().StringVar(&group, "group", "", "consumer group")

	var rgroup, rtopic, to string
	reset := &cobra.Command{
		Use:   "reset-offset",
		Short: "move a group's offsets on a topic: --to earliest|latest|TIME|OFFSET",
		Long: `Move consumer group --group's offsets on every queue of --topic, on each
broker group hosting it, as mqadmin resetOffsetByTime does: to the first
message (earliest), past the last (latest), to the first message stored
at or after TIME (RFC 3339, e.g. 2026-12-01T10:00:00Z), or to queue offset
OFFSET (a number; within each queue's range). The new offsets are
replicated like any commit. Live members need no restart: each one's next
pull of a reset queue is answered "offset moved" with the new offset (a
long-held pull at once), and their commits of the old position are
ignored until then. Prints each queue's new offset.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if rgroup == "" || rtopic == "" || to == "" {
				return errors.New("--group, --topic and --to are required")
			}
			req, err := resetRequest(rgroup, rtopic, to)
			if err != nil {
				return err
			}
			return withCluster(cmd.Context(), *ns, func(a *admin, info *pb.ClusterInfoResponse) error {
				hosts, err := a.hostingNow(cmd.Context(), info, rtopic, "")
				if err != nil {
					return err
				}
				for _, h := range hosts {
					var resp *pb.ResetConsumerOffsetResponse
					err := a.onMaster(cmd.Context(), h.group, func(ctx context.Context, b pb.BrokerClient) (err error) {
						resp, err = b.ResetConsumerOffset(ctx, req)
						return err
					})
					if err != nil {
						return fmt.Errorf("reset on %s: %w", h.group.Group, err)
					}
					for _, o := range resp.Offsets {
						fmt.Printf("reset group %s topic %s on %s queue %d to %d\n", rgroup, rtopic, h.group.Group, o.QueueId, o.Offset)
					}
				}
				return nil
			})
		},
	}
	reset.Flags().StringVar(&rgroup, "group", "", "consumer group")
	reset.Flags().StringVar(&rtopic, "topic", "", "topic")
	reset.Flags().StringVar(&to, "to", "", "earliest, latest, an RFC 3339 time, or a queue offset")
	return []*cobra.Command{list, describe, reset}
}

// resetRequest reads --to.
func resetRequest(group, topic, to string) (*pb.ResetConsumerOffsetRequest, error) {
	req := &pb.ResetConsumerOffsetRequest{ConsumerGroup: group, Topic: topic}
	switch to {
	case "earliest":
		req.To = &pb.ResetConsumerOffsetRequest_Earliest{Earliest: true}
	case "latest":
		req.To = &pb.ResetConsumerOffsetRequest_Latest{Latest: true}
	default:
		if off, err := strconv.ParseInt(to, 10, 64); err == nil && off >= 0 {
			req.To = &pb.ResetConsumerOffsetRequest_Offset{Offset: off}
		} else if t, err := time.Parse(time.RFC3339, to); err == nil {
			req.To = &pb.ResetConsumerOffsetRequest_TimestampMs{TimestampMs: t.UnixMilli()}
		} else {
			return nil, fmt.Errorf("--to %q: want earliest, latest, an RFC 3339 time or a queue offset", to)
		}
	}
	return req, nil
}

// liveGroups asks every broker group's master for the members it knows
// (of group, or of every group) and merges them: a member heartbeats to
// the groups hosting its subscriptions, and the newest heartbeat wins.
func liveGroups(ctx context.Context, a *admin, info *pb.ClusterInfoResponse, group string) ([]*pb.ConsumerGroupMembers, error) {
	byGroup := map[string]map[string]*pb.ConsumerMember{}
	for _, g := range info.Groups {
		var resp *pb.DescribeConsumerGroupsResponse
		err := a.onMaster(ctx, g, func(ctx context.Context, b pb.BrokerClient) (err error) {
			resp, err = b.DescribeConsumerGroups(ctx, &pb.DescribeConsumerGroupsRequest{Group: group})
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("consumer groups on %s: %w", g.Group, err)
		}
		for _, cg := range resp.Groups {
			if byGroup[cg.Group] == nil {
				byGroup[cg.Group] = map[string]*pb.ConsumerMember{}
			}
			for _, m := range cg.Members {
				if old := byGroup[cg.Group][m.ClientId]; old == nil || old.LastHeartbeatMs < m.LastHeartbeatMs {
					byGroup[cg.Group][m.ClientId] = m
				}
			}
		}
	}
	var out []*pb.ConsumerGroupMembers
	for name, members := range byGroup {
		cg := &pb.ConsumerGroupMembers{Group: name}
		for _, m := range members {
			cg.Members = append(cg.Members, m)
		}
		sort.Slice(cg.Members, func(i, j int) bool { return cg.Members[i].ClientId < cg.Members[j].ClientId })
		out = append(out, cg)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Group < out[j].Group })
	return out, nil
}

// heldString is "TOPIC BROKER/Q,Q; TOPIC ..." or "-".
func heldString(held []*pb.HeldQueue) string {
	if len(held) == 0 {
		return "-"
	}
	var parts []string
	last := ""
	for _, h := range held {
		key := h.Topic + " " + h.BrokerGroup
		if key == last {
			parts[len(parts)-1] += fmt.Sprintf(",%d", h.QueueId)
			continue
		}
		parts = append(parts, fmt.Sprintf("%s/%d", key, h.QueueId))
		last = key
	}
	return strings.Join(parts, "; ")
}

func joinKeys(set map[string]bool) string {
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return strings.Join(keys, ",")
}
