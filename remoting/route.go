package remoting

import (
	"encoding/json"
	"sort"
	"strconv"

	"github.com/raftmq/raftmq/cluster/pb"
)

// Route queries (code 105, GET_ROUTEINFO_BY_TOPIC; ext "topic") are
// answered with RocketMQ's route JSON. What its clients rely on (from the
// Go client v2's route decoder, apache/rocketmq-client-go internal/route.go,
// TopicRouteData.decode):
//   - brokerAddrs keyed by broker id, the master at id 0 (clients write
//     only to id 0), present even when empty: the Go client cuts it with
//     string surgery and panics on a missing one;
//   - compact JSON (that surgery splits on "," and ":"), with quoted keys
//     (it strips quotes, and Java's fastjson reads them too);
//   - perm 6 for read and write, queue ids 0..n-1 per brokerName.
//
// A replica other than the master keeps a slave id: its replica id, which
// is never 0 (replica ids start at 1).

// CodeGetRouteInfo is the route query's request code.
const CodeGetRouteInfo = 105

type queueData struct {
	BrokerName     string `json:"brokerName"`
	ReadQueueNums  int32  `json:"readQueueNums"`
	WriteQueueNums int32  `json:"writeQueueNums"`
	Perm           int32  `json:"perm"`
	TopicSysFlag   int32  `json:"topicSysFlag"`
}

type brokerData struct {
	Cluster     string            `json:"cluster"`
	BrokerName  string            `json:"brokerName"`
	BrokerAddrs map[string]string `json:"brokerAddrs"`
}

type topicRouteData struct {
	OrderTopicConf string       `json:"orderTopicConf"`
	QueueDatas     []queueData  `json:"queueDatas"`
	BrokerDatas    []brokerData `json:"brokerDatas"`
}

// RouteJSON is r in RocketMQ's route shape, for cluster clusterName.
func RouteJSON(r *pb.RouteResponse, clusterName string) []byte {
	out := topicRouteData{QueueDatas: []queueData{}, BrokerDatas: []brokerData{}}
	for _, g := range r.Groups {
		out.QueueDatas = append(out.QueueDatas, queueData{BrokerName: g.Group, ReadQueueNums: g.ReadQueues, WriteQueueNums: g.WriteQueues, Perm: g.Perm})
		addrs := map[string]string{}
		for _, rep := range g.Replicas {
			id := strconv.Itoa(int(rep.Id))
			if rep.Master {
				id = "0"
			}
			addrs[id] = rep.GrpcAddress
		}
		out.BrokerDatas = append(out.BrokerDatas, brokerData{Cluster: clusterName, BrokerName: g.Group, BrokerAddrs: addrs})
	}
	sort.Slice(out.QueueDatas, func(i, j int) bool { return out.QueueDatas[i].BrokerName < out.QueueDatas[j].BrokerName })
	sort.Slice(out.BrokerDatas, func(i, j int) bool { return out.BrokerDatas[i].BrokerName < out.BrokerDatas[j].BrokerName })
	b, _ := json.Marshal(out) // plain structs and maps of strings: cannot fail
	return b
}
