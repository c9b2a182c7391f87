package namesrv

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"testing"
	"time"

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
