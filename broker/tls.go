package broker

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/raftmq/raftmq/cluster"
)

// serverCreds is the gRPC server's transport security: TLS 1.3 with the
// replica's certificate when Config.TLS is set (client certificates are
// verified when given, not required), else plaintext.
func (b *Broker) serverCreds() grpc.ServerOption {
	if b.cfg.TLS == nil {
		return grpc.Creds(insecure.NewCredentials())
	}
	return grpc.Creds(credentials.NewTLS(b.cfg.TLS.ServerConfig()))
}

// dialCreds is the transport security of the replica's own calls to other
// nodes: its certificate presented, and the server's checked for want.
func (b *Broker) dialCreds(want cluster.Want) grpc.DialOption {
	if b.cfg.TLS == nil {
		return grpc.WithTransportCredentials(insecure.NewCredentials())
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(b.cfg.TLS.ClientConfig(want)))
}
