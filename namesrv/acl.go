package namesrv

import (
	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/pb"
	"google.golang.org/grpc"
)

// nameServerAccess is what each name server RPC needs under access
// control (cluster.ACL): a topic's route to those who may publish to or
// subscribe to it, the cluster's make-up to admins.
var nameServerAccess = map[string]cluster.AccessRule{
	pb.NameServer_GetRoute_FullMethodName: func(r any) cluster.Access {
		return cluster.Access{Route: []string{r.(*pb.GetRouteRequest).Topic}}
	},
	pb.NameServer_WatchRoutes_FullMethodName: func(r any) cluster.Access {
		return cluster.Access{Route: r.(*pb.WatchRoutesRequest).Topics}
	},
	pb.NameServer_GetClusterInfo_FullMethodName: func(any) cluster.Access { return cluster.Access{Admin: true} },
	pb.NameServer_ListTopics_FullMethodName:     func(any) cluster.Access { return cluster.Access{Admin: true} },
}

func (s *Server) unaryInterceptors() []grpc.UnaryServerInterceptor {
	out := []grpc.UnaryServerInterceptor{cluster.BoundErrors}
	if s.cfg.ACL != nil {
		out = append(out, s.cfg.ACL.UnaryInterceptor(nameServerAccess))
	}
	return out
}

func (s *Server) streamInterceptors() []grpc.StreamServerInterceptor {
	out := []grpc.StreamServerInterceptor{cluster.BoundStreamErrors}
	if s.cfg.ACL != nil {
		out = append(out, s.cfg.ACL.StreamInterceptor(nameServerAccess))
	}
	return out
}
