package client

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
)

// WithTLS makes the client speak TLS to the name servers and brokers, with
// cfg (NodeTLSConfig makes one for a raftmq cluster's CA). Default:
// plaintext, which a secured cluster refuses.
func WithTLS(cfg *tls.Config) Option { return func(o *options) { o.tls = cfg } }

// WithAccessKey makes the client sign every request with an access key
// and its secret (HMAC-SHA256 over the method, the server's certificate
// identity, the request, a timestamp and a nonce), for clusters whose
// access control policy gives the key's user its rights. It needs WithTLS.
func WithAccessKey(accessKey, secretKey string) Option {
	return func(o *options) { o.accessKey = [2]string{accessKey, secretKey} }
}

// NodeTLSConfig is a TLS 1.3 configuration for a raftmq cluster: it trusts
// the CA certificates in caFile and accepts a server only when its
// certificate, signed by them, names a raftmq node (a URI SAN
// raftmq://CLUSTER/broker/GROUP/ID or raftmq://CLUSTER/namesrv/ID, as
// `raftmq certs` issues them): nodes are dialed at the addresses they
// advertise, so it checks who they are rather than a host name. certFile
// and keyFile, when given, are the client's certificate, for brokers that
// identify users by certificate.
func NodeTLSConfig(caFile, certFile, keyFile string) (*tls.Config, error) {
	if caFile == "" {
		return nil, errors.New("client: TLS needs the cluster's CA certificate file")
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("client: TLS CA: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("client: TLS CA file %s holds no PEM certificate", caFile)
	}
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS13,
		// The default check is of a host name; VerifyConnection checks
		// the chain and the node identity instead, on every handshake.
		InsecureSkipVerify: true,
		VerifyConnection:   func(cs tls.ConnectionState) error { return verifyNode(cs, roots) },
	}
	switch {
	case certFile != "" && keyFile != "":
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("client: TLS certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	case certFile != "" || keyFile != "":
		return nil, errors.New("client: a TLS client certificate needs both its certificate and key files")
	}
	return cfg, nil
}

func verifyNode(cs tls.ConnectionState, roots *x509.CertPool) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("client: the server presented no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	leaf := cs.PeerCertificates[0]
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return fmt.Errorf("client: server certificate: %w", err)
	}
	for _, u := range leaf.URIs {
		if isNodeURI(u) {
			return nil
		}
	}
	return fmt.Errorf("client: the server's certificate (%s) names no raftmq node", leaf.Subject)
}

// isNodeURI reports whether u names a broker replica or a name server.
func isNodeURI(u *url.URL) bool {
	if u.Scheme != "raftmq" || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return false
	}
	parts := strings.Split(strings.TrimPrefix(u.Path, "/"), "/")
	for _, p := range parts {
		if p == "" {
			return false
		}
	}
	return len(parts) == 3 && parts[0] == "broker" || len(parts) == 2 && parts[0] == "namesrv"
}
