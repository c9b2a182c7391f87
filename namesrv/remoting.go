package namesrv

import (
	"context"

	"github.com/raftmq/raftmq/message"
	"github.com/raftmq/raftmq/remoting"
)

// RocketMQ's clients ask a name server for routes over its remoting
// protocol, on the same port as gRPC (remoting.Demux): the route query
// (code 105) is answered from the same route table as GetRoute.

func (s *Server) remotingHandlers() map[int32]remoting.Handler {
	return map[int32]remoting.Handler{remoting.CodeGetRouteInfo: s.remotingRoute}
}

func (s *Server) remotingRoute(_ context.Context, req *remoting.Command) *remoting.Command {
	topic := req.ExtFields["topic"]
	if !message.ValidTopic(topic) {
		return &remoting.Command{Code: remoting.CodeSystemError, Remark: "the topic name must match " + message.TopicRule}
	}
	r := s.table.route(topic)
	if len(r.Groups) == 0 {
		// RocketMQ's answer, which its clients turn into "topic does not exist".
		return &remoting.Command{Code: remoting.CodeTopicNotExist, Remark: "No topic route info in name server for the topic: " + topic}
	}
	return &remoting.Command{Code: remoting.CodeSuccess, Body: remoting.RouteJSON(r, s.cfg.Cluster)}
}
