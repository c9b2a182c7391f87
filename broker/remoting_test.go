package broker

import (
	"bufio"
	"fmt"
	"net"
	"strconv"
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

// rmqConn is a RocketMQ client's connection to a replica, read frame by
// frame (answers and pushes alike).
type rmqConn struct {
	t    *testing.T
	conn net.Conn
	r    *bufio.Reader
}

func (g *group) rmqDial(i int) *rmqConn {
	conn, err := net.DialTimeout("tcp", g.cfgs[i].GRPCAddr, 2*time.Second)
	if err != nil {
		g.t.Fatal(err)
	}
	g.t.Cleanup(func() { conn.Close() })
	return &rmqConn{t: g.t.(*testing.T), conn: conn, r: bufio.NewReader(conn)}
}

func (c *rmqConn) send(cmd *remoting.Command) {
	frame, err := cmd.Encode(nil)
	if err != nil {
		c.t.Fatal(err)
	}
	if _, err := c.conn.Write(frame); err != nil {
		c.t.Fatal(err)
	}
}

// next reads frames until one satisfies want, within 10 s.
func (c *rmqConn) next(want func(*remoting.Command) bool) *remoting.Command {
	c.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		cmd, err := remoting.ReadCommand(c.r, remoting.DefaultMaxFrame)
		if err != nil {
			c.t.Fatal(err)
		}
		if want(cmd) {
			return cmd
		}
	}
}

func (c *rmqConn) call(cmd *remoting.Command) *remoting.Command {
	c.send(cmd)
	return c.next(func(r *remoting.Command) bool { return r.IsResponse() && r.Opaque == cmd.Opaque })
}

// A RocketMQ client's transactions (codes 37 and 39): its half is answered
// with an offset message id, a one-way end commits it, and a half it
// leaves open is checked back on the connection it heartbeats on as a
// producer, its answer deciding the half.
func TestRemotingTransactionsEndAndCheckBack(t *testing.T) {
	g := newGroup(t, 3, nil)
	g.createTopic("rmq-tx", 1)
	m := g.master()
	c := g.rmqDial(m)
	hb := c.call(&remoting.Command{Code: remoting.CodeHeartbeat, Opaque: 1,
		Body: []byte(`{"clientID":"p1","producerDataSet":[{"groupName":"pg"}],"consumerDataSet":[]}`)})
	if hb.Code != remoting.CodeSuccess {
		t.Fatalf("heartbeat answered %d %q", hb.Code, hb.Remark)
	}
	half := func(opaque int32, body string) int64 {
		props := message.PropertyTransactionPrepared + "\x01true\x02" + message.PropertyProducerGroup + "\x01pg\x02" + message.PropertyUniqKey + "\x01" + body + "\x02"
		resp := c.call(&remoting.Command{Code: remoting.CodeSendMessage, Opaque: opaque,
			ExtFields: map[string]string{"topic": "rmq-tx", "queueId": "0", "properties": props}, Body: []byte(body)})
		id := resp.ExtFields["msgId"]
		off, err := strconv.ParseInt(id[16:], 16, 64)
		if resp.Code != remoting.CodeSuccess || len(id) != 32 || err != nil || resp.ExtFields["transactionId"] != body {
			t.Fatalf("half %s answered %d %q %v", body, resp.Code, resp.Remark, resp.ExtFields)
		}
		return off
	}
	end := func(off int64, kind int, fromCheck bool) {
		c.send(&remoting.Command{Code: remoting.CodeEndTransaction, Opaque: 99, Flag: remoting.FlagOneway, ExtFields: map[string]string{
			"producerGroup": "pg", "commitLogOffset": strconv.FormatInt(off, 10), "commitOrRollback": strconv.Itoa(kind),
			"fromTransactionCheck": strconv.FormatBool(fromCheck)}})
	}
	committed := half(2, "committed")
	open := half(3, "open")
	end(committed, remoting.TransactionCommitType, false)
	waitFor(t, 5*time.Second, func() bool { return bodies(g.pullRecords(m, "rmq-tx", 0))["committed"] == 1 })
	check := c.next(func(r *remoting.Command) bool { return r.Code == remoting.CodeCheckTransactionState })
	if check.IsResponse() || check.ExtFields["commitLogOffset"] != strconv.FormatInt(open, 10) || check.ExtFields["transactionId"] != "open" ||
		!strings.Contains(string(check.Body), "open") || !strings.Contains(string(check.Body), "rmq-tx") {
		t.Fatalf("check-back %+v", check)
	}
	end(open, remoting.TransactionCommitType, true)
	waitFor(t, 5*time.Second, func() bool { return len(bodies(g.pullRecords(m, "rmq-tx", 0))) == 2 })
	if b := bodies(g.pullRecords(m, "rmq-tx", 0)); b["committed"] != 1 || b["open"] != 1 {
		t.Fatalf("topic holds %v", b)
	}
}
