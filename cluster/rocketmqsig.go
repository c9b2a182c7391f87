package cluster

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"sort"

	"google.golang.org/grpc/codes"

	"github.com/raftmq/raftmq/cluster/pb"
)

// RocketMQ's clients sign remoting requests with an access key (ACL 1.0,
// which RocketMQ 5's ACL 2.0 keeps on the wire): the request's extFields
// get AccessKey, and Signature = base64 HMAC-SHA1, keyed by the secret,
// of the values of every other extField in the order of their names,
// concatenated, then the body. Java's client signs SecurityToken among
// them, the Go client leaves it out: both are accepted.
//
// Nothing in it is fresh, no time, no nonce, no target: a signature is
// valid for as long as the secret, for the same request to any node.
// What keeps it from being replayed is TLS, which nodes with access
// control always have; a node logs no signature. RocketMQ's Go client
// does not check the server's certificate (it dials with
// InsecureSkipVerify), so on a network an attacker controls it can be
// fooled into talking to the attacker instead: say so to users
// (README), and prefer raftmq's own access keys, which cover all of that.

// The extFields RocketMQ's signatures use.
const (
	rocketmqAccessKey     = "AccessKey"
	rocketmqSignature     = "Signature"
	rocketmqSecurityToken = "SecurityToken"
)

// RemotingCaller is who sent a RocketMQ remoting request: the identity
// in the connection's verified client certificate (Java clients may give
// one), or else the user whose access key signed the request. It reports
// ok false for a request with neither; an error for a signature that
// does not verify.
func (a *ACL) RemotingCaller(conn *tls.ConnectionState, ext map[string]string, body []byte) (Identity, bool, error) {
	if id, ok := CertIdentity(conn); ok {
		return id, true, nil
	}
	key, signedReq := ext[rocketmqAccessKey]
	if !signedReq {
		return Identity{}, false, nil
	}
	refuse := func(format string, args ...any) (Identity, bool, error) {
		return Identity{}, false, pb.StatusError(codes.Unauthenticated, pb.ErrorReason_NO_PERMISSION, "signed request refused: "+fmt.Sprintf(format, args...), nil)
	}
	sig := ext[rocketmqSignature]
	if len(key) == 0 || len(key) > maxAccessKeyLen || len(sig) == 0 || len(sig) > maxSignatureLen {
		return refuse("want an AccessKey and a Signature, each of bounded length")
	}
	owner, known := a.policy.Load().byKey[key]
	if !known {
		return refuse("access key %.40s is not in the access control policy", key)
	}
	ok := hmac.Equal([]byte(RocketMQSignature(owner.secret, ext, body, true)), []byte(sig))
	if _, token := ext[rocketmqSecurityToken]; !ok && token {
		ok = hmac.Equal([]byte(RocketMQSignature(owner.secret, ext, body, false)), []byte(sig))
	}
	if !ok {
		return refuse("the signature does not match (the secret, or the request, differ from what was signed)")
	}
	return Identity{Cluster: a.self.Cluster, Role: IdentityUser, ID: owner.user}, true, nil
}

// RocketMQSignature signs a remoting request's extFields (the signature
// itself left out; SecurityToken in or out, as withToken says) and body
// with secret, as RocketMQ's clients do.
func RocketMQSignature(secret []byte, ext map[string]string, body []byte, withToken bool) string {
	names := make([]string, 0, len(ext))
	for k := range ext {
		if k == rocketmqSignature || k == rocketmqSecurityToken && !withToken {
			continue
		}
		names = append(names, k)
	}
	sort.Strings(names)
	mac := hmac.New(sha1.New, secret)
	for _, k := range names {
		mac.Write([]byte(ext[k]))
	}
	mac.Write(body)
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// CheckCall is what the interceptors decide for a call to method with
// request req, for a caller found another way (a gateway's): the table's
// rule for method, then Check.
func (a *ACL) CheckCall(caller Identity, known bool, table map[string]AccessRule, method string, req any) error {
	rule, ok := table[method]
	if !ok {
		return pb.StatusError(codes.PermissionDenied, pb.ErrorReason_NO_PERMISSION, method+" is in no access rule", nil)
	}
	return a.Check(caller, known, rule(req))
}
