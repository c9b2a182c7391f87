package cluster

import (
	"context"
	"crypto/hmac"
	"fmt"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/raftmq/raftmq/cluster/pb"
)

// Requests signed with access keys (the format is pb's: accesskey.go
// there). A signed request names its user by the access key, once the
// signature over the method, this node's identity, the request's digest,
// the timestamp and the nonce verifies with the key's secret; it is then
// refused if its timestamp is further than the policy's accessKeyMaxAge
// from this node's clock, or if its nonce was seen before.
//
// What a node remembers to refuse replays is a window per signing
// session (the nonce's SESSION): the highest counter seen and which of
// the replayWindow counters below it were seen. A counter older than the
// window is refused as a replay too: a client's requests to one node are
// sent in counter order over one connection, so only one held back behind
// replayWindow later ones would be refused. A session is forgotten once
// its last request is 2 × accessKeyMaxAge old: by then every request it
// signed is stale. A key may hold accessKeySessions sessions at once;
// a new one past that is refused (ResourceExhausted) until old ones are
// forgotten, so one key's holder cannot grow a node's memory without end.

// Defaults of the policy's access key settings.
const (
	DefaultAccessKeyMaxAge   = 5 * time.Minute
	DefaultAccessKeySessions = 1024
)

// replayWindow is how many counters below the highest a session's window
// remembers.
const replayWindow = 4096

// Length bounds of the signed request's metadata: anything longer is not
// one (and is not echoed).
const (
	maxAccessKeyLen = 128
	maxNonceLen     = 64
	maxSignatureLen = 64
	maxTimestampLen = 20
)

// ACLAccessKey is one access key of a user, RocketMQ's pair.
type ACLAccessKey struct {
	AccessKey string `yaml:"accessKey"`
	SecretKey string `yaml:"secretKey"`
}

// keyOwner is what the policy says of an access key.
type keyOwner struct {
	user   string
	secret []byte
}

// indexAccessKeys checks the policy's access keys and indexes them.
func (p *ACLPolicy) indexAccessKeys() error {
	p.byKey = map[string]keyOwner{}
	for name, u := range p.Users {
		for _, k := range u.AccessKeys {
			switch {
			case k.AccessKey == "" || len(k.AccessKey) > maxAccessKeyLen:
				return fmt.Errorf("user %s: an access key of %d bytes: want 1 to %d", name, len(k.AccessKey), maxAccessKeyLen)
			case len(k.SecretKey) < pb.MinSecretLen:
				return fmt.Errorf("user %s: access key %s has a secret key of %d bytes: want at least %d", name, k.AccessKey, len(k.SecretKey), pb.MinSecretLen)
			}
			if o, dup := p.byKey[k.AccessKey]; dup {
				return fmt.Errorf("access key %s is both user %s's and user %s's", k.AccessKey, o.user, name)
			}
			p.byKey[k.AccessKey] = keyOwner{user: name, secret: []byte(k.SecretKey)}
		}
	}
	switch {
	case p.AccessKeyMaxAge == 0:
		p.AccessKeyMaxAge = DefaultAccessKeyMaxAge
	case p.AccessKeyMaxAge < time.Second:
		return fmt.Errorf("accessKeyMaxAge %v: want at least 1s", p.AccessKeyMaxAge)
	}
	switch {
	case p.AccessKeySessions == 0:
		p.AccessKeySessions = DefaultAccessKeySessions
	case p.AccessKeySessions < 0:
		return fmt.Errorf("accessKeySessions %d: want a positive number", p.AccessKeySessions)
	}
	return nil
}

// signed reports whether the call in ctx is signed with an access key.
func signed(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	return len(md.Get(pb.MetaAccessKey)) > 0
}

// verifySigned checks the signature of the call in ctx to method with
// request req and returns the user the access key names.
func (a *ACL) verifySigned(ctx context.Context, method string, req any) (Identity, error) {
	refuse := func(format string, args ...any) (Identity, error) {
		return Identity{}, pb.StatusError(codes.Unauthenticated, pb.ErrorReason_NO_PERMISSION, "signed request refused: "+fmt.Sprintf(format, args...), nil)
	}
	md, _ := metadata.FromIncomingContext(ctx)
	one := func(key string, max int) (string, bool) {
		v := md.Get(key)
		return firstOf(v), len(v) == 1 && len(v[0]) > 0 && len(v[0]) <= max
	}
	key, ok1 := one(pb.MetaAccessKey, maxAccessKeyLen)
	ts, ok2 := one(pb.MetaTimestamp, maxTimestampLen)
	nonce, ok3 := one(pb.MetaNonce, maxNonceLen)
	sig, ok4 := one(pb.MetaSignature, maxSignatureLen)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return refuse("want one each of %s, %s, %s and %s, each of bounded length", pb.MetaAccessKey, pb.MetaTimestamp, pb.MetaNonce, pb.MetaSignature)
	}
	p := a.policy.Load()
	owner, known := p.byKey[key]
	if !known {
		return refuse("access key %.40s is not in the access control policy", key)
	}
	millis, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return refuse("timestamp %.20q is not unix milliseconds", ts)
	}
	if skew := a.now().Sub(time.UnixMilli(millis)); skew > p.AccessKeyMaxAge || skew < -p.AccessKeyMaxAge {
		return refuse("stale: signed %v from this node's clock, limit %v", skew.Round(time.Millisecond), p.AccessKeyMaxAge)
	}
	session, counter, err := pb.ParseNonce(nonce)
	if err != nil {
		return refuse("%v", err)
	}
	digest, err := pb.BodyDigest(req)
	if err != nil {
		return refuse("%v", err)
	}
	want := pb.Signature(owner.secret, key, method, a.resource, digest, ts, nonce)
	if !hmac.Equal([]byte(want), []byte(sig)) {
		return refuse("the signature does not match (the secret, the method, this node %s, the request, the timestamp or the nonce differ from what was signed)", a.resource)
	}
	switch a.replays.admit(key, session, counter, a.now(), p) {
	case admitReplayed:
		return refuse("replayed: nonce %s was seen before", nonce)
	case admitFull:
		return Identity{}, pb.StatusError(codes.ResourceExhausted, pb.ErrorReason_NO_PERMISSION,
			fmt.Sprintf("access key %s has %d signing sessions open on this node, the policy's accessKeySessions", key, p.AccessKeySessions), nil)
	}
	return Identity{Cluster: a.self.Cluster, Role: IdentityUser, ID: owner.user}, nil
}

func firstOf(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

// replays is what a node remembers of signed requests: per access key,
// per session, a window of counters.
type replays struct {
	mu   sync.Mutex
	keys map[string]map[[16]byte]*sessionWindow
}

type sessionWindow struct {
	highest uint64
	seen    [replayWindow / 64]uint64 // bit c % replayWindow: counter c seen (for c within the window)
	last    time.Time
}

type admission int

const (
	admitted admission = iota
	admitReplayed
	admitFull
)

func (r *replays) admit(key string, session [16]byte, counter uint64, now time.Time, p *ACLPolicy) admission {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.keys == nil {
		r.keys = map[string]map[[16]byte]*sessionWindow{}
	}
	sessions := r.keys[key]
	if sessions == nil {
		sessions = map[[16]byte]*sessionWindow{}
		r.keys[key] = sessions
	}
	w := sessions[session]
	if w == nil {
		if len(sessions) >= p.AccessKeySessions {
			return admitFull
		}
		w = &sessionWindow{}
		sessions[session] = w
	}
	if !w.admit(counter) {
		return admitReplayed
	}
	w.last = now
	return admitted
}

func (w *sessionWindow) admit(c uint64) bool {
	bit := func(c uint64) (int, uint64) { i := c % replayWindow; return int(i / 64), 1 << (i % 64) }
	switch {
	case c > w.highest:
		if c-w.highest >= replayWindow {
			w.seen = [replayWindow / 64]uint64{}
		} else {
			for x := w.highest + 1; x < c; x++ {
				i, m := bit(x)
				w.seen[i] &^= m
			}
		}
		w.highest = c
	case w.highest-c >= replayWindow:
		return false
	default:
		if i, m := bit(c); w.seen[i]&m != 0 {
			return false
		}
	}
	i, m := bit(c)
	w.seen[i] |= m
	return true
}

// forget drops sessions whose last request is older than 2 × maxAge, and
// the state of keys no longer in the policy.
func (r *replays) forget(now time.Time, p *ACLPolicy) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for key, sessions := range r.keys {
		if _, ok := p.byKey[key]; !ok {
			delete(r.keys, key)
			continue
		}
		for s, w := range sessions {
			if now.Sub(w.last) > 2*p.AccessKeyMaxAge {
				delete(sessions, s)
			}
		}
		if len(sessions) == 0 {
			delete(r.keys, key)
		}
	}
}

func (r *replays) sessions(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.keys[key])
}
