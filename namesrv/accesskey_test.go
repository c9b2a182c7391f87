package namesrv

import (
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/clustertest"
)

// For every NameServer method, the admin RPCs (the cluster's make-up,
// its topics) among them: wrong, stale, replayed and over-permission
// signed requests are refused (clustertest.CheckSignedRequests).
func TestSignedRequestsRefusedWhenWrongReplayedOrStale(t *testing.T) {
	ns := startSecuredNameServer(t, `
users:
  root: {admin: true, accessKeys: [{accessKey: root-key, secretKey: root-secret-0123456789}]}
  app: {publish: [orders], accessKeys: [{accessKey: app-key, secretKey: app-secret-0123456789}]}
`)
	defer ns.Close()
	conn, err := grpc.NewClient(ns.Addr(), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	state := func() string {
		ns.table.mu.Lock()
		defer ns.table.mu.Unlock()
		return fmt.Sprintf("%d members, %d topic tables", len(ns.table.members), len(ns.table.tables))
	}
	clustertest.WaitFor(t, 5*time.Second, "the name server in its own pool", func() bool { return state() == "1 members, 0 topic tables" })
	clustertest.CheckSignedRequests(t, conn, "NameServer", "raftmq://raftmq/namesrv/1",
		clustertest.AccessKey{ID: "root-key", Secret: "root-secret-0123456789"}, clustertest.AccessKey{ID: "app-key", Secret: "app-secret-0123456789"}, state)
}

// startSecuredNameServer starts name server 1 with TLS, a gossip key and
// the access control policy policy.
func startSecuredNameServer(t *testing.T, policy string) *Server {
	t.Helper()
	sec := newSecurity(t)
	path := filepath.Join(t.TempDir(), "acl.yaml")
	if err := os.WriteFile(path, []byte(policy), 0o600); err != nil {
		t.Fatal(err)
	}
	self := cluster.Identity{Cluster: "raftmq", Role: cluster.IdentityNameServer, ID: "1"}
	acl, err := cluster.LoadACL(path, self, time.Second, quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(acl.Close)
	addrs := clustertest.FreeAddrs(t, 2)
	return startNameServer(t, Config{Name: "ns-1", GRPCAddr: addrs[0], GossipAddr: addrs[1], FastGossip: true, Logger: quiet,
		TLS: sec.load(self), SecretKey: sec.gossipKey, ACL: acl})
}
