package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/raftmq/raftmq/client"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/cluster/pb"
)

// Drill 8: the kill -9 drill on a secured cluster (TLS on every listener,
// mutual TLS between the replicas, encrypted gossip, clients over TLS):
// the same guarantees as on plaintext.
func TestDrillSecuredMasterKilled(t *testing.T) {
	c := newSecureProcCluster(t)
	runDrill(t, "secured, master kill x2", c, func() { c.killMaster(2) })
}

// A plaintext client gets a clear, immediate error from a secured
// cluster, never an answer or a hang; the CLI with the CA works, and
// without it fails with a non-zero exit.
func TestSecuredClusterRefusesPlaintextClients(t *testing.T) {
	c := newSecureProcCluster(t)
	c.createTopic(t, "sec", 2)

	conn, err := grpc.NewClient(c.grpc[c.master()], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	_, err = pb.NewBrokerClient(conn).SendMessage(ctx, &pb.SendMessageRequest{Topic: "sec", Messages: []*pb.Message{{Body: []byte("x")}}})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("a plaintext send to a TLS broker: %v, want Unavailable", err)
	}
	if ctx.Err() != nil {
		t.Fatalf("a plaintext send waited %v for its deadline instead of failing", time.Since(start))
	}

	p, err := client.NewProducer(client.WithNameServers(c.nameServers()...), client.WithSendTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Send(context.Background(), &client.Message{Topic: "sec", Body: []byte("x")}); err == nil {
		t.Fatal("a producer without TLS sent to a secured cluster")
	}
	p.Shutdown()

	ca := filepath.Join(c.certs, "ca.pem")
	as := func(user string) []string {
		return []string{"--namesrv", c.nsGRPC, "--tls-ca", ca, "--tls-cert", filepath.Join(c.certs, "user-"+user, "cert.pem"),
			"--tls-key", filepath.Join(c.certs, "user-"+user, "key.pem")}
	}
	// The name server fetches the group's topic table over mutual TLS,
	// from the replica its gossip names. (Until it has, only an admin's
	// sends would find the group: the SDK's fallback for an unknown topic
	// asks for the cluster's make-up, an admin RPC.)
	clustertest.WaitFor(t, 10*time.Second, "the topic's route over TLS", func() bool {
		out, err := exec.Command(binPath, append([]string{"topic", "route", "--name", "sec"}, as("e2e")...)...).CombinedOutput()
		return err == nil && strings.Contains(string(out), "master")
	})
	out, err := exec.Command(binPath, append([]string{"produce", "--topic", "sec", "--count", "3"}, as("app")...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("produce over TLS as app: %v\n%s", err, out)
	}
	// Access control: app may produce to sec, not create topics; with no
	// client certificate nothing at all.
	if out, err := exec.Command(binPath, append([]string{"topic", "create", "--name", "evil", "--queues", "1"}, as("app")...)...).CombinedOutput(); err == nil {
		t.Fatalf("app created a topic:\n%s", out)
	}
	if out, err := exec.Command(binPath, "produce", "--namesrv", c.nsGRPC, "--tls-ca", ca, "--topic", "sec", "--count", "1").CombinedOutput(); err == nil {
		t.Fatalf("a client without a certificate produced:\n%s", out)
	}
	if out, err := exec.Command(binPath, "topic", "route", "--namesrv", c.nsGRPC, "--name", "sec").CombinedOutput(); err == nil {
		t.Fatalf("topic route without TLS succeeded:\n%s", out)
	}

	// Access keys instead of a certificate: the secret from the
	// environment or a file, app's rights, and nothing with a wrong one.
	withKey := func(secret string, args ...string) *exec.Cmd {
		cmd := exec.Command(binPath, append(args, "--namesrv", c.nsGRPC, "--tls-ca", ca, "--access-key", "app-key")...)
		cmd.Env = append(os.Environ(), "RAFTMQ_SECRET_KEY="+secret)
		return cmd
	}
	if out, err := withKey(appSecret, "produce", "--topic", "sec", "--count", "2", "--body", "by-key").CombinedOutput(); err != nil {
		t.Fatalf("produce signed with app's access key: %v\n%s", err, out)
	}
	secretFile := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secretFile, []byte(appSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err = withKey("", "consume", "--topic", "sec", "--group", "sec", "--count", "5", "--timeout", "20s", "--secret-key-file", secretFile).CombinedOutput()
	if err != nil || strings.Count(string(out), "by-key") != 2 {
		t.Fatalf("consume signed with app's access key (its secret from a file): %v\n%s", err, out)
	}
	if out, err := withKey(appSecret, "topic", "create", "--name", "evil", "--queues", "1").CombinedOutput(); err == nil || !strings.Contains(string(out), "admin right") {
		t.Fatalf("app's access key creating a topic: %v\n%s", err, out)
	}
	if out, err := withKey("not-the-secret-0123456789", "produce", "--topic", "sec", "--count", "1").CombinedOutput(); err == nil || !strings.Contains(string(out), "signature does not match") {
		t.Fatalf("a wrong secret: %v\n%s", err, out)
	}
}
