package main

import (
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/raftmq/raftmq/client"
	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/pb"
)

// Security settings of the commands: a node's certificate and gossip key
// (broker, namesrv) and a client's TLS (every command that calls a name
// server or a broker).

// nodeSecurity are a node's flags: its TLS files and its gossip key file.
type nodeSecurity struct {
	TLSCA     string `yaml:"tls-ca"`
	TLSCert   string `yaml:"tls-cert"`
	TLSKey    string `yaml:"tls-key"`
	GossipKey string `yaml:"gossip-key-file"`
	Insecure  bool   `yaml:"insecure-plaintext"`
	ACL       string `yaml:"acl"`
	HTTPTLS   bool   `yaml:"http-tls"`
	// NoRemoting: no RocketMQ remoting protocol on the gRPC port.
	NoRemoting bool `yaml:"no-remoting"`
}

func (s *nodeSecurity) flags(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&s.TLSCA, "tls-ca", "", "PEM file of the cluster's CA: with --tls-cert and --tls-key, every listener takes TLS 1.3 only and nodes check each other's certificates (raftmq certs makes them)")
	fl.StringVar(&s.TLSCert, "tls-cert", "", "PEM file of this node's certificate (it must name this node: raftmq://CLUSTER/broker/GROUP/ID or raftmq://CLUSTER/namesrv/ID)")
	fl.StringVar(&s.TLSKey, "tls-key", "", "PEM file of this node's private key")
	fl.StringVar(&s.GossipKey, "gossip-key-file", "", "file holding the gossip encryption key (16, 24 or 32 bytes, raw or base64): gossip is encrypted and unencrypted gossip refused")
	fl.StringVar(&s.ACL, "acl", "", "access control policy file (YAML, read again when it changes): deny by default, callers named by their client certificates; needs --tls-*")
	fl.BoolVar(&s.HTTPTLS, "http-tls", false, "serve --http (metrics, health) over HTTPS with the node's certificate; needs --tls-*")
	fl.BoolVar(&s.NoRemoting, "no-remoting", false, "do not serve RocketMQ's remoting protocol (its clients) on the gRPC port: RocketMQ's access-key signatures can be replayed and its Go client checks no server certificate, so turn it off where no RocketMQ client needs it")
	fl.BoolVar(&s.Insecure, "insecure-plaintext", false, "serve gRPC and Raft without TLS, or gossip without a key, on addresses other than loopback (a network you trust): without it the node refuses to")
}

// fill sets what the command line left unset from a config file's values.
func (s *nodeSecurity) fill(cmd *cobra.Command, from nodeSecurity) {
	for name, p := range map[string][2]*string{
		"tls-ca": {&s.TLSCA, &from.TLSCA}, "tls-cert": {&s.TLSCert, &from.TLSCert},
		"tls-key": {&s.TLSKey, &from.TLSKey}, "gossip-key-file": {&s.GossipKey, &from.GossipKey}, "acl": {&s.ACL, &from.ACL},
	} {
		if !cmd.Flags().Changed(name) && *p[1] != "" {
			*p[0] = *p[1]
		}
	}
	if !cmd.Flags().Changed("insecure-plaintext") && from.Insecure {
		s.Insecure = true
	}
	if !cmd.Flags().Changed("http-tls") && from.HTTPTLS {
		s.HTTPTLS = true
	}
	if !cmd.Flags().Changed("no-remoting") && from.NoRemoting {
		s.NoRemoting = true
	}
}

// checkPlaintext refuses what would serve plaintext beyond loopback: a
// gRPC or Raft listener without TLS, or gossip without a key, on an
// address other than loopback, unless --insecure-plaintext allows it.
// raftmq dev and local clusters (127.0.0.1) need nothing. (The --http
// endpoint is plaintext either way: metrics and health.)
func (s nodeSecurity) checkPlaintext(tls bool, gossipKey bool, plain, gossip map[string]string) error {
	if s.Insecure {
		return nil
	}
	check := func(secured bool, addrs map[string]string, need string) error {
		for flag, addr := range addrs {
			if addr != "" && !secured && !loopback(addr) {
				return fmt.Errorf("--%s %s is not a loopback address, and without %s it would be plaintext there: "+
					"give the node %s (raftmq certs makes them), or --insecure-plaintext on a network you trust", flag, addr, need, need)
			}
		}
		return nil
	}
	if err := check(tls, plain, "--tls-ca, --tls-cert and --tls-key"); err != nil {
		return err
	}
	return check(gossipKey, gossip, "--gossip-key-file")
}

// loopback reports whether a HOST:PORT listens on loopback only.
func loopback(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// load reads the node's TLS material (nil when no file is named) and
// gossip key (nil when none).
func (s nodeSecurity) load() (*cluster.TLS, []byte, error) {
	var t *cluster.TLS
	if files := (cluster.TLSFiles{CA: s.TLSCA, Cert: s.TLSCert, Key: s.TLSKey}); files.Set() {
		var err error
		if t, err = cluster.LoadTLS(files); err != nil {
			return nil, nil, fmt.Errorf("--tls-ca, --tls-cert, --tls-key: %w", err)
		}
	}
	if s.GossipKey == "" {
		return t, nil, nil
	}
	key, err := readGossipKey(s.GossipKey)
	if err != nil {
		return nil, nil, fmt.Errorf("--gossip-key-file: %w", err)
	}
	return t, key, nil
}

// loadACL loads --acl for the node whose TLS material is t: nil when not
// given. The node's identity is the one its certificate names.
func (s nodeSecurity) loadACL(t *cluster.TLS, log *slog.Logger) (*cluster.ACL, error) {
	if s.ACL == "" {
		return nil, nil
	}
	if t == nil {
		return nil, errors.New("--acl needs --tls-ca, --tls-cert and --tls-key: client certificates name the callers, and access keys sign for the node its certificate names")
	}
	return cluster.LoadACL(s.ACL, t.Self, 2*time.Second, log)
}

// readGossipKey reads a key file: 16, 24 or 32 raw bytes, or their base64
// (what `raftmq certs` writes), surrounding white space ignored.
func readGossipKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if n := len(b); n == 16 || n == 24 || n == 32 {
		return b, nil
	}
	s := strings.TrimSpace(string(b))
	key, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("%s: neither 16, 24 or 32 raw bytes nor base64 of them", path)
	}
	if n := len(key); n != 16 && n != 24 && n != 32 {
		return nil, fmt.Errorf("%s: a key of %d bytes; AES wants 16, 24 or 32", path, n)
	}
	return key, nil
}

// clientTLSFiles are the client commands' --tls-ca, --tls-cert and
// --tls-key (defaults $RAFTMQ_TLS_CA, $RAFTMQ_TLS_CERT, $RAFTMQ_TLS_KEY),
// and their access key: --access-key (default $RAFTMQ_ACCESS_KEY) with
// its secret from --secret-key-file or $RAFTMQ_SECRET_KEY (never a flag's
// value, which other users of the host see in the process list).
var clientTLSFiles struct{ ca, cert, key, accessKey, secretFile string }

func clientTLSFlags(cmd *cobra.Command) {
	fl := cmd.PersistentFlags()
	fl.StringVar(&clientTLSFiles.ca, "tls-ca", os.Getenv("RAFTMQ_TLS_CA"), "PEM file of the cluster's CA: speak TLS to the name servers and brokers, and check that they are the cluster's nodes (default $RAFTMQ_TLS_CA)")
	fl.StringVar(&clientTLSFiles.cert, "tls-cert", os.Getenv("RAFTMQ_TLS_CERT"), "PEM file of this client's certificate, if the cluster identifies clients by certificate (default $RAFTMQ_TLS_CERT)")
	fl.StringVar(&clientTLSFiles.key, "tls-key", os.Getenv("RAFTMQ_TLS_KEY"), "PEM file of this client's key (default $RAFTMQ_TLS_KEY)")
	fl.StringVar(&clientTLSFiles.accessKey, "access-key", os.Getenv("RAFTMQ_ACCESS_KEY"), "sign every request with this access key of the cluster's access control policy, instead of a client certificate; needs --tls-ca and the secret (default $RAFTMQ_ACCESS_KEY)")
	fl.StringVar(&clientTLSFiles.secretFile, "secret-key-file", "", "file holding the access key's secret key (default: the secret in $RAFTMQ_SECRET_KEY)")
}

// clientTLS is the client commands' TLS configuration, nil for plaintext.
func clientTLS() (*tls.Config, error) {
	f := clientTLSFiles
	if f.ca == "" && f.cert == "" && f.key == "" {
		return nil, nil
	}
	cfg, err := client.NodeTLSConfig(f.ca, f.cert, f.key)
	if err != nil {
		return nil, fmt.Errorf("--tls-ca, --tls-cert, --tls-key: %w", err)
	}
	return cfg, nil
}

// clientAccessKey is the access key and its secret, or "" when none.
func clientAccessKey() (id, secret string, err error) {
	f := clientTLSFiles
	if f.accessKey == "" {
		if f.secretFile != "" {
			return "", "", errors.New("--secret-key-file needs --access-key")
		}
		return "", "", nil
	}
	secret = os.Getenv("RAFTMQ_SECRET_KEY")
	if f.secretFile != "" {
		b, err := os.ReadFile(f.secretFile)
		if err != nil {
			return "", "", fmt.Errorf("--secret-key-file: %w", err)
		}
		secret = strings.TrimSpace(string(b))
	}
	if secret == "" {
		return "", "", errors.New("--access-key needs its secret: --secret-key-file or $RAFTMQ_SECRET_KEY")
	}
	if clientTLSFiles.ca == "" {
		return "", "", errors.New("--access-key needs --tls-ca: a signature names the server its certificate names")
	}
	return f.accessKey, secret, nil
}

// clientOptions are the SDK options every client command shares: the name
// servers, the TLS flags and the access key.
func clientOptions(nameServers []string, more ...client.Option) ([]client.Option, error) {
	cfg, err := clientTLS()
	if err != nil {
		return nil, err
	}
	id, secret, err := clientAccessKey()
	if err != nil {
		return nil, err
	}
	opts := []client.Option{client.WithNameServers(nameServers...)}
	if cfg != nil {
		opts = append(opts, client.WithTLS(cfg))
	}
	if id != "" {
		opts = append(opts, client.WithAccessKey(id, secret))
	}
	return append(opts, more...), nil
}

// dialOptions are the transport security and signing of the admin
// commands' calls.
func dialOptions() ([]grpc.DialOption, error) {
	cfg, err := clientTLS()
	if err != nil {
		return nil, err
	}
	id, secret, err := clientAccessKey()
	if err != nil {
		return nil, err
	}
	if cfg == nil {
		return []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, nil
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(cfg))}
	if id != "" {
		k, err := pb.NewAccessKey(id, secret)
		if err != nil {
			return nil, err
		}
		opts = append(opts, k.DialOptions()...)
	}
	return opts, nil
}
