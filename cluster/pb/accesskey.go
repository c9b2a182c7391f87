package pb

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/proto"
)

// Requests signed with an access key: the contract between the client
// that signs (AccessKey, below) and the server that checks (cluster's
// access control). A signed request carries four metadata entries; the
// signature is HMAC-SHA256, keyed by the secret, over StringToSign:
//
//	RAFTMQ1-HMAC-SHA256
//	<access key>
//	<method>          the full gRPC method, /raftmq.Broker/SendMessage
//	<resource>        the identity in the server's certificate, raftmq://CLUSTER/broker/GROUP/ID
//	<body digest>     hex SHA-256 of the request, marshalled deterministically
//	<timestamp>       unix milliseconds when signed
//	<nonce>           SESSION.COUNTER: 32 hex digits, then a decimal counter from 1
//
// Binding the signature to the server's verified identity means a request
// captured on its way to one node cannot be replayed to another; the
// timestamp bounds how long a server must remember what it has seen, and
// the nonce (one session per AccessKey value, a counter per request) lets
// it remember that in a small window per session rather than a set of
// every nonce. Access keys need TLS, which authenticates the server whose
// identity is signed: RequireTransportSecurity is true.
//
// The body digest is over proto.MarshalOptions{Deterministic: true} on
// both sides, not over the bytes on the wire, which the server's codec
// does not keep. The two agree for one schema; a client newer than the
// server agrees as long as its new fields are numbered above the server's
// (unknown fields are marshalled after the known ones), which is how
// fields are added to raftmq.proto.
const (
	MetaAccessKey = "x-raftmq-access-key"
	MetaTimestamp = "x-raftmq-timestamp"
	MetaNonce     = "x-raftmq-nonce"
	MetaSignature = "x-raftmq-signature"

	signatureScheme = "RAFTMQ1-HMAC-SHA256"
)

// MinSecretLen is the shortest secret key a server accepts: 16 bytes.
const MinSecretLen = 16

// StringToSign is what a signature covers.
func StringToSign(accessKey, method, resource string, bodyDigest [sha256.Size]byte, timestamp, nonce string) []byte {
	return []byte(strings.Join([]string{signatureScheme, accessKey, method, resource, hex.EncodeToString(bodyDigest[:]), timestamp, nonce}, "\n"))
}

// Signature is base64 of HMAC-SHA256(secret, StringToSign(...)).
func Signature(secret []byte, accessKey, method, resource string, bodyDigest [sha256.Size]byte, timestamp, nonce string) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write(StringToSign(accessKey, method, resource, bodyDigest, timestamp, nonce))
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// BodyDigest is the SHA-256 of m marshalled deterministically; of no
// bytes when m is nil.
func BodyDigest(m any) ([sha256.Size]byte, error) {
	if m == nil {
		return sha256.Sum256(nil), nil
	}
	pm, ok := m.(proto.Message)
	if !ok {
		return [sha256.Size]byte{}, fmt.Errorf("accesskey: %T is not a protobuf message", m)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(pm)
	if err != nil {
		return [sha256.Size]byte{}, fmt.Errorf("accesskey: %w", err)
	}
	return sha256.Sum256(b), nil
}

// ServerResource is the resource a request to the server at the other end
// of a TLS connection signs: the first raftmq identity in its verified
// certificate, as a URI without anything but scheme, host and path.
func ServerResource(info credentials.AuthInfo) (string, error) {
	tlsInfo, ok := info.(credentials.TLSInfo)
	if !ok || len(tlsInfo.State.PeerCertificates) == 0 {
		return "", errors.New("accesskey: the connection has no verified server certificate (access keys need TLS)")
	}
	for _, u := range tlsInfo.State.PeerCertificates[0].URIs {
		if u.Scheme == "raftmq" {
			return ResourceOf(u), nil
		}
	}
	return "", errors.New("accesskey: the server's certificate names no raftmq identity")
}

// ResourceOf is a raftmq identity URI in the form signatures use.
func ResourceOf(u *url.URL) string {
	return (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}).String()
}

// FormatNonce and ParseNonce write and read SESSION.COUNTER.
func FormatNonce(session [16]byte, counter uint64) string {
	return hex.EncodeToString(session[:]) + "." + strconv.FormatUint(counter, 10)
}

// ParseNonce reads a nonce FormatNonce wrote.
func ParseNonce(s string) (session [16]byte, counter uint64, err error) {
	h, c, ok := strings.Cut(s, ".")
	if !ok || len(h) != 2*len(session) || len(c) == 0 || len(c) > 20 {
		return session, 0, fmt.Errorf("nonce %.80q is not SESSION.COUNTER", s)
	}
	if _, err := hex.Decode(session[:], []byte(h)); err != nil {
		return session, 0, fmt.Errorf("nonce %.80q: session is not hex", s)
	}
	if counter, err = strconv.ParseUint(c, 10, 64); err != nil || counter == 0 {
		return session, 0, fmt.Errorf("nonce %.80q: counter is not a positive number", s)
	}
	return session, counter, nil
}

// AccessKey signs every request of a connection with an access key and
// its secret. Give its DialOptions to grpc.NewClient, over TLS.
type AccessKey struct {
	id      string
	secret  []byte
	session [16]byte
	counter atomic.Uint64
	now     func() time.Time
}

// NewAccessKey is a signer for key id with secret.
func NewAccessKey(id, secret string) (*AccessKey, error) {
	if id == "" || secret == "" {
		return nil, errors.New("accesskey: both the access key and its secret are needed")
	}
	k := &AccessKey{id: id, secret: []byte(secret), now: time.Now}
	if _, err := rand.Read(k.session[:]); err != nil {
		return nil, fmt.Errorf("accesskey: %w", err)
	}
	return k, nil
}

// ID is the access key.
func (k *AccessKey) ID() string { return k.id }

// DialOptions sign every call on a connection: the unary interceptor
// digests the request, the per-call credentials sign it once the
// connection (and so the server's identity) is known.
func (k *AccessKey) DialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithPerRPCCredentials(k), grpc.WithChainUnaryInterceptor(k.unary)}
}

type digestKey struct{}

func (k *AccessKey) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	d, err := BodyDigest(req)
	if err != nil {
		return err
	}
	return invoker(context.WithValue(ctx, digestKey{}, d), method, req, reply, cc, opts...)
}

// WithStreamRequest is the context to open a server-streaming call in
// whose one request is req: a stream's headers, and so its signature, go
// out before its first message, so the signer must be told the request.
func WithStreamRequest(ctx context.Context, req any) (context.Context, error) {
	d, err := BodyDigest(req)
	if err != nil {
		return ctx, err
	}
	return context.WithValue(ctx, digestKey{}, d), nil
}

// GetRequestMetadata signs one call (credentials.PerRPCCredentials).
func (k *AccessKey) GetRequestMetadata(ctx context.Context, _ ...string) (map[string]string, error) {
	ri, ok := credentials.RequestInfoFromContext(ctx)
	if !ok {
		return nil, errors.New("accesskey: no request info")
	}
	resource, err := ServerResource(ri.AuthInfo)
	if err != nil {
		return nil, err
	}
	digest, ok := ctx.Value(digestKey{}).([sha256.Size]byte)
	if !ok {
		digest = sha256.Sum256(nil) // a stream opened without WithStreamRequest: the server will refuse it
	}
	ts := strconv.FormatInt(k.now().UnixMilli(), 10)
	nonce := FormatNonce(k.session, k.counter.Add(1))
	return map[string]string{
		MetaAccessKey: k.id,
		MetaTimestamp: ts,
		MetaNonce:     nonce,
		MetaSignature: Signature(k.secret, k.id, ri.Method, resource, digest, ts, nonce),
	}, nil
}

// RequireTransportSecurity is true: the signed resource is the server's
// certificate identity.
func (k *AccessKey) RequireTransportSecurity() bool { return true }
