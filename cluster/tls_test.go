package cluster

import (
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// testCA is a cluster CA for tests and a writer of the files LoadTLS reads.
type testCA struct {
	t   testing.TB
	ca  *CA
	dir string
}

func newTestCA(t testing.TB, cluster string) *testCA {
	t.Helper()
	ca, err := NewCA(cluster, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{t: t, ca: ca, dir: t.TempDir()}
}

// files issues a certificate for id and writes it, its key and the CA.
func (c *testCA) files(id Identity) TLSFiles {
	c.t.Helper()
	d, err := os.MkdirTemp(c.dir, "id")
	if err != nil {
		c.t.Fatal(err)
	}
	f, err := c.ca.IssueFiles(d, id, []string{"127.0.0.1"}, time.Hour)
	if err != nil {
		c.t.Fatal(err)
	}
	return f
}

func (c *testCA) load(id Identity) *TLS {
	c.t.Helper()
	t, err := LoadTLS(c.files(id))
	if err != nil {
		c.t.Fatal(err)
	}
	return t
}

func replica(cluster, group, id string) Identity {
	return Identity{Cluster: cluster, Role: IdentityBroker, Group: group, ID: id}
}

func TestIdentityURIsRoundTrip(t *testing.T) {
	for _, id := range []Identity{
		replica("c1", "broker-a", "3"),
		{Cluster: "c1", Role: IdentityNameServer, ID: "ns-1"},
		{Cluster: "c1", Role: IdentityUser, ID: "alice"},
	} {
		got, ok := parseIdentity(id.URI())
		if !ok || got != id {
			t.Fatalf("%v parses back to %+v, %v", id, got, ok)
		}
	}
	for _, bad := range []string{
		"https://c1/broker/a/1", "raftmq:///broker/a/1", "raftmq://c1/broker/a", "raftmq://c1/broker/a/1/x",
		"raftmq://c1/broker//1", "raftmq://c1/admin/x", "raftmq://c1/user/alice?admin=1", "raftmq://u@c1/user/alice",
		"raftmq://c1/user/alice#x", "raftmq://c1/namesrv/",
	} {
		u, err := url.Parse(bad)
		if err != nil {
			t.Fatal(err)
		}
		if id, ok := parseIdentity(u); ok {
			t.Fatalf("%s parsed as %+v", bad, id)
		}
	}
}

// A link accepts exactly the identities it wants, from this CA, and says
// which it saw when it refuses.
func TestTLSAcceptsOnlyTheWantedIdentity(t *testing.T) {
	ca := newTestCA(t, "c1")
	server := ca.load(replica("c1", "broker-a", "1"))
	want := Want{Cluster: "c1", Role: IdentityBroker, Group: "broker-a"}
	other := newTestCA(t, "c1") // same names, another CA
	for _, tc := range []struct {
		name   string
		client *tls.Config
		ok     bool
	}{
		{"a replica of the group", ca.load(replica("c1", "broker-a", "2")).ClientConfig(want), true},
		{"a replica of another group", ca.load(replica("c1", "broker-b", "2")).ClientConfig(want), false},
		{"a replica of another cluster", ca.load(replica("c2", "broker-a", "2")).ClientConfig(want), false},
		{"a name server", ca.load(Identity{Cluster: "c1", Role: IdentityNameServer, ID: "1"}).ClientConfig(want), false},
		{"a user", ca.load(Identity{Cluster: "c1", Role: IdentityUser, ID: "alice"}).ClientConfig(want), false},
		{"another CA's replica of the group", other.load(replica("c1", "broker-a", "2")).ClientConfig(), false},
		{"no certificate", &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			serverErr, _ := handshake(t, server.ServerConfig(want), clientSkippingServerCheck(tc.client))
			if (serverErr == nil) != tc.ok {
				t.Fatalf("server side: %v, want accepted %v", serverErr, tc.ok)
			}
		})
	}
	// The dialer checks the server the same way.
	if _, err := handshake(t, ca.load(replica("c1", "broker-b", "1")).ServerConfig(), ca.load(replica("c1", "broker-a", "2")).ClientConfig(want)); !errors.Is(err, ErrPeerIdentity) {
		t.Fatalf("a server of another group: %v, want ErrPeerIdentity", err)
	}
}

// clientSkippingServerCheck keeps c's certificate but trusts any server,
// so that a test sees the server's verdict on the client.
func clientSkippingServerCheck(c *tls.Config) *tls.Config {
	c = c.Clone()
	c.InsecureSkipVerify, c.VerifyConnection = true, nil
	return c
}

// handshake runs a TLS handshake over a real loopback connection and
// returns the server's and the client's errors.
func handshake(t *testing.T, server, client *tls.Config) (serverErr, clientErr error) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	serverDone := make(chan error, 1)
	go func() {
		c, err := lis.Accept()
		if err != nil {
			serverDone <- err
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		tc := tls.Server(c, server)
		err = tc.Handshake()
		if err == nil {
			// TLS 1.3 servers verify the client's certificate after
			// sending their Finished; reading makes that outcome final.
			_, err = tc.Read(make([]byte, 1))
		}
		serverDone <- err
	}()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", lis.Addr().String(), client)
	if err == nil {
		c.SetDeadline(time.Now().Add(5 * time.Second))
		_, clientErr = c.Write([]byte{1})
		c.Close()
	} else {
		clientErr = err
	}
	return <-serverDone, clientErr
}

func TestLoadTLSRefusesWhatIsNotANodesMaterial(t *testing.T) {
	ca := newTestCA(t, "c1")
	good := ca.files(replica("c1", "broker-a", "1"))
	other := newTestCA(t, "c1").files(replica("c1", "broker-a", "1"))
	for name, f := range map[string]TLSFiles{
		"no CA":              {Cert: good.Cert, Key: good.Key},
		"CA of another":      {CA: other.CA, Cert: good.Cert, Key: good.Key},
		"key of another":     {CA: good.CA, Cert: good.Cert, Key: other.Key},
		"missing file":       {CA: good.CA, Cert: good.Cert + ".missing", Key: good.Key},
		"CA file no cert":    {CA: good.Key, Cert: good.Cert, Key: good.Key},
		"certificate as key": {CA: good.CA, Cert: good.Cert, Key: good.Cert},
	} {
		if _, err := LoadTLS(f); err == nil {
			t.Errorf("%s: loaded", name)
		}
	}
	if _, err := LoadTLS(good); err != nil {
		t.Fatal(err)
	}
}

// With the node's TLS the ops endpoint speaks HTTPS only: a plain GET gets
// no metrics, a client trusting the CA gets them.
func TestOpsEndpointOverTLS(t *testing.T) {
	ca := newTestCA(t, "c1")
	node := ca.load(replica("c1", "broker-a", "1"))
	ops, err := ServeOps("127.0.0.1:0", prometheus.NewRegistry(), func() error { return nil }, false, node.ServerConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer ops.Close()
	plain := &http.Client{Timeout: 5 * time.Second}
	if resp, err := plain.Get("http://" + ops.Addr() + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatal("plain HTTP got a health answer")
		}
	}
	user := ca.load(Identity{Cluster: "c1", Role: IdentityUser, ID: "prometheus"})
	secure := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: user.ClientConfig(Want{Cluster: "c1", Role: IdentityBroker})}}
	resp, err := secure.Get("https://" + ops.Addr() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("HTTPS health: %s", resp.Status)
	}
}
