package broker

import (
	"slices"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/pb"
	"google.golang.org/grpc"
)

// brokerAccess is what each broker RPC needs under access control
// (cluster.ACL). Every method of the Broker service has an entry (a test
// holds the table to the service); the admin RPCs need the admin right,
// and what replicas and name servers call on each other is open to those
// nodes too.
var brokerAccess = map[string]cluster.AccessRule{
	pb.Broker_SendMessage_FullMethodName: func(r any) cluster.Access {
		return cluster.Access{Publish: []string{r.(*pb.SendMessageRequest).Topic}}
	},
	pb.Broker_SendMessageStream_FullMethodName: func(r any) cluster.Access {
		// A message's batched sends are checked together: one refused
		// topic refuses them all (the SDK batches sends to one topic).
		var a cluster.Access
		for _, s := range r.(*pb.SendStreamRequest).Sends() {
			if t := s.GetSend().GetTopic(); !slices.Contains(a.Publish, t) {
				a.Publish = append(a.Publish, t)
			}
		}
		return a
	},
	pb.Broker_InitProducer_FullMethodName: func(r any) cluster.Access {
		return cluster.Access{Publish: []string{r.(*pb.InitProducerRequest).Topic}}
	},
	pb.Broker_PullMessage_FullMethodName: func(r any) cluster.Access {
		q := r.(*pb.PullMessageRequest)
		if q.DeadLetters {
			return cluster.Access{Admin: true}
		}
		return cluster.Access{Subscribe: []string{q.Topic}, Groups: []string{q.ConsumerGroup}}
	},
	pb.Broker_QueryConsumerOffset_FullMethodName: func(r any) cluster.Access {
		q := r.(*pb.QueryConsumerOffsetRequest)
		return cluster.Access{Subscribe: []string{q.Topic}, Groups: []string{q.ConsumerGroup}}
	},
	pb.Broker_UpdateConsumerOffset_FullMethodName: func(r any) cluster.Access {
		q := r.(*pb.UpdateConsumerOffsetRequest)
		a := cluster.Access{Groups: []string{q.ConsumerGroup}}
		for _, o := range q.Offsets {
			if o != nil {
				a.Subscribe = append(a.Subscribe, o.Topic)
			}
		}
		return a
	},
	pb.Broker_Heartbeat_FullMethodName: func(r any) cluster.Access {
		a := cluster.Access{}
		for _, g := range r.(*pb.HeartbeatRequest).Groups {
			if g == nil {
				continue
			}
			a.Groups = append(a.Groups, g.Group)
			for _, s := range g.Subscriptions {
				if s != nil {
					a.Subscribe = append(a.Subscribe, s.Topic)
				}
			}
		}
		return a
	},
	// A group's members to those who may consume as the group; every
	// group's to admins.
	pb.Broker_DescribeConsumerGroups_FullMethodName: func(r any) cluster.Access {
		if g := r.(*pb.DescribeConsumerGroupsRequest).Group; g != "" {
			return cluster.Access{Groups: []string{g}}
		}
		return cluster.Access{Admin: true}
	},
	pb.Broker_GetConsumerList_FullMethodName: func(r any) cluster.Access {
		return cluster.Access{Groups: []string{r.(*pb.GetConsumerListRequest).ConsumerGroup}}
	},
	pb.Broker_ConsumerSendBack_FullMethodName: func(r any) cluster.Access {
		return cluster.Access{Groups: []string{r.(*pb.ConsumerSendBackRequest).ConsumerGroup}}
	},
	pb.Broker_LockQueues_FullMethodName: func(r any) cluster.Access {
		q := r.(*pb.LockQueuesRequest)
		return cluster.Access{Subscribe: []string{q.Topic}, Groups: []string{q.ConsumerGroup}}
	},
	pb.Broker_UnlockQueues_FullMethodName: func(r any) cluster.Access {
		q := r.(*pb.UnlockQueuesRequest)
		return cluster.Access{Subscribe: []string{q.Topic}, Groups: []string{q.ConsumerGroup}}
	},
	pb.Broker_ResetConsumerOffset_FullMethodName:     admin,
	pb.Broker_CreateTopic_FullMethodName:             admin,
	pb.Broker_DeleteTopic_FullMethodName:             admin,
	pb.Broker_ListTopics_FullMethodName:              admin,
	pb.Broker_UpsertSubscriptionGroup_FullMethodName: admin,
	pb.Broker_DeleteSubscriptionGroup_FullMethodName: admin,
	pb.Broker_ListSubscriptionGroups_FullMethodName:  admin,
	pb.Broker_GetQueueOffsets_FullMethodName: func(r any) cluster.Access {
		return cluster.Access{Subscribe: []string{r.(*pb.GetQueueOffsetsRequest).Topic}}
	},
	pb.Broker_SearchOffsetByTime_FullMethodName: func(r any) cluster.Access {
		return cluster.Access{Subscribe: []string{r.(*pb.SearchOffsetByTimeRequest).Topic}}
	},
	pb.Broker_QueryMessageById_FullMethodName:  admin,
	pb.Broker_QueryMessageByKey_FullMethodName: admin,
	// Name servers describe replicas to confirm their claims and fetch
	// topic tables; replicas copy each other's commitlogs.
	pb.Broker_DescribeBroker_FullMethodName:    func(any) cluster.Access { return cluster.Access{Admin: true, Node: cluster.NodeCluster} },
	pb.Broker_CopyCommitlog_FullMethodName:     func(any) cluster.Access { return cluster.Access{Admin: true, Node: cluster.NodeGroup} },
	pb.Broker_ChecksumCommitlog_FullMethodName: func(any) cluster.Access { return cluster.Access{Admin: true, Node: cluster.NodeCluster} },
	// A transaction is ended, and its half checked back, by a producer
	// that may publish to its topic.
	pb.Broker_EndTransaction_FullMethodName: func(r any) cluster.Access {
		return cluster.Access{Publish: []string{r.(*pb.EndTransactionRequest).Topic}}
	},
	pb.Broker_CheckTransactions_FullMethodName: func(r any) cluster.Access {
		q := r.(*pb.TransactionCheckStreamRequest)
		a := cluster.Access{Publish: q.Topics}
		if q.Answer != nil {
			a.Publish = append(a.Publish, q.Answer.Topic)
		}
		return a
	},
	// Membership changes are an operator's.
	pb.Broker_AddReplica_FullMethodName:     admin,
	pb.Broker_RemoveReplica_FullMethodName:  admin,
	pb.Broker_TransferLeader_FullMethodName: admin,
	pb.Broker_MoveRaftLog_FullMethodName:    admin,
}

var admin = cluster.AdminOnly

// serverInterceptors are cluster.ServerInterceptors, then the refusal of
// a failed replica.
func (b *Broker) serverInterceptors() ([]grpc.UnaryServerInterceptor, []grpc.StreamServerInterceptor) {
	unary, stream := cluster.ServerInterceptors(b.cfg.ACL, brokerAccess)
	return append(unary, b.refuseUnaryWhenFailed), append(stream, b.refuseStreamWhenFailed)
}
