package namesrv

import (
	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/pb"
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
	pb.NameServer_GetClusterInfo_FullMethodName: cluster.AdminOnly,
	pb.NameServer_ListTopics_FullMethodName:     cluster.AdminOnly,
}
