package cluster

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
)

// TLS between nodes and towards clients. Every node (broker replica, name
// server) holds a certificate from the cluster's CA that names it with a
// URI SAN (Identity): raftmq://CLUSTER/broker/GROUP/ID or
// raftmq://CLUSTER/namesrv/ID; users' client certificates name
// raftmq://CLUSTER/user/NAME. A node accepts a peer only after the chain
// verifies against the CA and the peer's identity is what the link calls
// for (a replica of its own group on the Raft port, say): a certificate
// from the same CA is not enough, or group A's replicas could speak Raft to
// group B (the lesson of CVE-2021-37218/37219 in Nomad and Consul). The
// checks run in VerifyConnection, which Go calls on every handshake,
// resumed sessions included (VerifyPeerCertificate is skipped on those).
// TLS 1.3 only.

// TLSFiles names a node's or a client's PEM files: the CA certificate(s)
// that sign the cluster's certificates, and this side's certificate and
// key.
type TLSFiles struct {
	CA, Cert, Key string
}

// Set reports whether any file is named.
func (f TLSFiles) Set() bool { return f.CA != "" || f.Cert != "" || f.Key != "" }

// TLS is loaded TLS material: this side's certificate and the CA pool.
type TLS struct {
	cert  tls.Certificate
	roots *x509.CertPool
	// Self is the identity this side's certificate names first.
	Self Identity
}

// LoadTLS reads files. The CA and a certificate with its key are all
// required; the certificate must name a raftmq identity.
func LoadTLS(files TLSFiles) (*TLS, error) {
	if files.CA == "" || files.Cert == "" || files.Key == "" {
		return nil, errors.New("tls: the CA file, the certificate and the key are all required")
	}
	pem, err := os.ReadFile(files.CA)
	if err != nil {
		return nil, fmt.Errorf("tls: CA: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("tls: CA %s holds no PEM certificate", files.CA)
	}
	cert, err := tls.LoadX509KeyPair(files.Cert, files.Key)
	if err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	leaf := cert.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("tls: certificate %s: %w", files.Cert, err)
		}
	}
	ids := Identities(leaf)
	if len(ids) == 0 {
		return nil, fmt.Errorf("tls: certificate %s names no raftmq identity (a URI SAN raftmq://CLUSTER/broker/GROUP/ID, /namesrv/ID or /user/NAME; raftmq certs makes them)", files.Cert)
	}
	if _, err := verifyChain(leaf, nil, roots, x509.ExtKeyUsageAny); err != nil {
		return nil, fmt.Errorf("tls: certificate %s is not signed by the CA in %s: %w", files.Cert, files.CA, err)
	}
	return &TLS{cert: cert, roots: roots, Self: ids[0]}, nil
}

// Identity is who a certificate names. Role is IdentityBroker (Group and
// ID set), IdentityNameServer (ID set) or IdentityUser (ID is the user's
// name).
type Identity struct {
	Cluster, Role, Group, ID string
}

// The roles of identities, as their URIs spell them.
const (
	IdentityBroker     = "broker"
	IdentityNameServer = "namesrv"
	IdentityUser       = "user"
)

// URI is the identity as a certificate's URI SAN.
func (i Identity) URI() *url.URL {
	path := "/" + i.Role + "/" + i.ID
	if i.Role == IdentityBroker {
		path = "/" + i.Role + "/" + i.Group + "/" + i.ID
	}
	return &url.URL{Scheme: "raftmq", Host: i.Cluster, Path: path}
}

func (i Identity) String() string { return i.URI().String() }

// Identities reads the raftmq identities a certificate names.
func Identities(leaf *x509.Certificate) []Identity {
	var out []Identity
	for _, u := range leaf.URIs {
		if id, ok := parseIdentity(u); ok {
			out = append(out, id)
		}
	}
	return out
}

func parseIdentity(u *url.URL) (Identity, bool) {
	if u.Scheme != "raftmq" || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return Identity{}, false
	}
	parts := strings.Split(strings.TrimPrefix(u.Path, "/"), "/")
	for _, p := range parts {
		if p == "" {
			return Identity{}, false
		}
	}
	switch {
	case len(parts) == 3 && parts[0] == IdentityBroker:
		return Identity{Cluster: u.Host, Role: IdentityBroker, Group: parts[1], ID: parts[2]}, true
	case len(parts) == 2 && (parts[0] == IdentityNameServer || parts[0] == IdentityUser):
		return Identity{Cluster: u.Host, Role: parts[0], ID: parts[1]}, true
	}
	return Identity{}, false
}

// Want says which peers a link accepts: one identity in the peer's
// certificate must match every field set.
type Want struct {
	Cluster, Role, Group, ID string
}

func (w Want) matches(i Identity) bool {
	return i.Cluster == w.Cluster && (w.Role == "" || i.Role == w.Role) &&
		(w.Group == "" || i.Group == w.Group) && (w.ID == "" || i.ID == w.ID)
}

func (w Want) String() string {
	s := "raftmq://" + w.Cluster
	for _, p := range []string{w.Role, w.Group, w.ID} {
		if p == "" {
			return s + "/*"
		}
		s += "/" + p
	}
	return s
}

// ErrPeerIdentity: the peer's certificate verified but names none of the
// identities the link accepts.
var ErrPeerIdentity = errors.New("tls: peer identity not accepted")

// checkPeer verifies a peer's chain against roots for usage and that it
// names an identity one of wants accepts.
func checkPeer(cs tls.ConnectionState, roots *x509.CertPool, usage x509.ExtKeyUsage, wants []Want) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("tls: the peer presented no certificate")
	}
	leaf, err := verifyChain(cs.PeerCertificates[0], cs.PeerCertificates[1:], roots, usage)
	if err != nil {
		return fmt.Errorf("tls: peer certificate: %w", err)
	}
	ids := Identities(leaf)
	for _, id := range ids {
		for _, w := range wants {
			if w.matches(id) {
				return nil
			}
		}
	}
	return fmt.Errorf("%w: it names %v, this link accepts %v", ErrPeerIdentity, ids, wants)
}

func verifyChain(leaf *x509.Certificate, intermediates []*x509.Certificate, roots *x509.CertPool, usage x509.ExtKeyUsage) (*x509.Certificate, error) {
	pool := x509.NewCertPool()
	for _, c := range intermediates {
		pool.AddCert(c)
	}
	chains, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: pool, KeyUsages: []x509.ExtKeyUsage{usage}})
	if err != nil {
		return nil, err
	}
	return chains[0][0], nil
}

// ServerConfig is a listener's TLS: this side's certificate, TLS 1.3, and
// a client certificate required and checked against wants. With no wants,
// a client certificate is verified when given (for access control) but
// not required: the listener serves clients that authenticate otherwise.
func (t *TLS) ServerConfig(wants ...Want) *tls.Config {
	c := &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{t.cert},
		ClientCAs:    t.roots,
		ClientAuth:   tls.VerifyClientCertIfGiven,
	}
	if len(wants) > 0 {
		c.ClientAuth = tls.RequireAnyClientCert // verified below, with the identity
		c.VerifyConnection = func(cs tls.ConnectionState) error {
			return checkPeer(cs, t.roots, x509.ExtKeyUsageClientAuth, wants)
		}
	}
	return c
}

// ClientConfig is a dialer's TLS: this side's certificate for the server
// to check, TLS 1.3, and the server's certificate checked against the CA
// and wants rather than against a host name (nodes are dialed by the
// addresses they advertise; their certificates name who they are).
func (t *TLS) ClientConfig(wants ...Want) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{t.cert},
		// The default verification checks a host name; VerifyConnection
		// checks the chain and the identity instead, on every handshake.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			return checkPeer(cs, t.roots, x509.ExtKeyUsageServerAuth, wants)
		},
	}
}
