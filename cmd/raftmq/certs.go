package main

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/raftmq/raftmq/cluster"
)

func certsCommand() *cobra.Command {
	var (
		dir, clusterName, brokers, users, hosts string
		namesrvs, days                          int
		force                                   bool
	)
	cmd := &cobra.Command{
		Use:   "certs",
		Short: "make a private CA, the nodes' and users' certificates and a gossip key for a cluster",
		Long: `Make what a secured cluster needs, under --dir:

  ca/ca.pem, ca/ca-key.pem      the cluster's CA (made once, reused after: keep ca-key.pem
                                off the nodes; it only signs)
  ca.pem                        the CA certificate every node and client is given (--tls-ca)
  GROUP-ID/cert.pem,key.pem     a replica's certificate, naming raftmq://CLUSTER/broker/GROUP/ID
  namesrv-ID/cert.pem,key.pem   a name server's, naming raftmq://CLUSTER/namesrv/ID
  user-NAME/cert.pem,key.pem    a client's, naming raftmq://CLUSTER/user/NAME
  gossip.key                    a 32-byte gossip encryption key, base64 (--gossip-key-file)

Keys are ECDSA P-256, written 0600; existing files are kept unless --force.

Example (one group of 3, one name server, an admin user):
  raftmq certs --dir certs --brokers broker-a:3 --namesrvs 1 --users admin --hosts broker-a1,namesrv`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			groups, err := parseGroups(brokers)
			if err != nil {
				return err
			}
			if days < 1 {
				return errors.New("--days must be at least 1")
			}
			return makeCerts(certsPlan{dir: dir, cluster: clusterName, groups: groups, namesrvs: namesrvs,
				users: splitList(users), hosts: splitList(hosts), validity: time.Duration(days) * 24 * time.Hour, force: force})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&dir, "dir", "certs", "directory to write into")
	fl.StringVar(&clusterName, "cluster", "raftmq", "cluster name (the brokers' and name servers' --cluster)")
	fl.StringVar(&brokers, "brokers", "", "broker groups and their replica counts: GROUP:N[,GROUP:N]")
	fl.IntVar(&namesrvs, "namesrvs", 0, "how many name servers (ids 1..n)")
	fl.StringVar(&users, "users", "", "client certificates to make: NAME[,NAME]")
	fl.StringVar(&hosts, "hosts", "", "host names and IPs to put in the nodes' certificates too, for clients that check host names (localhost and 127.0.0.1 always are)")
	fl.IntVar(&days, "days", 365, "validity of the nodes' and users' certificates (the CA's is 10 years)")
	fl.BoolVar(&force, "force", false, "overwrite certificates and keys that exist (never the CA)")
	return cmd
}

type certsPlan struct {
	dir, cluster string
	groups       map[string]int
	namesrvs     int
	users, hosts []string
	validity     time.Duration
	force        bool
}

// parseGroups reads "broker-a:3,broker-b:3".
func parseGroups(s string) (map[string]int, error) {
	out := map[string]int{}
	for _, g := range splitList(s) {
		name, n, ok := strings.Cut(g, ":")
		count, err := strconv.Atoi(n)
		if !ok || err != nil || count < 1 || name == "" {
			return nil, fmt.Errorf("--brokers: %q is not GROUP:N with N >= 1", g)
		}
		out[name] = count
	}
	return out, nil
}

func makeCerts(p certsPlan) error {
	if err := os.MkdirAll(filepath.Join(p.dir, "ca"), 0o700); err != nil {
		return err
	}
	ca, made, err := loadOrMakeCA(p)
	if err != nil {
		return err
	}
	if made {
		fmt.Printf("made CA %s (ca/ca-key.pem signs: keep it off the nodes)\n", ca.Cert.Subject.CommonName)
	}
	caPEM, _, err := ca.PEM()
	if err != nil {
		return err
	}
	if err := writeFile(filepath.Join(p.dir, "ca.pem"), caPEM, 0o644, true); err != nil {
		return err
	}
	hosts := append([]string{"localhost", "127.0.0.1"}, p.hosts...)
	issue := func(name string, id cluster.Identity, hosts []string) error {
		if _, err := os.Stat(filepath.Join(p.dir, name, "cert.pem")); err == nil && !p.force {
			fmt.Printf("%s/: kept (--force makes it again)\n", name)
			return nil
		}
		cert, key, err := ca.Issue(id, hosts, p.validity)
		if err != nil {
			return err
		}
		d := filepath.Join(p.dir, name)
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
		if err := writeFile(filepath.Join(d, "key.pem"), key, 0o600, p.force); err != nil {
			return err
		}
		if err := writeFile(filepath.Join(d, "cert.pem"), cert, 0o644, p.force); err != nil {
			return err
		}
		fmt.Printf("%s/: %s\n", name, id)
		return nil
	}
	for group, n := range p.groups {
		for id := 1; id <= n; id++ {
			if err := issue(fmt.Sprintf("%s-%d", group, id), cluster.Identity{Cluster: p.cluster, Role: cluster.IdentityBroker, Group: group, ID: strconv.Itoa(id)}, hosts); err != nil {
				return err
			}
		}
	}
	for id := 1; id <= p.namesrvs; id++ {
		if err := issue(fmt.Sprintf("namesrv-%d", id), cluster.Identity{Cluster: p.cluster, Role: cluster.IdentityNameServer, ID: strconv.Itoa(id)}, hosts); err != nil {
			return err
		}
	}
	for _, u := range p.users {
		if err := issue("user-"+u, cluster.Identity{Cluster: p.cluster, Role: cluster.IdentityUser, ID: u}, nil); err != nil {
			return err
		}
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return err
	}
	err = writeFile(filepath.Join(p.dir, "gossip.key"), []byte(base64.StdEncoding.EncodeToString(key)+"\n"), 0o600, false)
	if errors.Is(err, fs.ErrExist) {
		err = nil // one key for the cluster: kept
	}
	return err
}

func loadOrMakeCA(p certsPlan) (*cluster.CA, bool, error) {
	certPath, keyPath := filepath.Join(p.dir, "ca", "ca.pem"), filepath.Join(p.dir, "ca", "ca-key.pem")
	certPEM, err1 := os.ReadFile(certPath)
	keyPEM, err2 := os.ReadFile(keyPath)
	if err1 == nil && err2 == nil {
		ca, err := cluster.LoadCA(certPEM, keyPEM)
		return ca, false, err
	}
	if !errors.Is(err1, fs.ErrNotExist) || !errors.Is(err2, fs.ErrNotExist) {
		return nil, false, fmt.Errorf("certs: %s and %s: one is there without the other, or unreadable (%v; %v)", certPath, keyPath, err1, err2)
	}
	ca, err := cluster.NewCA(p.cluster, 10*365*24*time.Hour)
	if err != nil {
		return nil, false, err
	}
	cert, key, err := ca.PEM()
	if err != nil {
		return nil, false, err
	}
	if err := writeFile(keyPath, key, 0o600, false); err != nil {
		return nil, false, err
	}
	return ca, true, writeFile(certPath, cert, 0o644, false)
}

// writeFile writes b to path atomically (a temporary file, fsynced, then
// renamed), refusing to replace a file unless overwrite.
func writeFile(path string, b []byte, perm os.FileMode, overwrite bool) error {
	if !overwrite {
		if _, err := os.Lstat(path); err == nil {
			return fmt.Errorf("certs: %s exists (--force replaces it): %w", path, fs.ErrExist)
		}
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
