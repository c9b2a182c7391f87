package broker

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/pb"
	"github.com/raftmq/raftmq/message"
	"github.com/raftmq/raftmq/remoting"
)

// rmqClient speaks remoting over TLS to the replica as RocketMQ's Go
// client does (UseTls: no certificate checked, none given), signing with
// an access key when it has one.
type rmqClient struct {
	t      testing.TB
	conn   *tls.Conn
	r      *bufio.Reader
	key    string
	secret string
	opaque int32
}

func (g *aclGroup) rmq(key, secret string) *rmqClient {
	conn, err := tls.Dial("tcp", g.cfgs[0].GRPCAddr, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		g.t.Fatal(err)
	}
	g.t.Cleanup(func() { conn.Close() })
	return &rmqClient{t: g.t, conn: conn, r: bufio.NewReader(conn), key: key, secret: secret}
}

func (c *rmqClient) call(code int32, ext map[string]string, body []byte) *remoting.Command {
	c.t.Helper()
	signed := map[string]string{}
	for k, v := range ext {
		signed[k] = v
	}
	if c.key != "" {
		signed["AccessKey"] = c.key
		signed["Signature"] = cluster.RocketMQSignature([]byte(c.secret), signed, body, false)
	}
	c.opaque++
	frame, err := (&remoting.Command{Code: code, Opaque: c.opaque, ExtFields: signed, Body: body}).Encode(nil)
	if err != nil {
		c.t.Fatal(err)
	}
	if _, err := c.conn.Write(frame); err != nil {
		c.t.Fatal(err)
	}
	c.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		resp, err := remoting.ReadCommand(c.r, remoting.DefaultMaxFrame)
		if err != nil {
			c.t.Fatal(err)
		}
		if resp.IsResponse() && resp.Opaque == c.opaque {
			return resp
		}
	}
}

// gatewayRequest is one request of each code the gateway serves, on
// topic and as group.
func gatewayRequest(code int32, topic, group string, halves map[string]int64) (map[string]string, []byte) {
	q := map[string]string{"topic": topic, "queueId": "0", "consumerGroup": group}
	mq, _ := json.Marshal(map[string]any{"consumerGroup": group, "clientId": "c1",
		"mqSet": []map[string]any{{"topic": topic, "brokerName": "broker-a", "queueId": 0}}})
	switch code {
	case remoting.CodeSendMessage, remoting.CodeSendMessageV2:
		return map[string]string{"topic": topic, "queueId": "0"}, []byte("remoting")
	case remoting.CodeSendBatchMessage:
		rec := binary.BigEndian.AppendUint32(nil, 20+5+2)
		rec = append(rec, make([]byte, 12)...)
		rec = binary.BigEndian.AppendUint32(rec, 5)
		rec = append(append(rec, "batch"...), 0, 0)
		return map[string]string{"topic": topic, "queueId": "0"}, rec
	case remoting.CodeHeartbeat:
		hb, _ := json.Marshal(map[string]any{"clientID": "c1", "consumerDataSet": []map[string]any{{"groupName": group,
			"messageModel": "CLUSTERING", "subscriptionDataSet": []map[string]any{{"topic": topic, "subString": "*"}}}}})
		return map[string]string{}, hb
	case remoting.CodeLockBatchMQ, remoting.CodeUnlockBatchMQ:
		return map[string]string{}, mq
	case remoting.CodePullMessage:
		q["queueOffset"], q["maxMsgNums"] = "0", "32"
	case remoting.CodeUpdateConsumerOffet:
		q["commitOffset"] = "0"
	case remoting.CodeSearchOffsetByTime:
		q["timestamp"] = "0"
	case remoting.CodeConsumerSendBack:
		return map[string]string{"group": group, "offset": "0", "delayLevel": "3"}, nil
	case remoting.CodeEndTransaction:
		return map[string]string{"producerGroup": "pg", "commitLogOffset": strconv.FormatInt(halves[topic], 10),
			"commitOrRollback": strconv.Itoa(remoting.TransactionCommitType)}, nil
	}
	return q, nil
}

// Under access control every code the gateway serves is checked as the
// native call it makes: unsigned, signed with a wrong secret or an
// unknown key, or signed by a user without the right (another topic and
// group), it is answered 16 (no permission) and changes nothing; signed
// by a user with the right, it is served. The requests go over TLS, as
// RocketMQ's clients with UseTls send them, to the port gRPC is on.
func TestRemotingUnderAccessControl(t *testing.T) {
	g := newACLGroup(t)
	waitFor(t, 10*time.Second, g.brokers[0].IsMaster)
	ctx := context.Background()
	root := g.as(userID("root"))
	for _, topic := range []string{"orders", "other"} {
		if _, err := root.CreateTopic(ctx, &pb.CreateTopicRequest{Topic: &pb.TopicConfig{Name: topic, ReadQueues: 1, WriteQueues: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	commitlog := func() int64 {
		d, err := root.DescribeBroker(ctx, &pb.DescribeBrokerRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return d.CommitlogMaxOffset
	}
	halves := map[string]int64{} // a half on each topic, for code 37
	for _, topic := range []string{"orders", "other"} {
		resp, err := root.SendMessage(ctx, &pb.SendMessageRequest{Topic: topic, Messages: []*pb.Message{{Body: []byte("half"),
			Properties: map[string]string{message.PropertyTransactionPrepared: "true", message.PropertyProducerGroup: "pg"}}}})
		if err != nil {
			t.Fatal(err)
		}
		halves[topic] = resp.Results[0].CommitlogOffset
	}
	before := commitlog()
	refused := map[string]*rmqClient{
		"unsigned":          g.rmq("", ""),
		"a wrong secret":    g.rmq("app-key", "not-app-secret-0123456789"),
		"an unknown key":    g.rmq("no-such-key", "app-secret-0123456789"),
		"without the right": g.rmq("app-key", "app-secret-0123456789"),
	}
	app := g.rmq("app-key", "app-secret-0123456789")
	codes := g.brokers[0].remotingGateway()
	for code := range codes {
		for who, c := range refused {
			topic, group := "orders", "g1"
			if who == "without the right" {
				topic, group = "other", "g2"
			}
			ext, body := gatewayRequest(code, topic, group, halves)
			if resp := c.call(code, ext, body); resp.Code != remotingNoPermission {
				t.Errorf("code %d %s: answered %d %q, want 16", code, who, resp.Code, resp.Remark)
			} else if who == "a wrong secret" && !strings.Contains(resp.Remark, "does not match") {
				t.Errorf("code %d with a wrong secret: remark %q", code, resp.Remark)
			}
		}
	}
	if after := commitlog(); after != before {
		t.Fatalf("refused requests wrote to the commitlog: %d → %d", before, after)
	}
	for code := range codes {
		ext, body := gatewayRequest(code, "orders", "g1", halves)
		if resp := app.call(code, ext, body); resp.Code == remotingNoPermission {
			t.Errorf("code %d signed by a user with the right: refused %q", code, resp.Remark)
		}
	}
	if commitlog() == before {
		t.Fatal("the allowed sends stored nothing")
	}
}
