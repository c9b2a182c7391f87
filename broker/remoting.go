package broker

import (
	"context"
	"strconv"
	"strings"

	"github.com/raftmq/raftmq/cluster/pb"
	"github.com/raftmq/raftmq/remoting"
)

// RocketMQ's producers send to a replica over the remoting protocol, on
// its gRPC port (remoting.Demux): the gateway turns each send into the
// native SendMessage, so it takes the same path, checks and limits, and
// answers in RocketMQ's terms. So far: sends (codes 10, 310, 320) and
// heartbeats (34, answered: consumers over remoting are to come, issue
// #15).

// Remoting answer codes of RocketMQ's ResponseCode that sends use.
const (
	remotingMessageIllegal = 13
	remotingNoPermission   = 16
	codeHeartbeat          = 34
)

func (b *Broker) remotingHandlers() map[int32]remoting.Handler {
	s := &service{b: b}
	send := func(ctx context.Context, req *remoting.Command) *remoting.Command { return s.remotingSend(ctx, req) }
	return map[int32]remoting.Handler{
		remoting.CodeSendMessage:      send,
		remoting.CodeSendMessageV2:    send,
		remoting.CodeSendBatchMessage: send,
		codeHeartbeat: func(context.Context, *remoting.Command) *remoting.Command {
			return &remoting.Command{Code: remoting.CodeSuccess}
		},
	}
}

func (s *service) remotingSend(ctx context.Context, c *remoting.Command) *remoting.Command {
	req, err := remoting.SendRequest(c, s.b.cfg.MaxMessageSize)
	if err != nil {
		return &remoting.Command{Code: remotingMessageIllegal, Remark: err.Error()}
	}
	resp, err := s.SendMessage(ctx, req)
	if err != nil {
		return &remoting.Command{Code: remotingCode(err), Remark: boundRemark(err)}
	}
	ids := make([]string, len(resp.Results))
	for i, r := range resp.Results {
		ids[i] = r.MsgId
	}
	return &remoting.Command{Code: remoting.CodeSuccess, ExtFields: map[string]string{
		"msgId": strings.Join(ids, ","), "queueId": strconv.Itoa(int(resp.QueueId)),
		"queueOffset": strconv.FormatInt(resp.Results[0].QueueOffset, 10), "MSG_REGION": "DefaultRegion", "TRACE_ON": "false",
	}}
}

// remotingCode is a native error's RocketMQ answer code. Those a producer
// retries on another queue (no master here, topic unknown) are 1 and 17.
func remotingCode(err error) int32 {
	switch reason, _ := pb.ReasonOf(err); reason {
	case pb.ErrorReason_TOPIC_NOT_FOUND:
		return remoting.CodeTopicNotExist
	case pb.ErrorReason_ILLEGAL_ARGUMENT, pb.ErrorReason_ILLEGAL_NAME, pb.ErrorReason_MESSAGE_TOO_LARGE:
		return remotingMessageIllegal
	case pb.ErrorReason_NO_PERMISSION:
		return remotingNoPermission
	default:
		return remoting.CodeSystemError // NOT_LEADER among them: the client tries again elsewhere
	}
}

// boundRemark is an error's message for a remark, cut as the native
// statuses are.
func boundRemark(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, "desc = "); i >= 0 {
		msg = msg[i+len("desc = "):]
	}
	if len(msg) > 512 {
		msg = msg[:512]
	}
	return msg
}
