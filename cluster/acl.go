package cluster

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"gopkg.in/yaml.v3"

	"github.com/raftmq/raftmq/cluster/pb"
	"github.com/raftmq/raftmq/message"
)

// Access control, deny by default once a policy is given. Who calls is the
// identity of the caller's verified client certificate (tls.go), or the
// user whose access key signed the request (accesskey.go); what the
// call needs is computed from the request by the server's method table
// (every method has an entry; a method without one is refused); the
// policy says what each user may do. One interceptor, unary and stream,
// serves brokers and name servers alike.
//
// The policy is a file given to every node (--acl), read again when it
// changes, rather than replicated metadata: name servers have no Raft
// state to hold it, one file serves every group, the first policy needs
// no bootstrap (who could write it?), and operators keep it where they
// keep the rest of the configuration. Nodes of the cluster (their
// certificates name a broker replica or a name server) have only the
// node rights their calls to each other need.

// ACLPolicy is the file's content.
//
//	users:
//	  admin: {admin: true}                 # every RPC, the admin ones included
//	  orders-app:
//	    publish: [orders, "audit-*"]       # topics it may send to ("x*": a prefix)
//	    subscribe: [orders]                # topics it may consume and read offsets of
//	    groups: [orders-consumers]         # consumer groups it may consume as
//	    accessKeys:                        # keys it may sign requests with instead of a certificate
//	      - {accessKey: orders-1, secretKey: "at least 16 bytes of secret"}
//	accessKeyMaxAge: 5m                    # a signed request's timestamp this close to the node's clock
//	accessKeySessions: 1024                # signing sessions one key may hold open on a node
//
// A user is the NAME of a client certificate's raftmq://CLUSTER/user/NAME,
// or the owner of an access key. A consumer group's retry topic
// (%RETRY%GROUP) comes with the group. The file holds secrets: keep it
// readable by the node only.
type ACLPolicy struct {
	Users             map[string]ACLUser `yaml:"users"`
	AccessKeyMaxAge   time.Duration      `yaml:"accessKeyMaxAge"`
	AccessKeySessions int                `yaml:"accessKeySessions"`

	byKey map[string]keyOwner // the access keys of Users
}

// ACLUser is one user's rights.
type ACLUser struct {
	Admin     bool     `yaml:"admin"`
	Publish   []string `yaml:"publish"`
	Subscribe []string `yaml:"subscribe"`
	Groups    []string `yaml:"groups"`
	// AccessKeys sign requests as this user (accesskey.go).
	AccessKeys []ACLAccessKey `yaml:"accessKeys"`
}

// Access is what one call needs.
type Access struct {
	// Admin: the admin right. With Node set, a node of the kind Node
	// names may make the call too.
	Admin bool
	// Node: NodeGroup, a replica of this broker's own group; NodeCluster,
	// any node of the cluster. Users never have node rights.
	Node      string
	Publish   []string // topics sent to
	Subscribe []string // topics read
	Groups    []string // consumer groups acted as
	Route     []string // topics routed: each one the caller may publish to or subscribe
}

// The kinds of node an Access may name.
const (
	NodeGroup   = "group"
	NodeCluster = "cluster"
)

// AccessRule computes what a call with request req needs.
type AccessRule func(req any) Access

// ACL enforces a policy file on one node.
type ACL struct {
	path     string
	self     Identity // the node's: whose nodes have node rights
	resource string   // self as signed requests name it
	now      func() time.Time
	replays  replays
	log      *slog.Logger
	policy   atomic.Pointer[ACLPolicy]
	raw      []byte // the file as last loaded; guarded by mu
	mu       sync.Mutex
	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
}

// LoadACL reads the policy at path for the node self (the identity its
// certificate names) and checks it every reload interval for changes
// until Close. A policy that does not parse is refused; on a reload the
// last good one stays in force and the error is logged.
func LoadACL(path string, self Identity, reload time.Duration, log *slog.Logger) (*ACL, error) {
	a := &ACL{path: path, self: self, resource: pb.ResourceOf(self.URI()), now: time.Now, log: log, stop: make(chan struct{}), done: make(chan struct{})}
	if err := a.reload(); err != nil {
		return nil, err
	}
	go a.watch(reload)
	return a, nil
}

func parsePolicy(b []byte) (*ACLPolicy, error) {
	var p ACLPolicy
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&p); err != nil {
		return nil, err
	}
	for name := range p.Users {
		if name == "" || strings.ContainsAny(name, "/ \t") {
			return nil, fmt.Errorf("user name %q: want a certificate's user name", name)
		}
	}
	if err := p.indexAccessKeys(); err != nil {
		return nil, err
	}
	return &p, nil
}

func (a *ACL) reload() error {
	b, err := os.ReadFile(a.path)
	if err != nil {
		return fmt.Errorf("acl: %w", err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.policy.Load() != nil && bytes.Equal(b, a.raw) {
		return nil
	}
	p, err := parsePolicy(b)
	if err != nil {
		return fmt.Errorf("acl: %s: %w", a.path, err)
	}
	a.policy.Store(p)
	a.raw = b
	if a.log != nil {
		a.log.Info("access control policy loaded", "file", a.path, "users", len(p.Users))
	}
	return nil
}

func (a *ACL) watch(every time.Duration) {
	defer close(a.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-a.stop:
			return
		case <-t.C:
			if err := a.reload(); err != nil && a.log != nil {
				a.log.Error("access control policy not reloaded; the last one stays in force", "err", err)
			}
			a.replays.forget(a.now(), a.policy.Load())
		}
	}
}

// Close stops watching the file.
func (a *ACL) Close() {
	a.stopOnce.Do(func() { close(a.stop) })
	<-a.done
}

// Check decides a call by caller (ok false: no verified identity) that
// needs need: nil, or a PermissionDenied or Unauthenticated status.
func (a *ACL) Check(caller Identity, ok bool, need Access) error {
	deny := func(why string) error {
		return pb.StatusError(codes.PermissionDenied, pb.ErrorReason_NO_PERMISSION, why, nil)
	}
	switch {
	case !ok:
		return pb.StatusError(codes.Unauthenticated, pb.ErrorReason_NO_PERMISSION, "this cluster needs a client certificate (raftmq certs --users NAME) or a request signed with an access key", nil)
	case caller.Cluster != a.self.Cluster:
		return deny("the certificate is of cluster " + caller.Cluster)
	case caller.Role == IdentityBroker || caller.Role == IdentityNameServer:
		if need.Node == NodeCluster || need.Node == NodeGroup && caller.Role == IdentityBroker && a.self.Role == IdentityBroker && caller.Group == a.self.Group {
			return nil
		}
		return deny(caller.String() + " is a node: it has node rights only")
	case caller.Role != IdentityUser:
		return deny("unknown identity")
	}
	u, known := a.policy.Load().Users[caller.ID]
	switch {
	case !known:
		return deny("user " + caller.ID + " is not in the access control policy")
	case u.Admin:
		return nil
	case need.Admin:
		return deny("user " + caller.ID + " lacks the admin right")
	case need.Node != "" && len(need.Publish)+len(need.Subscribe)+len(need.Groups)+len(need.Route) == 0:
		return deny("for nodes only")
	}
	for _, t := range need.Publish {
		if !matchAny(u.Publish, t) {
			return deny(fmt.Sprintf("user %s may not publish to %.127s", caller.ID, t))
		}
	}
	for _, g := range need.Groups {
		if !matchAny(u.Groups, g) {
			return deny(fmt.Sprintf("user %s may not consume as group %.127s", caller.ID, g))
		}
	}
	for _, t := range need.Subscribe {
		if !matchAny(u.Subscribe, t) && !retryTopicOf(u.Groups, t) {
			return deny(fmt.Sprintf("user %s may not subscribe to %.127s", caller.ID, t))
		}
	}
	for _, t := range need.Route {
		if !matchAny(u.Publish, t) && !matchAny(u.Subscribe, t) && !retryTopicOf(u.Groups, t) {
			return deny(fmt.Sprintf("user %s may neither publish to nor subscribe to %.127s", caller.ID, t))
		}
	}
	if len(need.Publish)+len(need.Subscribe)+len(need.Groups)+len(need.Route) == 0 {
		return deny("the method names nothing to allow")
	}
	return nil
}

func matchAny(patterns []string, name string) bool {
	for _, p := range patterns {
		if p == name || strings.HasSuffix(p, "*") && strings.HasPrefix(name, strings.TrimSuffix(p, "*")) {
			return true
		}
	}
	return false
}

// retryTopicOf reports whether topic is the retry topic of one of groups.
func retryTopicOf(groups []string, topic string) bool {
	g, ok := strings.CutPrefix(topic, message.RetryPrefix)
	return ok && matchAny(groups, g)
}

// Caller is the identity of the verified client certificate of the call
// in ctx, if there is one.
func Caller(ctx context.Context) (Identity, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return Identity{}, false
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return Identity{}, false
	}
	return CertIdentity(&info.State)
}

// CertIdentity is the identity the verified client certificate of a TLS
// connection names, if it has one.
func CertIdentity(st *tls.ConnectionState) (Identity, bool) {
	if st == nil || len(st.VerifiedChains) == 0 {
		return Identity{}, false
	}
	ids := Identities(st.VerifiedChains[0][0])
	if len(ids) == 0 {
		return Identity{}, false
	}
	return ids[0], true
}

// UnaryInterceptor enforces the policy on unary calls by table, which
// must name every method the server has.
func (a *ACL) UnaryInterceptor(table map[string]AccessRule) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := a.authorize(ctx, table, info.FullMethod, req); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamInterceptor enforces the policy on server-streaming calls: the
// request is checked as the handler reads it, before anything is sent.
func (a *ACL) StreamInterceptor(table map[string]AccessRule) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if _, ok := table[info.FullMethod]; !ok {
			return a.authorize(ss.Context(), table, info.FullMethod, nil)
		}
		return handler(srv, &checkedStream{ServerStream: ss, check: func(req any) error {
			return a.authorize(ss.Context(), table, info.FullMethod, req)
		}})
	}
}

func (a *ACL) authorize(ctx context.Context, table map[string]AccessRule, method string, req any) error {
	if _, ok := table[method]; !ok {
		return pb.StatusError(codes.PermissionDenied, pb.ErrorReason_NO_PERMISSION, method+" is in no access rule", nil)
	}
	caller, known := Caller(ctx)
	if signed(ctx) {
		var err error
		if caller, err = a.verifySigned(ctx, method, req); err != nil {
			return err
		}
		known = true
	}
	return a.CheckCall(caller, known, table, method, req)
}

// checkedStream checks every request message the handler reads.
type checkedStream struct {
	grpc.ServerStream
	check func(req any) error
}

func (s *checkedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if err := s.check(m); err != nil {
		return &RefusedRequest{Err: err}
	}
	return nil
}

// RefusedRequest is what a checked stream's RecvMsg returns for a request
// read whole that the policy refuses: a handler that answers each request
// on its own (a send stream) refuses that one and reads on; any other
// returns it, and the call ends with Err's status.
type RefusedRequest struct{ Err error }

func (e *RefusedRequest) Error() string              { return e.Err.Error() }
func (e *RefusedRequest) Unwrap() error              { return e.Err }
func (e *RefusedRequest) GRPCStatus() *status.Status { return status.Convert(e.Err) }

// CheckAccessTable reports the methods of the service desc that table has
// no rule for, and rules for methods desc does not have: a server's table
// must match its service exactly (its tests hold it to that).
func CheckAccessTable(desc *grpc.ServiceDesc, table map[string]AccessRule) error {
	var problems []string
	names := map[string]bool{}
	for _, m := range desc.Methods {
		names["/"+desc.ServiceName+"/"+m.MethodName] = true
	}
	for _, s := range desc.Streams {
		names["/"+desc.ServiceName+"/"+s.StreamName] = true
	}
	for n := range names {
		if _, ok := table[n]; !ok {
			problems = append(problems, n+" has no access rule")
		}
	}
	for n := range table {
		if !names[n] {
			problems = append(problems, "a rule for "+n+", which the service does not have")
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return fmt.Errorf("acl: %s", strings.Join(problems, "; "))
	}
	return nil
}

// AdminOnly is the rule of an RPC only admins may make.
func AdminOnly(any) Access { return Access{Admin: true} }

// ServerInterceptors are what every raftmq server runs first, in order:
// the bound on error messages (over everything after it), then, with acl,
// access control by table. A server appends its own after them.
func ServerInterceptors(acl *ACL, table map[string]AccessRule) ([]grpc.UnaryServerInterceptor, []grpc.StreamServerInterceptor) {
	unary := []grpc.UnaryServerInterceptor{BoundErrors}
	stream := []grpc.StreamServerInterceptor{BoundStreamErrors}
	if acl != nil {
		unary = append(unary, acl.UnaryInterceptor(table))
		stream = append(stream, acl.StreamInterceptor(table))
	}
	return unary, stream
}
