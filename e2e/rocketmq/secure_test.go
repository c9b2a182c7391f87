package rocketmq

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
)

const securePolicy = `
users:
  root:
    admin: true
    accessKeys: [{accessKey: root-key, secretKey: root-secret-0123456789}]
  app:
    publish: [orders]
    subscribe: [orders, audit]
    groups: [app-consumers]
    accessKeys: [{accessKey: app-key, secretKey: app-secret-0123456789}]
`

// On a cluster with TLS and access control, RocketMQ's official client
// works with UseTls and its access key (RocketMQ's ACL signature), on the
// addresses raftmq's own clients use, and gets the key's user's rights:
// it sends to and consumes its topic. Without a key, or with a wrong
// secret, the name server gives it no route; to a topic its user may read
// but not publish to, the broker refuses the send (16, no permission).
func TestOfficialClientWithTLSAndAccessKeys(t *testing.T) {
	dir := t.TempDir()
	certs := filepath.Join(dir, "certs")
	raftmq(t, "certs", "--dir", certs, "--brokers", "broker-a:3", "--namesrvs", "1")
	policy := filepath.Join(dir, "acl.yaml")
	secret := filepath.Join(dir, "root.secret")
	if err := os.WriteFile(policy, []byte(securePolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(secret, []byte("root-secret-0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	cli := []string{"--tls-ca", filepath.Join(certs, "ca.pem"), "--access-key", "root-key", "--secret-key-file", secret}
	c := startSecuredProcCluster(t, certs, policy, cli)
	for _, topic := range []string{"orders", "audit"} {
		raftmq(t, append([]string{"topic", "create", "--namesrv", c.ns, "--name", topic, "--queues", "2"}, cli...)...)
		waitUntil(t, 10*time.Second, "the route of "+topic, func() bool {
			_, err := raftmqOut(append([]string{"topic", "route", "--namesrv", c.ns, "--name", topic}, cli...)...)
			return err == nil
		})
	}
	// The client's WithTls sets a default that every client of the
	// process shares (its RemotingClientConfig is a pointer to the
	// package's default): set it back for the tests after this one.
	t.Cleanup(func() { producer.NewDefaultProducer(producer.WithTls(false)) })
	app := primitive.Credentials{AccessKey: "app-key", SecretKey: "app-secret-0123456789"}
	p := startProducer(t, c.ns, producer.WithTls(true), producer.WithCredentials(app), producer.WithInstanceName("app"))
	sent := sendSync(t, p, primitive.NewMessage("orders", []byte("over TLS, signed")))

	d := newDeliveries()
	startConsumer(t, c.ns, "app-consumers", "orders", d.listener("app"), consumer.WithTls(true), consumer.WithCredentials(app))
	waitUntil(t, 30*time.Second, "the signed consumer reading over TLS", func() bool { return d.all([]string{"over TLS, signed"}) })

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for name, opts := range map[string][]producer.Option{
		"no key":         {producer.WithTls(true), producer.WithInstanceName("anonymous")},
		"a wrong secret": {producer.WithTls(true), producer.WithCredentials(primitive.Credentials{AccessKey: "app-key", SecretKey: "wrong-secret-0123456789"}), producer.WithInstanceName("wrong")},
	} {
		q := startProducer(t, c.ns, append(opts, producer.WithRetry(0))...)
		if r, err := q.SendSync(ctx, primitive.NewMessage("orders", []byte(name))); err == nil || !strings.Contains(err.Error(), "route info not found") {
			t.Errorf("%s: sent %v, %v; want no route", name, r, err)
		}
	}
	if r, err := p.SendSync(ctx, primitive.NewMessage("audit", []byte("not app's"))); err == nil || !strings.Contains(err.Error(), "CODE: 16") {
		t.Errorf("app's send to a topic it may only read: %v, %v; want refused with 16", r, err)
	}
	t.Logf("sent %s over TLS with app's key", sent[0].MsgID)
}
