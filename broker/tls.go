package broker

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/remoting"
)

// serverCreds is the gRPC server's transport security: TLS 1.3 with the
// replica's certificate when Config.TLS is set (client certificates are
// verified when given, not required), else plaintext. With RocketMQ's
// remoting on the same port, the port's demux does the TLS handshake
// (remoting.ShareTLS) and gRPC takes its connections as they are.
func (b *Broker) serverCreds() grpc.ServerOption {
	switch {
	case b.cfg.TLS == nil:
		return grpc.Creds(insecure.NewCredentials())
	case b.cfg.DisableRemoting:
		return grpc.Creds(credentials.NewTLS(b.cfg.TLS.ServerConfig()))
	default:
		return grpc.Creds(remoting.HandshakenTLS())
	}
}

// clientKey names the client of an RPC for per-client limits: the
// identity its verified certificate names, or else its connection.
func clientKey(ctx context.Context) string {
	if id, ok := cluster.Caller(ctx); ok {
		return id.String()
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}

// dialCreds is the transport security of the replica's own calls to other
// nodes: its certificate presented, and the server's checked for want.
func (b *Broker) dialCreds(want cluster.Want) grpc.DialOption {
	if b.cfg.TLS == nil {
		return grpc.WithTransportCredentials(insecure.NewCredentials())
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(b.cfg.TLS.ClientConfig(want)))
}

// groupReplicaCreds is dialCreds for a call only a replica of this group
// may answer: its certificate says so.
func (b *Broker) groupReplicaCreds() grpc.DialOption {
	return b.dialCreds(cluster.Want{Cluster: b.cfg.Gossip.Cluster, Role: cluster.IdentityBroker, Group: b.cfg.Group})
}
