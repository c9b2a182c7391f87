package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/raftmq/raftmq/cluster/pb"
	"github.com/raftmq/raftmq/message"
)

func groupCommand() *cobra.Command {
	var ns string
	cmd := &cobra.Command{Use: "group", Short: "inspect consumer groups (members, queues held, progress); change a broker group's replicas"}
	namesrvFlag(cmd, &ns)
	var group, topic string
	progress := &cobra.Command{
		Use:   "progress",
		Short: "per queue: the broker's max offset, the group's committed offset, and the lag",
		Long: `Per queue of each topic (--topic, or every topic the group has committed
offsets on): TOPIC BROKER QUEUE MAX COMMITTED LAG. COMMITTED is - when the
group has none for the queue (its lag counts from the queue's minimum).`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if group == "" {
				return errors.New("--group is required")
			}
			return withCluster(cmd.Context(), ns, func(a *admin, info *pb.ClusterInfoResponse) error {
				return printProgress(cmd.Context(), a, info, group, topic)
			})
		},
	}
	progress.Flags().StringVar(&group, "group", "", "consumer group")
	progress.Flags().StringVar(&topic, "topic", "", "only this topic")
	cmd.AddCommand(progress)
	cmd.AddCommand(groupMembersCommands(&ns)...)
	cmd.AddCommand(replicaCommands(&ns)...)
	return cmd
}

// printProgress writes the group progress table.
func printProgress(ctx context.Context, a *admin, info *pb.ClusterInfoResponse, group, topic string) error {
	topics := map[string]bool{}
	if topic != "" {
		topics[topic] = true
	} else {
		for _, g := range info.Groups {
			for _, t := range g.Topics {
				topics[t] = true
			}
		}
	}
	type row struct {
		topic, broker       string
		queue               int32
		min, max, committed int64
	}
	var rows []row
	for t := range topics {
		for _, g := range hosting(info, t) {
			var d *pb.DescribeBrokerResponse
			err := a.onMaster(ctx, g, func(ctx context.Context, b pb.BrokerClient) (err error) {
				d, err = b.DescribeBroker(ctx, &pb.DescribeBrokerRequest{})
				return err
			})
			if err != nil {
				return err
			}
			var tc *pb.TopicConfig
			for _, c := range d.Topics {
				if c.Name == t {
					tc = c
				}
			}
			if tc == nil {
				continue
			}
			for q := int32(0); q < tc.ReadQueues; q++ {
				r := row{topic: t, broker: g.Group, queue: q}
				err := a.onMaster(ctx, g, func(ctx context.Context, b pb.BrokerClient) error {
					o, err := b.GetQueueOffsets(ctx, &pb.GetQueueOffsetsRequest{Topic: t, QueueId: q})
					if err != nil {
						return err
					}
					c, err := b.QueryConsumerOffset(ctx, &pb.QueryConsumerOffsetRequest{ConsumerGroup: group, Topic: t, QueueId: q})
					if err != nil {
						return err
					}
					r.min, r.max, r.committed = o.MinOffset, o.MaxOffset, c.Offset
					return nil
				})
				if err != nil {
					return err
				}
				if topic == "" && r.committed < 0 {
					continue // not a topic this group reads
				}
				rows = append(rows, r)
			}
		}
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].topic != rows[j].topic {
			return rows[i].topic < rows[j].topic
		}
		if rows[i].broker != rows[j].broker {
			return rows[i].broker < rows[j].broker
		}
		return rows[i].queue < rows[j].queue
	})
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "TOPIC\tBROKER\tQUEUE\tMAX\tCOMMITTED\tLAG")
	for _, r := range rows {
		committed, from := "-", r.min
		if r.committed >= 0 {
			committed, from = fmt.Sprint(r.committed), r.committed
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%s\t%d\n", r.topic, r.broker, r.queue, r.max, committed, max(r.max-from, 0))
	}
	return w.Flush()
}

func msgCommand() *cobra.Command {
	var ns string
	cmd := &cobra.Command{Use: "msg", Short: "find messages"}
	namesrvFlag(cmd, &ns)
	var id, key, topic string
	query := &cobra.Command{
		Use:   "query",
		Short: "find a message by id (--id) or by key (--key, with --topic)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if (id == "") == (key == "") {
				return errors.New("give --id, or --key with --topic")
			}
			if key != "" && topic == "" {
				return errors.New("--key needs --topic")
			}
			a, err := newAdmin(ns)
			if err != nil {
				return err
			}
			defer a.close()
			info, err := a.clusterInfo(cmd.Context())
			if err != nil {
				return err
			}
			var records [][]byte
			found := 0
			var groups []*pb.ClusterGroup
			if id != "" {
				group, _, err := message.ParseID(id)
				if err != nil {
					return err
				}
				if groups, err = targetGroups(info, group); err != nil {
					return err
				}
			} else if groups = hosting(info, topic); len(groups) == 0 {
				return fmt.Errorf("topic %q does not exist", topic)
			}
			for _, g := range groups {
				err := a.onMaster(cmd.Context(), g, func(ctx context.Context, b pb.BrokerClient) error {
					var r *pb.QueryMessageResponse
					var err error
					if id != "" {
						r, err = b.QueryMessageById(ctx, &pb.QueryMessageByIdRequest{MsgId: id})
					} else {
						r, err = b.QueryMessageByKey(ctx, &pb.QueryMessageByKeyRequest{Topic: topic, Key: key, Max: 32})
					}
					if err == nil {
						records = append(records, r.Records...)
					}
					return err
				})
				if err != nil {
					return fmt.Errorf("query %s: %w", g.Group, err)
				}
				for _, raw := range records {
					r, err := message.Decode(raw)
					if err != nil {
						return err
					}
					fmt.Printf("msgId=%s topic=%s queue=%d queueOffset=%d tags=%s keys=%s storeTime=%s reconsumeTimes=%s body=%q\n",
						message.FormatID(g.Group, r.Offset), r.Topic, r.QueueID, r.QueueOffset, r.Tags,
						strings.Join(r.Keys, ","), time.UnixMilli(r.StoreTime).UTC().Format(time.RFC3339Nano),
						orZero(r.Properties[message.PropertyReconsumeTimes]), r.Body)
				}
				found += len(records)
				records = records[:0]
			}
			if found == 0 { // an id not found is the broker's NotFound, above
				return fmt.Errorf("no message with key %q in topic %s", key, topic)
			}
			return nil
		},
	}
	query.Flags().StringVar(&id, "id", "", "message id (GROUP@OFFSET)")
	query.Flags().StringVar(&key, "key", "", "message key (or the producer's unique key)")
	query.Flags().StringVar(&topic, "topic", "", "topic (with --key)")
	cmd.AddCommand(query)
	return cmd
}

func orZero(s string) string {
	if s == "" {
		return "0"
	}
	return s
}
