package namesrv

import (
	"context"

	"google.golang.org/grpc/status"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/pb"
	"github.com/raftmq/raftmq/message"
	"github.com/raftmq/raftmq/remoting"
)

// remotingNoPermission is RocketMQ's NO_PERMISSION answer code.
const remotingNoPermission = 16

// RocketMQ's clients ask a name server for routes over its remoting
// protocol, on the same port as gRPC (remoting.Demux): the route query
// (code 105) is answered from the same route table as GetRoute.

func (s *Server) remotingHandlers() map[int32]remoting.Handler {
	return map[int32]remoting.Handler{remoting.CodeGetRouteInfo: s.remotingRoute}
}

// remotingRoute answers a route query as GetRoute does, under access
// control checked as GetRoute's (its caller the connection's client
// certificate or RocketMQ's access-key signature).
func (s *Server) remotingRoute(ctx context.Context, req *remoting.Command) *remoting.Command {
	topic := req.ExtFields["topic"]
	if !message.ValidTopic(topic) {
		return &remoting.Command{Code: remoting.CodeSystemError, Remark: "the topic name must match " + message.TopicRule}
	}
	if acl := s.cfg.ACL; acl != nil {
		id, known, err := acl.RemotingCaller(remoting.TLSOf(ctx), req.ExtFields, req.Body)
		if err == nil {
			err = acl.CheckCall(id, known, nameServerAccess, pb.NameServer_GetRoute_FullMethodName, &pb.GetRouteRequest{Topic: topic})
		}
		if err != nil {
			return &remoting.Command{Code: remotingNoPermission, Remark: cluster.BoundMessage(status.Convert(err).Message())}
		}
	}
	r := s.table.route(topic)
	if len(r.Groups) == 0 {
		// RocketMQ's answer, which its clients turn into "topic does not exist".
		return &remoting.Command{Code: remoting.CodeTopicNotExist, Remark: "No topic route info in name server for the topic: " + topic}
	}
	return &remoting.Command{Code: remoting.CodeSuccess, Body: remoting.RouteJSON(r, s.cfg.Cluster)}
}
