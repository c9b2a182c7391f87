package broker

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/raftmq/raftmq/message"
	"github.com/raftmq/raftmq/remoting"
)

// remotingCall sends one request frame to replica i's port and reads the
// answer.
func (g *group) remotingCall(i int, req *remoting.Command) *remoting.Command {
	g.t.Helper()
	conn, err := net.DialTimeout("tcp", g.cfgs[i].GRPCAddr, 2*time.Second)
	if err != nil {
		g.t.Fatal(err)
	}
	defer conn.Close()
	frame, err := req.Encode(nil)
	if err != nil {
		g.t.Fatal(err)
	}
	if _, err := conn.Write(frame); err != nil {
		g.t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := remoting.ReadCommand(bufio.NewReader(conn), remoting.DefaultMaxFrame)
	if err != nil {
		g.t.Fatal(err)
	}
	return resp
}

// A slave answers a RocketMQ send with 14, "service not available", which
// RocketMQ's producers retry (as a RocketMQ slave answers), naming the
// master; the master stores the same send.
func TestASlaveAnswersRemotingSendsWithARetriedCode(t *testing.T) {
	g := newGroup(t, 3, nil)
	g.createTopic("rmq-slave", 1)
	m := g.master()
	send := &remoting.Command{Code: remoting.CodeSendMessage, Opaque: 1, ExtFields: map[string]string{"topic": "rmq-slave", "queueId": "0"}, Body: []byte("to a slave")}
	slave := (m + 1) % 3
	resp := g.remotingCall(slave, send)
	if resp.Code != remotingServiceNotAvailable || !strings.Contains(resp.Remark, g.cfgs[m].GRPCAddr) {
		t.Fatalf("a slave's answer %d %q, want 14 naming the master %s", resp.Code, resp.Remark, g.cfgs[m].GRPCAddr)
	}
	if resp := g.remotingCall(m, send); resp.Code != remoting.CodeSuccess || resp.ExtFields["msgId"] == "" {
		t.Fatalf("the master's answer %d %q", resp.Code, resp.Remark)
	}
}

// A RocketMQ consumer far behind is sent to a slave as the native one is:
// the master's pull answer suggests the slave by its broker id in the
// routes (its replica id); near the end it suggests the master (0).
func TestRemotingPullSuggestsASlaveToALaggingConsumer(t *testing.T) {
	g, m := laggingGroup(t, "rmq-lag")
	pull := func(offset string) string {
		resp := g.remotingCall(m, &remoting.Command{Code: remoting.CodePullMessage, Opaque: 1, ExtFields: map[string]string{
			"consumerGroup": "cg", "topic": "rmq-lag", "queueId": "0", "queueOffset": offset, "maxMsgNums": "4"}})
		if resp.Code != remoting.CodeSuccess {
			t.Fatalf("pull at %s: %d %q", offset, resp.Code, resp.Remark)
		}
		return resp.ExtFields["suggestWhichBrokerId"]
	}
	if id := pull("0"); id == "0" || id == fmt.Sprint(m+1) || id == "" {
		t.Fatalf("a lagging pull suggests broker id %q, want a slave's replica id (the master is replica %d)", id, m+1)
	}
	if id := pull("45"); id != "0" {
		t.Fatalf("a caught-up pull suggests %q, want the master, 0", id)
	}
}

// A RocketMQ client's half message is refused with 13, which clients do
// not retry, rather than stored and rolled back unanswered (codes 37 and
// 39 are not served yet).
func TestRemotingRefusesHalfMessages(t *testing.T) {
	g := newGroup(t, 1, nil)
	g.createTopic("rmq-tx", 1)
	props := message.PropertyTransactionPrepared + "\x01true\x02" + message.PropertyProducerGroup + "\x01pg\x02"
	resp := g.remotingCall(0, &remoting.Command{Code: remoting.CodeSendMessage, Opaque: 1,
		ExtFields: map[string]string{"topic": "rmq-tx", "queueId": "0", "properties": props}, Body: []byte("half")})
	if resp.Code != remotingMessageIllegal || !strings.Contains(resp.Remark, "transactional") {
		t.Fatalf("a half message's answer %d %q, want 13", resp.Code, resp.Remark)
	}
	if _, end := g.brokers[0].Store().QueueOffsets(message.TransHalfTopic, 0); end != 0 {
		t.Fatalf("%d halves stored", end)
	}
}
