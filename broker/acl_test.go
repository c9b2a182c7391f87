package broker

import (
	"context"
	"crypto/tls"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/pb"
)

// Every method of the Broker service has an access rule: a method added
// without one would be refused to everyone but would also be a gap in
// review; this holds the table to the service.
func TestEveryBrokerMethodHasAnAccessRule(t *testing.T) {
	if err := cluster.CheckAccessTable(&pb.Broker_ServiceDesc, brokerAccess); err != nil {
		t.Fatal(err)
	}
}

const aclPolicy = `
users:
  root:
    admin: true
    accessKeys: [{accessKey: root-key, secretKey: root-secret-0123456789}]
  app:
    publish: [orders]
    subscribe: [orders]
    groups: [g1]
    accessKeys: [{accessKey: app-key, secretKey: app-secret-0123456789}]
`

// aclGroup is a one-replica group on TLS with access control, and a way to
// dial it as any identity of its CA.
type aclGroup struct {
	*group
	ca *cluster.CA
}

func newACLGroup(t *testing.T) *aclGroup {
	ca, err := cluster.NewCA("raftmq", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	policy := filepath.Join(t.TempDir(), "acl.yaml")
	if err := os.WriteFile(policy, []byte(aclPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	acl, err := cluster.LoadACL(policy, cluster.Identity{Cluster: "raftmq", Role: cluster.IdentityBroker, Group: "broker-a", ID: "1"}, time.Second, quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(acl.Close)
	g := newGroup(t, 1, func(c *Config) {
		f, err := ca.IssueFiles(t.TempDir(), cluster.Identity{Cluster: "raftmq", Role: cluster.IdentityBroker, Group: "broker-a", ID: "1"}, []string{"127.0.0.1"}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if c.TLS, err = cluster.LoadTLS(f); err != nil {
			t.Fatal(err)
		}
		c.ACL = acl
	})
	return &aclGroup{group: g, ca: ca}
}

// as dials the replica as id (a zero id: with no client certificate).
func (g *aclGroup) as(id cluster.Identity) pb.BrokerClient {
	t := g.t
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true}
	if id != (cluster.Identity{}) {
		f, err := g.ca.IssueFiles(t.TempDir(), id, nil, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		tl, err := cluster.LoadTLS(f)
		if err != nil {
			t.Fatal(err)
		}
		cfg = tl.ClientConfig(cluster.Want{Cluster: "raftmq", Role: cluster.IdentityBroker})
	}
	conn, err := grpc.NewClient(g.cfgs[0].GRPCAddr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewBrokerClient(conn)
}

// createTopics creates topics of queues queues each as admin.
func createTopics(ctx context.Context, t *testing.T, admin pb.BrokerClient, queues int32, names ...string) {
	t.Helper()
	for _, name := range names {
		if _, err := admin.CreateTopic(ctx, &pb.CreateTopicRequest{Topic: &pb.TopicConfig{Name: name, ReadQueues: queues, WriteQueues: queues}}); err != nil {
			t.Fatalf("the admin creating %s: %v", name, err)
		}
	}
}

func userID(name string) cluster.Identity {
	return cluster.Identity{Cluster: "raftmq", Role: cluster.IdentityUser, ID: name}
}

// The admin RPCs and everything a user has no right to are refused to an
// outsider without a certificate, to a user not in the policy and to a
// user without the right, and change nothing; the admin and a user with
// the right are served.
func TestAccessControlRefusesWhatTheCallerMayNotDo(t *testing.T) {
	g := newACLGroup(t)
	waitFor(t, 10*time.Second, g.brokers[0].IsMaster)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	root := g.as(userID("root"))
	createTopics(ctx, t, root, 2, "orders", "payments")
	app := g.as(userID("app"))
	sent, err := app.SendMessage(ctx, &pb.SendMessageRequest{Topic: "orders", Messages: []*pb.Message{{Body: []byte("ok")}}})
	if err != nil {
		t.Fatalf("the app publishing where it may: %v", err)
	}
	if _, err := app.UpdateConsumerOffset(ctx, &pb.UpdateConsumerOffsetRequest{ConsumerGroup: "g1", Offsets: []*pb.QueueOffset{{Topic: "orders", Offset: 1}}}); err != nil {
		t.Fatalf("the app committing its group's offset: %v", err)
	}
	describe := func() *pb.DescribeBrokerResponse {
		d, err := root.DescribeBroker(ctx, &pb.DescribeBrokerRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	before := describe()

	calls := map[string]func(c pb.BrokerClient) error{
		"CreateTopic": func(c pb.BrokerClient) error {
			_, err := c.CreateTopic(ctx, &pb.CreateTopicRequest{Topic: &pb.TopicConfig{Name: "evil", ReadQueues: 1, WriteQueues: 1}})
			return err
		},
		"DeleteTopic": func(c pb.BrokerClient) error {
			_, err := c.DeleteTopic(ctx, &pb.DeleteTopicRequest{Name: "orders"})
			return err
		},
		"UpsertSubscriptionGroup": func(c pb.BrokerClient) error {
			_, err := c.UpsertSubscriptionGroup(ctx, &pb.UpsertSubscriptionGroupRequest{Group: &pb.SubscriptionGroupConfig{Name: "g1"}})
			return err
		},
		"ListTopics": func(c pb.BrokerClient) error { _, err := c.ListTopics(ctx, &pb.ListTopicsRequest{}); return err },
		"QueryMessageById": func(c pb.BrokerClient) error {
			_, err := c.QueryMessageById(ctx, &pb.QueryMessageByIdRequest{MsgId: sent.Results[0].MsgId})
			return err
		},
		"QueryMessageByKey": func(c pb.BrokerClient) error {
			_, err := c.QueryMessageByKey(ctx, &pb.QueryMessageByKeyRequest{Topic: "orders", Key: "ok", Max: 1})
			return err
		},
		"CopyCommitlog": func(c pb.BrokerClient) error {
			s, err := c.CopyCommitlog(ctx, &pb.CopyCommitlogRequest{})
			if err != nil {
				return err
			}
			_, err = s.Recv()
			return err
		},
		"ChecksumCommitlog": func(c pb.BrokerClient) error {
			_, err := c.ChecksumCommitlog(ctx, &pb.ChecksumCommitlogRequest{})
			return err
		},
		"publish elsewhere": func(c pb.BrokerClient) error {
			_, err := c.SendMessage(ctx, &pb.SendMessageRequest{Topic: "payments", Messages: []*pb.Message{{Body: []byte("x")}}})
			return err
		},
		"read its group's dead letters": func(c pb.BrokerClient) error {
			_, err := c.PullMessage(ctx, &pb.PullMessageRequest{ConsumerGroup: "g1", Topic: "%DLQ%g1", DeadLetters: true})
			return err
		},
		"pull as another group": func(c pb.BrokerClient) error {
			_, err := c.PullMessage(ctx, &pb.PullMessageRequest{ConsumerGroup: "g2", Topic: "orders"})
			return err
		},
		"rewind another group's offset": func(c pb.BrokerClient) error {
			_, err := c.UpdateConsumerOffset(ctx, &pb.UpdateConsumerOffsetRequest{ConsumerGroup: "g2", Offsets: []*pb.QueueOffset{{Topic: "orders", Offset: 0}}})
			return err
		},
		"send another group's message back": func(c pb.BrokerClient) error {
			_, err := c.ConsumerSendBack(ctx, &pb.ConsumerSendBackRequest{ConsumerGroup: "g2", MsgId: sent.Results[0].MsgId})
			return err
		},
	}
	callers := map[string]struct {
		c    pb.BrokerClient
		code codes.Code
	}{
		"no certificate":   {g.as(cluster.Identity{}), codes.Unauthenticated},
		"a user not known": {g.as(userID("mallory")), codes.PermissionDenied},
		"the app":          {app, codes.PermissionDenied},
		"a name server":    {g.as(cluster.Identity{Cluster: "raftmq", Role: cluster.IdentityNameServer, ID: "1"}), codes.PermissionDenied},
	}
	for who, caller := range callers {
		for what, call := range calls {
			if who == "a name server" && (what == "ChecksumCommitlog") {
				continue // a node's right
			}
			if err := call(caller.c); status.Code(err) != caller.code {
				t.Errorf("%s, %s: %v, want %v", who, what, err, caller.code)
			}
		}
	}
	// What the refused calls would have changed: messages, topics,
	// subscription groups, offsets (below). (Not Raft's applied index:
	// hashicorp/raft records an entry applied a moment after its Apply
	// returns, so it can move on its own right after; seen under -race.)
	after := describe()
	if after.CommitlogMaxOffset != before.CommitlogMaxOffset || len(after.Topics) != 2 || len(g.brokers[0].meta.groupList()) != 0 {
		t.Fatalf("refused calls changed the replica: commitlog %d -> %d, topics %d, subscription groups %d",
			before.CommitlogMaxOffset, after.CommitlogMaxOffset, len(after.Topics), len(g.brokers[0].meta.groupList()))
	}
	if off := g.brokers[0].meta.offset("g2", "orders", 0); off != -1 {
		t.Fatalf("group g2's offset is %d after refused commits", off)
	}
	// The node rights: a replica of the group copies the commitlog.
	peer := g.as(cluster.Identity{Cluster: "raftmq", Role: cluster.IdentityBroker, Group: "broker-a", ID: "2"})
	s, err := peer.CopyCommitlog(ctx, &pb.CopyCommitlogRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != nil {
		t.Fatalf("a replica of the group copying the commitlog: %v", err)
	}
}
