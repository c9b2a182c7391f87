package cluster

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"sort"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// signLikeRocketMQ signs as RocketMQ's clients do, written from their
// description (RocketMQ's acl module, AclClientRPCHook and AclUtils), not from
// RocketMQSignature: AccessKey joins the fields, the values are
// concatenated in the order of their names, the body follows, HMAC-SHA1,
// base64. The Go client leaves SecurityToken out, Java's puts it in.
func signLikeRocketMQ(key, secret string, ext map[string]string, body []byte, java bool) map[string]string {
	out := map[string]string{"AccessKey": key}
	for k, v := range ext {
		out[k] = v
	}
	var names []string
	for k := range out {
		if k != "SecurityToken" || java {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	var content strings.Builder
	for _, k := range names {
		content.WriteString(out[k])
	}
	mac := hmac.New(sha1.New, []byte(secret))
	mac.Write([]byte(content.String()))
	mac.Write(body)
	out["Signature"] = base64.StdEncoding.EncodeToString(mac.Sum(nil))
	return out
}

func rocketmqACL(t *testing.T) *ACL {
	t.Helper()
	a, err := LoadACL(writePolicy(t, t.TempDir(), "users:\n  app: {publish: [orders], accessKeys: [{accessKey: app-key, secretKey: app-secret-0123456789}]}\n"),
		replica("c1", "broker-a", "1"), time.Hour, quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	return a
}

// A request signed as RocketMQ's Go or Java client signs it names the
// key's user; one signed otherwise is refused (Unauthenticated) and one
// not signed names nobody.
func TestRemotingCallerFromRocketMQSignatures(t *testing.T) {
	a := rocketmqACL(t)
	ext := map[string]string{"b": "orders", "e": "3", "k": "false"}
	body := []byte("a body")
	app := Identity{Cluster: "c1", Role: IdentityUser, ID: "app"}
	withToken := map[string]string{"b": "orders", "SecurityToken": "tok"}
	for name, signed := range map[string]map[string]string{
		"the Go client's":                   signLikeRocketMQ("app-key", "app-secret-0123456789", ext, body, false),
		"Java's, with a token":              signLikeRocketMQ("app-key", "app-secret-0123456789", withToken, body, true),
		"the Go client's, with a token out": signLikeRocketMQ("app-key", "app-secret-0123456789", withToken, body, false),
	} {
		id, ok, err := a.RemotingCaller(nil, signed, body)
		if err != nil || !ok || id != app {
			t.Errorf("%s signature: %v %v %v, want user app", name, id, ok, err)
		}
	}
	if _, ok, err := a.RemotingCaller(nil, ext, body); ok || err != nil {
		t.Fatalf("an unsigned request: %v %v, want nobody and no error", ok, err)
	}
	good := signLikeRocketMQ("app-key", "app-secret-0123456789", ext, body, false)
	tampered := func(f func(m map[string]string)) map[string]string {
		m := map[string]string{}
		for k, v := range good {
			m[k] = v
		}
		f(m)
		return m
	}
	for name, tc := range map[string]struct {
		ext  map[string]string
		body []byte
		want string
	}{
		"a wrong secret":   {signLikeRocketMQ("app-key", "wrong-secret-0123456789", ext, body, false), body, "does not match"},
		"an unknown key":   {signLikeRocketMQ("who", "app-secret-0123456789", ext, body, false), body, "not in the access control policy"},
		"a field changed":  {tampered(func(m map[string]string) { m["b"] = "audit" }), body, "does not match"},
		"a field added":    {tampered(func(m map[string]string) { m["z"] = "1" }), body, "does not match"},
		"the body changed": {good, []byte("another body"), "does not match"},
		"no signature":     {tampered(func(m map[string]string) { delete(m, "Signature") }), body, "want an AccessKey and a Signature"},
		"a huge signature": {tampered(func(m map[string]string) { m["Signature"] = strings.Repeat("A", 1000) }), body, "bounded length"},
	} {
		_, ok, err := a.RemotingCaller(nil, tc.ext, tc.body)
		if ok || status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v %v, want Unauthenticated saying %q", name, ok, err, tc.want)
		}
	}
}

// A verified client certificate names the caller before any signature.
func TestRemotingCallerFromACertificate(t *testing.T) {
	a := rocketmqACL(t)
	ca, err := NewCA("c1", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.IssueFiles(t.TempDir(), Identity{Cluster: "c1", Role: IdentityUser, ID: "app"}, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	tl, err := LoadTLS(leaf)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(tl.cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	state := &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{cert}}}
	id, ok, err := a.RemotingCaller(state, map[string]string{"AccessKey": "who", "Signature": "x"}, nil)
	if err != nil || !ok || id.ID != "app" || id.Role != IdentityUser {
		t.Fatalf("%v %v %v, want the certificate's user", id, ok, err)
	}
}
