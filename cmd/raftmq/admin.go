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
	"google.golang.org/grpc"

	"github.com/raftmq/raftmq/broker"
	"github.com/raftmq/raftmq/cluster/pb"
	"github.com/raftmq/raftmq/message"
)

// admin reaches the name servers (any one answers; the next is tried on
// failure) and the brokers they name.
type admin struct {
	nameServers []string
	conns       map[string]*grpc.ClientConn
	timeout     time.Duration
}

// namesrvFlag adds --namesrv to a client command.
// It adds the client TLS flags too (clientTLSFlags).
func namesrvFlag(cmd *cobra.Command, dst *string) {
	cmd.PersistentFlags().StringVar(dst, "namesrv", "", "name server addresses HOST:PORT[,HOST:PORT] (default $RAFTMQ_NAMESRV)")
	clientTLSFlags(cmd)
}

// nameServerAddrs is --namesrv, else $RAFTMQ_NAMESRV, as a list.
func nameServerAddrs(flag string) ([]string, error) {
	if flag == "" {
		flag = os.Getenv("RAFTMQ_NAMESRV")
	}
	addrs := splitList(flag)
	if len(addrs) == 0 {
		return nil, errors.New("no name server: give --namesrv HOST:PORT or set RAFTMQ_NAMESRV")
	}
	return addrs, nil
}

func newAdmin(namesrvs string) (*admin, error) {
	addrs, err := nameServerAddrs(namesrvs)
	if err != nil {
		return nil, err
	}
	return &admin{nameServers: addrs, conns: map[string]*grpc.ClientConn{}, timeout: 10 * time.Second}, nil
}

// withCluster runs fn with an admin and the cluster as a name server sees
// it, and closes the admin after.
func withCluster(ctx context.Context, namesrvs string, fn func(*admin, *pb.ClusterInfoResponse) error) error {
	a, err := newAdmin(namesrvs)
	if err != nil {
		return err
	}
	defer a.close()
	info, err := a.clusterInfo(ctx)
	if err != nil {
		return err
	}
	return fn(a, info)
}

func (a *admin) close() {
	for _, c := range a.conns {
		c.Close()
	}
}

func (a *admin) conn(addr string) (*grpc.ClientConn, error) {
	if c, ok := a.conns[addr]; ok {
		return c, nil
	}
	opts, err := dialOptions()
	if err != nil {
		return nil, err
	}
	c, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, err
	}
	a.conns[addr] = c
	return c, nil
}

// nameServer runs fn against the name servers in turn until one answers.
func (a *admin) nameServer(ctx context.Context, fn func(context.Context, pb.NameServerClient) error) error {
	var err error
	for _, addr := range a.nameServers {
		var c *grpc.ClientConn
		if c, err = a.conn(addr); err != nil {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		err = fn(cctx, pb.NewNameServerClient(c))
		cancel()
		if reason, _ := pb.ReasonOf(err); err == nil || reason == pb.ErrorReason_TOPIC_NOT_FOUND {
			return err
		}
	}
	return fmt.Errorf("no name server answered (%s): %w", strings.Join(a.nameServers, ","), err)
}

func (a *admin) clusterInfo(ctx context.Context) (*pb.ClusterInfoResponse, error) {
	var info *pb.ClusterInfoResponse
	err := a.nameServer(ctx, func(ctx context.Context, c pb.NameServerClient) (err error) {
		info, err = c.GetClusterInfo(ctx, &pb.GetClusterInfoRequest{})
		return err
	})
	return info, err
}

func (a *admin) broker(addr string) (pb.BrokerClient, error) {
	c, err := a.conn(addr)
	if err != nil {
		return nil, err
	}
	return pb.NewBrokerClient(c), nil
}

// onMaster runs fn on a group's master, following NOT_LEADER answers and
// waiting out an election, within the admin timeout.
func (a *admin) onMaster(ctx context.Context, g *pb.ClusterGroup, fn func(context.Context, pb.BrokerClient) error) error {
	return a.onMasterWithin(ctx, g, 5*time.Second, fn)
}

// onMasterWithin is onMaster with each call given callTimeout.
func (a *admin) onMasterWithin(ctx context.Context, g *pb.ClusterGroup, callTimeout time.Duration, fn func(context.Context, pb.BrokerClient) error) error {
	addr := ""
	for _, r := range g.Replicas {
		if r.Master {
			addr = r.GrpcAddress
		}
	}
	deadline := time.Now().Add(a.timeout)
	next := 0
	var err error
	for time.Now().Before(deadline) {
		if addr == "" { // no master known: ask the replicas in turn
			addr = g.Replicas[next%len(g.Replicas)].GrpcAddress
			next++
		}
		var b pb.BrokerClient
		if b, err = a.broker(addr); err != nil {
			return err
		}
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		err = fn(cctx, b)
		cancel()
		reason, meta := pb.ReasonOf(err)
		if err == nil || reason != pb.ErrorReason_NOT_LEADER {
			return err
		}
		addr = meta["leader"]
		if addr == "" {
			time.Sleep(100 * time.Millisecond) // an election is on
		}
	}
	return fmt.Errorf("group %s: no master answered: %w", g.Group, err)
}

// targetGroups is the named group, or all groups.
func targetGroups(info *pb.ClusterInfoResponse, group string) ([]*pb.ClusterGroup, error) {
	if group == "" {
		if len(info.Groups) == 0 {
			return nil, errors.New("no broker group is known to the name server yet")
		}
		return info.Groups, nil
	}
	for _, g := range info.Groups {
		if g.Group == group {
			return []*pb.ClusterGroup{g}, nil
		}
	}
	return nil, fmt.Errorf("no broker group %q in the cluster", group)
}

func hosting(info *pb.ClusterInfoResponse, topic string) []*pb.ClusterGroup {
	var out []*pb.ClusterGroup
	for _, g := range info.Groups {
		for _, t := range g.Topics {
			if t == topic {
				out = append(out, g)
			}
		}
	}
	return out
}

func parsePerm(s string) (int32, error) {
	switch s {
	case "rw", "":
		return message.PermRead | message.PermWrite, nil
	case "r":
		return message.PermRead, nil
	case "w":
		return message.PermWrite, nil
	}
	return 0, fmt.Errorf("--perm %q: want rw, r or w", s)
}

func permString(p int32) string {
	s := ""
	if p&message.PermRead != 0 {
		s += "r"
	}
	if p&message.PermWrite != 0 {
		s += "w"
	}
	if s == "" {
		s = "-"
	}
	return s
}

func topicCommand() *cobra.Command {
	var ns string
	cmd := &cobra.Command{Use: "topic", Short: "create, update, delete, list and route topics"}
	namesrvFlag(cmd, &ns)

	var name, group, perm string
	var queues, readQ, writeQ int32
	create := &cobra.Command{
		Use:   "create",
		Short: "create a topic on a broker group (all groups when none is named)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return createTopic(cmd.Context(), ns, name, group, perm, queues)
		},
	}
	create.Flags().StringVar(&name, "name", "", "topic name")
	create.Flags().Int32Var(&queues, "queues", 4, "read and write queues on each group")
	create.Flags().StringVar(&group, "group", "", "broker group (default: all)")
	create.Flags().StringVar(&perm, "perm", "rw", "permissions: rw, r or w")

	var uname, ugroup, uperm string
	var uqueues int32
	update := &cobra.Command{
		Use:   "update",
		Short: "change a topic's queues or permissions on the groups hosting it",
		Long: `Change what is given of a topic (--perm, --queues, --read-queues,
--write-queues) on each group hosting it, or on --group; the rest stays
as it is. Each group's master is asked what it holds, so a topic created
a moment ago is found before the name servers have learned it.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var change topicChange
			fl := cmd.Flags()
			if fl.Changed("perm") {
				p, err := parsePerm(uperm)
				if err != nil {
					return err
				}
				change.perm = &p
			}
			for flag, v := range map[string]*int32{"queues": &uqueues, "read-queues": &readQ, "write-queues": &writeQ} {
				if fl.Changed(flag) && *v < 1 {
					return fmt.Errorf("--%s %d: queue counts must be at least 1", flag, *v)
				}
			}
			if fl.Changed("queues") {
				change.readQ, change.writeQ = &uqueues, &uqueues
			}
			if fl.Changed("read-queues") {
				change.readQ = &readQ
			}
			if fl.Changed("write-queues") {
				change.writeQ = &writeQ
			}
			if change == (topicChange{}) {
				return errors.New("nothing to change: give --perm, --queues, --read-queues or --write-queues")
			}
			return updateTopic(cmd.Context(), ns, uname, ugroup, change)
		},
	}
	update.Flags().StringVar(&uname, "name", "", "topic name")
	update.Flags().Int32Var(&uqueues, "queues", 0, "read and write queues")
	update.Flags().Int32Var(&readQ, "read-queues", 0, "read queues (overrides --queues)")
	update.Flags().Int32Var(&writeQ, "write-queues", 0, "write queues (overrides --queues)")
	update.Flags().StringVar(&ugroup, "group", "", "broker group (default: every group hosting the topic)")
	update.Flags().StringVar(&uperm, "perm", "rw", "permissions: rw, r or w")

	var dname, dgroup string
	del := &cobra.Command{
		Use:   "delete",
		Short: "delete a topic from the groups hosting it",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withCluster(cmd.Context(), ns, func(a *admin, info *pb.ClusterInfoResponse) (err error) {
				hosts, err := a.hostingNow(cmd.Context(), info, dname, dgroup)
				if err != nil {
					return err
				}
				for _, h := range hosts {
					g := h.group
					err := a.onMaster(cmd.Context(), g, func(ctx context.Context, b pb.BrokerClient) error {
						_, err := b.DeleteTopic(ctx, &pb.DeleteTopicRequest{Name: dname})
						return err
					})
					if err != nil {
						return fmt.Errorf("delete topic %s on %s: %w", dname, g.Group, err)
					}
					fmt.Printf("deleted topic %s on %s\n", dname, g.Group)
				}
				return nil
			})
		},
	}
	del.Flags().StringVar(&dname, "name", "", "topic name")
	del.Flags().StringVar(&dgroup, "group", "", "broker group (default: every group hosting the topic)")

	list := &cobra.Command{
		Use:   "list",
		Short: "list the topics of the cluster, one per line",
		RunE: func(cmd *cobra.Command, _ []string) error {
			a, err := newAdmin(ns)
			if err != nil {
				return err
			}
			defer a.close()
			return a.nameServer(cmd.Context(), func(ctx context.Context, c pb.NameServerClient) error {
				r, err := c.ListTopics(ctx, &pb.ListTopicsRequest{})
				if err == nil {
					for _, t := range r.Topics {
						fmt.Println(t)
					}
				}
				return err
			})
		},
	}

	var rname string
	route := &cobra.Command{
		Use:   "route",
		Short: "show the groups hosting a topic, with their master and slaves",
		RunE: func(cmd *cobra.Command, _ []string) error {
			a, err := newAdmin(ns)
			if err != nil {
				return err
			}
			defer a.close()
			var r *pb.RouteResponse
			err = a.nameServer(cmd.Context(), func(ctx context.Context, c pb.NameServerClient) (err error) {
				r, err = c.GetRoute(ctx, &pb.GetRouteRequest{Topic: rname})
				return err
			})
			if err != nil {
				return err
			}
			printRoute(r)
			return nil
		},
	}
	route.Flags().StringVar(&rname, "name", "", "topic name")
	cmd.AddCommand(create, update, del, list, route)
	return cmd
}

// printRoute writes a topic's route:
//
//	topic T
//	group broker-a queues 4/4 perm rw term 2
//	  master 1 127.0.0.1:10911
//	  slave  2 127.0.0.1:10921
func printRoute(r *pb.RouteResponse) {
	fmt.Printf("topic %s\n", r.Topic)
	for _, g := range r.Groups {
		fmt.Printf("group %s queues %d/%d perm %s term %d\n", g.Group, g.ReadQueues, g.WriteQueues, permString(g.Perm), g.Term)
		for _, rep := range g.Replicas {
			role := "slave "
			if rep.Master {
				role = "master"
			}
			fmt.Printf("  %s %d %s\n", role, rep.Id, rep.GrpcAddress)
		}
	}
}

func createTopic(ctx context.Context, ns, name, group, perm string, queues int32) error {
	if name == "" {
		return errors.New("--name is required")
	}
	p, err := parsePerm(perm)
	if err != nil {
		return err
	}
	if queues < 1 {
		return errors.New("queue counts must be at least 1")
	}
	return withCluster(ctx, ns, func(a *admin, info *pb.ClusterInfoResponse) error {
		groups, err := targetGroups(info, group)
		if err != nil {
			return err
		}
		for _, g := range groups {
			err := a.onMaster(ctx, g, func(ctx context.Context, b pb.BrokerClient) error {
				_, err := b.CreateTopic(ctx, &pb.CreateTopicRequest{Topic: &pb.TopicConfig{Name: name, ReadQueues: queues, WriteQueues: queues, Perm: p}})
				return err
			})
			if err != nil {
				return fmt.Errorf("create topic %s on %s: %w", name, g.Group, err)
			}
			fmt.Printf("created topic %s on %s: %d read / %d write queues, perm %s\n", name, g.Group, queues, queues, permString(p))
		}
		return nil
	})
}

// topicChange is what `topic update` was given; nil fields stay.
type topicChange struct {
	perm, readQ, writeQ *int32
}

// updateTopic applies change to topic name on each group hosting it (or
// on group), starting from what each group's master holds.
func updateTopic(ctx context.Context, ns, name, group string, change topicChange) error {
	if name == "" {
		return errors.New("--name is required")
	}
	return withCluster(ctx, ns, func(a *admin, info *pb.ClusterInfoResponse) error {
		hosts, err := a.hostingNow(ctx, info, name, group)
		if err != nil {
			return err
		}
		for _, h := range hosts {
			g, cur := h.group, h.topic
			next := &pb.TopicConfig{Name: name, ReadQueues: cur.ReadQueues, WriteQueues: cur.WriteQueues, Perm: cur.Perm}
			if change.perm != nil {
				next.Perm = *change.perm
			}
			if change.readQ != nil {
				next.ReadQueues = *change.readQ
			}
			if change.writeQ != nil {
				next.WriteQueues = *change.writeQ
			}
			err = a.onMaster(ctx, g, func(ctx context.Context, b pb.BrokerClient) error {
				_, err := b.CreateTopic(ctx, &pb.CreateTopicRequest{Update: true, Topic: next})
				return err
			})
			if err != nil {
				return fmt.Errorf("update topic %s on %s: %w", name, g.Group, err)
			}
			fmt.Printf("updated topic %s on %s: %d read / %d write queues, perm %s\n", name, g.Group, next.ReadQueues, next.WriteQueues, permString(next.Perm))
		}
		return nil
	})
}

// topicHost is a group hosting a topic, with the topic as its master
// holds it.
type topicHost struct {
	group *pb.ClusterGroup
	topic *pb.TopicConfig
}

// hostingNow asks the master of each group (or of group) whether it holds
// topic name: the masters know a topic created a moment ago, the name
// servers only at their next refresh.
func (a *admin) hostingNow(ctx context.Context, info *pb.ClusterInfoResponse, name, group string) ([]topicHost, error) {
	groups, err := targetGroups(info, group)
	if err != nil {
		return nil, err
	}
	var out []topicHost
	for _, g := range groups {
		var cur *pb.TopicConfig
		err := a.onMaster(ctx, g, func(ctx context.Context, b pb.BrokerClient) error {
			resp, err := b.ListTopics(ctx, &pb.ListTopicsRequest{})
			if err != nil {
				return err
			}
			for _, t := range resp.Topics {
				if t.Name == name {
					cur = t
				}
			}
			return nil
		})
		switch {
		case err != nil:
			return nil, fmt.Errorf("topics of %s: %w", g.Group, err)
		case cur == nil && group != "":
			return nil, fmt.Errorf("topic %q is not on group %s", name, group)
		case cur != nil:
			out = append(out, topicHost{g, cur})
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("topic %q is on no broker group", name)
	}
	return out, nil
}

func clusterCommand() *cobra.Command {
	var ns string
	cmd := &cobra.Command{Use: "cluster", Short: "show the cluster"}
	namesrvFlag(cmd, &ns)
	list := &cobra.Command{
		Use:   "list",
		Short: "list broker groups and replicas: role, addresses, Raft term and applied index",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withCluster(cmd.Context(), ns, func(a *admin, info *pb.ClusterInfoResponse) error {
				return printCluster(cmd.Context(), a, info)
			})
		},
	}
	cmd.AddCommand(list, clusterCheckCommand(&ns))
	return cmd
}

// printCluster writes the cluster list table, asking each replica for its
// Raft state. RAFT_LOG, last so that scripts reading the columns before it
// read on, is where the replica keeps its Raft log (wal or commitlog; "-"
// when it does not answer, or from before it said).
func printCluster(ctx context.Context, a *admin, info *pb.ClusterInfoResponse) error {
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "GROUP\tREPLICA\tROLE\tGRPC\tRAFT\tTERM\tAPPLIED\tRAFT_LOG")
	for _, g := range info.Groups {
		for _, r := range g.Replicas {
			role, raftAddr, term, applied, raftLog := "slave", "-", "-", "-", "-"
			if r.Master {
				role = "master"
			}
			if b, err := a.broker(r.GrpcAddress); err == nil {
				dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				d, err := b.DescribeBroker(dctx, &pb.DescribeBrokerRequest{})
				cancel()
				if err == nil {
					term, applied = fmt.Sprint(d.Term), fmt.Sprint(d.AppliedIndex)
					if d.RaftLog != pb.RaftLogPlace_RAFT_LOG_UNDECLARED {
						raftLog = broker.RaftLogFlag(d.RaftLog)
					}
					for _, rep := range d.Replicas {
						if rep.Id == r.Id {
							raftAddr = rep.RaftAddress
						}
					}
				}
			}
			fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", g.Group, r.Id, role, r.GrpcAddress, raftAddr, term, applied, raftLog)
		}
	}
	return w.Flush()
}
