package namesrv

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"net"
	"testing"
	"time"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/cluster/pb"
	"github.com/raftmq/raftmq/remoting"
)

// RocketMQ's route query (code 105) on the gRPC port: the route in
// RocketMQ's JSON, the master at broker id 0 and the slaves at their
// replica ids; an unknown topic is code 17. (The official client's own
// test is e2e/rocketmq.)
func TestRemotingRouteQueryOnTheGRPCPort(t *testing.T) {
	e := newEnv(t, 1)
	m := e.master()
	bc := pb.NewBrokerClient(dial(t, e.bCfgs[m].GRPCAddr))
	if _, err := bc.CreateTopic(context.Background(), &pb.CreateTopicRequest{Topic: &pb.TopicConfig{Name: "rq", ReadQueues: 2, WriteQueues: 3}}); err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", e.ns[0].Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r := bufio.NewReader(conn)
	ask := func(opaque int32, topic string) *remoting.Command {
		frame, _ := (&remoting.Command{Code: remoting.CodeGetRouteInfo, Language: "GO", Version: 317, Opaque: opaque, ExtFields: map[string]string{"topic": topic}}).Encode(nil)
		if _, err := conn.Write(frame); err != nil {
			t.Fatal(err)
		}
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := remoting.ReadCommand(r, remoting.DefaultMaxFrame)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	var route struct {
		QueueDatas []struct {
			BrokerName                    string
			ReadQueueNums, WriteQueueNums int32
			Perm                          int32
		}
		BrokerDatas []struct {
			BrokerName  string
			BrokerAddrs map[string]string
		}
	}
	n := int32(0)
	clustertest.WaitFor(t, 5*time.Second, "the route of rq over remoting", func() bool {
		n++
		resp := ask(n, "rq")
		route.QueueDatas, route.BrokerDatas = nil, nil // decoded afresh: Unmarshal would merge into the old maps
		return resp.Code == remoting.CodeSuccess && json.Unmarshal(resp.Body, &route) == nil && len(route.BrokerDatas) == 1 &&
			len(route.BrokerDatas[0].BrokerAddrs) == 3 && route.BrokerDatas[0].BrokerAddrs["0"] != "" // the master known too
	})
	q, b := route.QueueDatas[0], route.BrokerDatas[0]
	if q.BrokerName != "broker-a" || q.ReadQueueNums != 2 || q.WriteQueueNums != 3 || q.Perm != 6 || b.BrokerAddrs["0"] != e.bCfgs[m].GRPCAddr {
		t.Fatalf("route %+v, master %s", route, e.bCfgs[m].GRPCAddr)
	}
	if resp := ask(n+1, "no-such-topic"); resp.Code != remoting.CodeTopicNotExist || resp.Opaque != n+1 {
		t.Fatalf("an unknown topic: %+v", resp)
	}
}

// Under TLS and access control, RocketMQ's route query comes over TLS
// (the client's UseTls) on the gRPC port and is checked as GetRoute is:
// unsigned, signed with a wrong secret, or for a topic the user may
// neither publish nor subscribe to, it is answered 16 (no permission); a
// user's own topic is looked up (17 here: no broker hosts it).
func TestRemotingRouteQueryUnderAccessControl(t *testing.T) {
	ns := startSecuredNameServer(t, "users:\n  app: {publish: [orders], accessKeys: [{accessKey: app-key, secretKey: app-secret-0123456789}]}\n")
	defer ns.Close()
	conn, err := tls.Dial("tcp", ns.Addr(), &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r := bufio.NewReader(conn)
	ask := func(topic, key, secret string) *remoting.Command {
		ext := map[string]string{"topic": topic}
		if key != "" {
			ext["AccessKey"] = key
			ext["Signature"] = cluster.RocketMQSignature([]byte(secret), ext, nil, false)
		}
		frame, _ := (&remoting.Command{Code: remoting.CodeGetRouteInfo, Opaque: 1, ExtFields: ext}).Encode(nil)
		conn.Write(frame)
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := remoting.ReadCommand(r, remoting.DefaultMaxFrame)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for name, resp := range map[string]*remoting.Command{
		"unsigned":        ask("orders", "", ""),
		"a wrong secret":  ask("orders", "app-key", "wrong-secret-0123456789"),
		"another's topic": ask("secret", "app-key", "app-secret-0123456789"),
	} {
		if resp.Code != remotingNoPermission {
			t.Errorf("%s: answered %d %q, want 16", name, resp.Code, resp.Remark)
		}
	}
	if resp := ask("orders", "app-key", "app-secret-0123456789"); resp.Code != remoting.CodeTopicNotExist {
		t.Fatalf("the user's own topic: answered %d %q, want 17", resp.Code, resp.Remark)
	}
}
