package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// A private CA for a cluster and the certificates it issues (what
// `raftmq certs` writes): ECDSA P-256 keys, 128-bit random serials,
// NotBefore an hour back (clocks differ), a leaf never outliving its CA.
// Nodes get ServerAuth and ClientAuth (they dial each other), users
// ClientAuth only.

// CA is a certificate authority: its certificate and key.
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// NewCA makes a self-signed CA for cluster, valid for validity.
func NewCA(cluster string, validity time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl, err := certTemplate(validity)
	if err != nil {
		return nil, err
	}
	tmpl.Subject = pkix.Name{CommonName: "raftmq CA " + cluster, Organization: []string{"raftmq"}}
	tmpl.IsCA, tmpl.BasicConstraintsValid, tmpl.MaxPathLenZero = true, true, true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, key: key}, nil
}

// LoadCA reads a CA from its PEM certificate and key.
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, errors.New("certs: CA certificate or key is not PEM")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("certs: CA certificate: %w", err)
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("certs: CA key: %w", err)
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok || !key.PublicKey.Equal(cert.PublicKey) {
		return nil, errors.New("certs: the CA key does not match its certificate")
	}
	return &CA{Cert: cert, key: key}, nil
}

// PEM returns the CA's certificate and key, PEM-encoded.
func (ca *CA) PEM() (certPEM, keyPEM []byte, err error) {
	return encodePair(ca.Cert.Raw, ca.key)
}

// Issue makes a certificate naming id, valid for validity (capped at the
// CA's end) and for hosts (DNS names or IP addresses, for clients that
// check host names).
func (ca *CA) Issue(id Identity, hosts []string, validity time.Duration) (certPEM, keyPEM []byte, err error) {
	if _, ok := parseIdentity(id.URI()); !ok {
		return nil, nil, fmt.Errorf("certs: %+v is not a complete identity", id)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl, err := certTemplate(validity)
	if err != nil {
		return nil, nil, err
	}
	if tmpl.NotAfter.After(ca.Cert.NotAfter) {
		tmpl.NotAfter = ca.Cert.NotAfter
	}
	tmpl.Subject = pkix.Name{CommonName: id.String(), Organization: []string{"raftmq"}}
	tmpl.URIs = append(tmpl.URIs, id.URI())
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	if id.Role == IdentityUser {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, err
	}
	return encodePair(der, key)
}

func certTemplate(validity time.Duration) (*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	return &x509.Certificate{SerialNumber: serial, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(validity)}, nil
}

func encodePair(der []byte, key *ecdsa.PrivateKey) ([]byte, []byte, error) {
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), nil
}

// IssueFiles issues a certificate for id (as Issue) and writes the CA's
// certificate, the certificate and its key as ca.pem, cert.pem and key.pem
// (0600) into dir, which it creates.
func (ca *CA) IssueFiles(dir string, id Identity, hosts []string, validity time.Duration) (TLSFiles, error) {
	cert, key, err := ca.Issue(id, hosts, validity)
	if err != nil {
		return TLSFiles{}, err
	}
	caPEM, _, err := ca.PEM()
	if err != nil {
		return TLSFiles{}, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return TLSFiles{}, err
	}
	f := TLSFiles{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, "cert.pem"), Key: filepath.Join(dir, "key.pem")}
	for path, b := range map[string][]byte{f.CA: caPEM, f.Cert: cert, f.Key: key} {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return TLSFiles{}, err
		}
	}
	return f, nil
}
