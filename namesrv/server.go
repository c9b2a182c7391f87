// Package namesrv owns the name server (server.go): it joins the gossip
// pool, keeps the route table (routes.go) from member events and the
// brokers' topic tables (fetched with DescribeBroker when a broker
// announces a new version), and answers clients' route queries over gRPC
// and, on the same port, RocketMQ clients' over the remoting protocol
// (remoting.go).
// With TLS, a broker's gossip claim counts only once the replica confirms
// it over mutual TLS (claims.go); acl.go says what each RPC needs under
// access control. It has no state on disk.
package namesrv

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/netutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/pb"
	"github.com/raftmq/raftmq/internal/defaults"
	"github.com/raftmq/raftmq/remoting"
)

// Config configures a name server. Zero fields take the documented
// defaults.
type Config struct {
	// Name is the gossip member name. Default "namesrv@" + AdvertiseGRPC.
	Name string
	// Cluster is the cluster's name. Default "raftmq".
	Cluster string
	// GRPCAddr is where clients reach the name server; AdvertiseGRPC what
	// others are told (default GRPCAddr).
	GRPCAddr      string
	AdvertiseGRPC string
	// GossipAddr and AdvertiseGossip: the gossip member's addresses.
	GossipAddr      string
	AdvertiseGossip string
	// Join lists gossip members to join.
	Join []string
	// SecretKey encrypts gossip when set.
	SecretKey []byte
	// FastGossip uses test timings (tens of milliseconds).
	FastGossip bool
	// RefreshInterval is how often topic tables that could not be fetched
	// are tried again. Default 2 s.
	RefreshInterval time.Duration
	// FetchTimeout bounds one DescribeBroker. Default 3 s.
	FetchTimeout time.Duration
	// HTTPAddr serves /metrics (Prometheus) and /healthz; "" leaves it off.
	HTTPAddr string
	// HTTPTLS serves HTTPAddr over TLS with TLS's certificate (which it
	// needs).
	HTTPTLS bool
	// MaxConcurrentStreams caps the RPCs in progress on one client
	// connection (a WatchRoutes is one). Default 1024.
	MaxConcurrentStreams int
	// MaxConnections caps the gRPC connections served at once; more wait
	// in the kernel's accept queue. Default 10000.
	MaxConnections int
	// TLS, when set, is the name server's certificate (naming
	// raftmq://CLUSTER/namesrv/ID) and the cluster's CA: the gRPC server
	// takes TLS 1.3 only, and a topic table is fetched only from a replica
	// whose certificate names the group and replica its gossip claims.
	// Nil: plaintext.
	TLS *cluster.TLS
	// DisableRemoting turns off RocketMQ's remoting protocol, which
	// otherwise answers RocketMQ clients' route queries on GRPCAddr beside
	// gRPC (remoting.go): with TLS, over TLS, and under ACL checked as
	// GetRoute is, the caller named by RocketMQ's access-key signature.
	DisableRemoting bool
	// ACL, when set, is access control, deny by default (acl.go says what
	// each RPC needs). It needs TLS. The caller owns it (Close).
	ACL    *cluster.ACL
	Logger *slog.Logger
}

// Server is a running name server.
type Server struct {
	cfg   Config
	log   *slog.Logger
	table *routeTable
	ms    *cluster.Membership
	ops   *cluster.OpsServer
	grpc  *grpc.Server
	lis   net.Listener
	// remoting serves RocketMQ's clients on lis beside gRPC (remoting.go);
	// nil when off.
	remoting *remoting.Server
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup

	fetchMu          sync.Mutex
	fetching         map[string]bool // groups with a fetch in flight
	confirmingClaims map[string]bool // members with a claim check in flight
	claimsRefused    atomic.Int64    // gossip claims that failed their check
}

// Start starts a name server: gRPC first, then gossip.
func Start(cfg Config) (*Server, error) {
	if cfg.GRPCAddr == "" || cfg.GossipAddr == "" {
		return nil, errors.New("namesrv: Config needs GRPCAddr and GossipAddr")
	}
	defaults.IfZero(&cfg.Cluster, "raftmq")
	defaults.IfZero(&cfg.RefreshInterval, 2*time.Second)
	defaults.IfZero(&cfg.FetchTimeout, 3*time.Second)
	defaults.IfZero(&cfg.Logger, slog.Default())
	defaults.IfNotPositive(&cfg.MaxConcurrentStreams, 1024)
	defaults.IfNotPositive(&cfg.MaxConnections, 10000)
	if cfg.HTTPTLS && cfg.TLS == nil {
		return nil, errors.New("namesrv: HTTPS on the ops endpoint needs TLS")
	}
	if cfg.ACL != nil && cfg.TLS == nil {
		return nil, errors.New("namesrv: access control needs TLS (client certificates name the callers)")
	}
	if cfg.TLS != nil && (cfg.TLS.Self.Role != cluster.IdentityNameServer || cfg.TLS.Self.Cluster != cfg.Cluster) {
		return nil, fmt.Errorf("namesrv: the TLS certificate names %v, not a name server of cluster %s", cfg.TLS.Self, cfg.Cluster)
	}
	s := &Server{cfg: cfg, table: newRouteTable(cfg.TLS != nil), fetching: map[string]bool{}, confirmingClaims: map[string]bool{}}
	var err error
	if s.lis, err = net.Listen("tcp", cfg.GRPCAddr); err != nil {
		return nil, fmt.Errorf("namesrv: listen on %s: %w", cfg.GRPCAddr, err)
	}
	defaults.IfZero(&s.cfg.AdvertiseGRPC, s.lis.Addr().String())
	defaults.IfZero(&s.cfg.Name, "namesrv@"+s.cfg.AdvertiseGRPC)
	s.log = cfg.Logger.With("namesrv", s.cfg.Name)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.ms, err = cluster.StartMembership(cluster.MembershipConfig{
		Name: s.cfg.Name, BindAddr: cfg.GossipAddr, AdvertiseAddr: cfg.AdvertiseGossip, Join: cfg.Join,
		SecretKey: cfg.SecretKey, Fast: cfg.FastGossip, Logger: s.log,
		Meta: cluster.MemberMeta{Role: cluster.RoleNameServer, Cluster: cfg.Cluster, GRPCAddr: s.cfg.AdvertiseGRPC},
	})
	if err != nil {
		s.lis.Close()
		return nil, err
	}
	creds := insecure.NewCredentials()
	switch {
	case cfg.TLS != nil && cfg.DisableRemoting:
		creds = credentials.NewTLS(cfg.TLS.ServerConfig())
	case cfg.TLS != nil: // the port's demux shakes hands (remoting.ShareTLS)
		creds = remoting.HandshakenTLS()
	}
	unary, stream := cluster.ServerInterceptors(cfg.ACL, nameServerAccess)
	s.grpc = grpc.NewServer(grpc.Creds(creds), grpc.MaxConcurrentStreams(uint32(cfg.MaxConcurrentStreams)),
		grpc.ChainUnaryInterceptor(unary...), grpc.ChainStreamInterceptor(stream...))
	pb.RegisterNameServerServer(s.grpc, &service{s: s})
	if cfg.HTTPAddr != "" {
		var opsTLS *tls.Config
		if cfg.HTTPTLS {
			opsTLS = cfg.TLS.ServerConfig()
		}
		if s.ops, err = cluster.ServeOps(cfg.HTTPAddr, s.metrics(), func() error { return s.ctx.Err() }, false, opsTLS); err != nil {
			s.ms.Close()
			s.lis.Close()
			return nil, err
		}
	}
	s.wg.Add(3)
	served := netutil.LimitListener(s.lis, s.cfg.MaxConnections)
	if !cfg.DisableRemoting {
		s.remoting = remoting.NewServer(remoting.ServerConfig{Handlers: s.remotingHandlers(), Logger: s.log})
		if cfg.TLS != nil {
			served = remoting.ShareTLS(served, cfg.TLS.ServerConfig(), s.remoting, &s.wg)
		} else {
			served = remoting.Share(served, s.remoting, &s.wg)
		}
	}
	go func() {
		defer s.wg.Done()
		s.grpc.Serve(served)
	}()
	go func() {
		defer s.wg.Done()
		s.eventLoop()
	}()
	go func() {
		defer s.wg.Done()
		s.refreshLoop()
	}()
	s.log.Info("name server started", "grpc", s.cfg.AdvertiseGRPC, "gossip", cfg.GossipAddr)
	return s, nil
}

// metrics registers the name server's gauges: members of the pool, live
// broker groups, groups with a master, topics routed.
func (s *Server) metrics() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	gauge := func(name, help string, f func() float64) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f))
	}
	gauge("raftmq_namesrv_members", "Live members of the gossip pool.", func() float64 {
		s.table.mu.Lock()
		defer s.table.mu.Unlock()
		return float64(len(s.table.members))
	})
	gauge("raftmq_namesrv_groups", "Live broker groups.", func() float64 {
		return float64(len(s.table.clusterInfo(s.cfg.Cluster).Groups))
	})
	gauge("raftmq_namesrv_groups_with_master", "Live broker groups with a master.", func() float64 {
		n := 0
		for _, g := range s.table.clusterInfo(s.cfg.Cluster).Groups {
			if g.MasterId != 0 {
				n++
			}
		}
		return float64(n)
	})
	gauge("raftmq_namesrv_topics", "Topics routed.", func() float64 { return float64(len(s.table.topicNames())) })
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "raftmq_namesrv_claims_refused_total",
		Help: "Brokers' gossip claims that their mutual-TLS check refused (with TLS only)."},
		func() float64 { return float64(s.claimsRefused.Load()) }))
	reg.MustRegister(prometheus.NewGoCollector())
	return reg
}

// OpsAddr is where /metrics and /healthz are served ("" when off).
func (s *Server) OpsAddr() string {
	if s.ops == nil {
		return ""
	}
	return s.ops.Addr()
}

// Addr is the gRPC address the name server listens on.
func (s *Server) Addr() string { return s.lis.Addr().String() }

// Close leaves the pool and stops serving.
func (s *Server) Close() error {
	if s.ops != nil {
		s.ops.Close()
	}
	s.cancel()
	err := s.ms.Close() // ends eventLoop: Events closes
	s.grpc.Stop()
	if s.remoting != nil {
		s.lis.Close() // ends the demux's accept loop
		s.remoting.Close()
	}
	s.wg.Wait()
	return err
}

func (s *Server) eventLoop() {
	for e := range s.ms.Events {
		for _, m := range s.table.apply(e) {
			s.fetch(m)
		}
		s.confirmClaims()
	}
}

func (s *Server) refreshLoop() {
	t := time.NewTicker(s.cfg.RefreshInterval)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
			for _, m := range s.table.stale() {
				s.fetch(m)
			}
			s.confirmClaims()
		}
	}
}

// fetch gets a group's topic table from the replica m, in the background,
// one fetch per group at a time.
func (s *Server) fetch(m cluster.MemberEvent) {
	s.inBackground(s.fetching, m.Meta.Group, func() {
		ctx, cancel := context.WithTimeout(s.ctx, s.cfg.FetchTimeout)
		defer cancel()
		d, err := s.describe(ctx, m.Meta)
		if err != nil {
			s.log.Warn("fetch topic table", "broker", m.Name, "err", err)
			return
		}
		s.table.setTopics(d.Group, d.TopicsVersion, d.Topics)
		// The group may have moved on while we fetched.
		for _, again := range s.table.stale() {
			if again.Meta.Group == m.Meta.Group && again.Meta.TopicsVersion > d.TopicsVersion {
				s.wg.Add(1)
				go func() {
					defer s.wg.Done()
					s.fetchAfter(again)
				}()
			}
		}
	})
}

// inBackground runs fn on a goroutine of its own unless one for key (in
// busy, guarded by fetchMu) is running still, or the server is closing.
func (s *Server) inBackground(busy map[string]bool, key string, fn func()) {
	s.fetchMu.Lock()
	defer s.fetchMu.Unlock()
	if busy[key] || s.ctx.Err() != nil {
		return
	}
	busy[key] = true
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer func() {
			s.fetchMu.Lock()
			delete(busy, key)
			s.fetchMu.Unlock()
		}()
		fn()
	}()
}

// fetchAfter retries a fetch once the one in flight has finished.
func (s *Server) fetchAfter(m cluster.MemberEvent) {
	for {
		s.fetchMu.Lock()
		busy := s.fetching[m.Meta.Group]
		s.fetchMu.Unlock()
		if !busy || s.ctx.Err() != nil {
			break
		}
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
	s.fetch(m)
}

type service struct {
	pb.UnimplementedNameServerServer
	s *Server
}

func (v *service) GetRoute(_ context.Context, req *pb.GetRouteRequest) (*pb.RouteResponse, error) {
	if req.Topic == "" || len(req.Topic) > 127 {
		return nil, status.Error(codes.InvalidArgument, "topic name must be 1 to 127 characters")
	}
	r := v.s.table.route(req.Topic)
	if len(r.Groups) == 0 {
		if v.s.table.unfetched() {
			// A group's topic table is not fetched yet (this name server
			// just started): "no such topic" could be wrong; let the
			// client ask another name server or try again.
			return nil, pb.StatusError(codes.Unavailable, pb.ErrorReason_ERROR_REASON_UNSPECIFIED,
				"name server still learning the cluster's topics", nil)
		}
		return nil, topicNotFound(req.Topic)
	}
	return r, nil
}

func (v *service) GetClusterInfo(context.Context, *pb.GetClusterInfoRequest) (*pb.ClusterInfoResponse, error) {
	return v.s.table.clusterInfo(v.s.cfg.Cluster), nil
}

func (v *service) ListTopics(context.Context, *pb.ListTopicsRequest) (*pb.ListTopicNamesResponse, error) {
	return &pb.ListTopicNamesResponse{Topics: v.s.table.topicNames()}, nil
}

// WatchRoutes sends the watched topics' routes, then each change of them.
func (v *service) WatchRoutes(req *pb.WatchRoutesRequest, stream grpc.ServerStreamingServer[pb.RouteResponse]) error {
	if len(req.Topics) == 0 || len(req.Topics) > 1000 {
		return status.Error(codes.InvalidArgument, "watch 1 to 1000 topics")
	}
	last := map[string]*pb.RouteResponse{}
	for {
		changed := v.s.table.watch()
		for _, topic := range req.Topics {
			r := v.s.table.route(topic)
			if prev, ok := last[topic]; ok && proto.Equal(prev, r) {
				continue
			}
			if err := stream.Send(r); err != nil {
				return err
			}
			last[topic] = r
		}
		select {
		case <-changed:
		case <-stream.Context().Done():
			return stream.Context().Err()
		case <-v.s.ctx.Done():
			return status.Error(codes.Unavailable, "name server stopping")
		}
	}
}

func topicNotFound(topic string) error {
	return pb.StatusError(codes.NotFound, pb.ErrorReason_TOPIC_NOT_FOUND, "no route for topic "+topic, nil)
}

// brokerCreds is the transport security of a call to the replica whose
// gossip meta is m: with TLS, the replica's certificate must name the
// group and replica id m claims, so a gossip member cannot point the name
// server at a topic table of its own.
func (s *Server) brokerCreds(m cluster.MemberMeta) grpc.DialOption {
	if s.cfg.TLS == nil {
		return grpc.WithTransportCredentials(insecure.NewCredentials())
	}
	want := cluster.Want{Cluster: s.cfg.Cluster, Role: cluster.IdentityBroker, Group: m.Group, ID: strconv.Itoa(int(m.ReplicaID))}
	return grpc.WithTransportCredentials(credentials.NewTLS(s.cfg.TLS.ClientConfig(want)))
}
