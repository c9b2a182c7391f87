#!/usr/bin/env bash
# Builds the static raftmq binary and the raftmq:dev image from it, and, when
# deploy/certs is missing, the compose cluster's certificates (a private CA,
# every node's certificate, user "admin", the gossip key) and its access
# control policy (admin may do everything). Kept across builds: delete
# deploy/certs to make new ones.
set -euo pipefail
cd "$(dirname "$0")/.."
CGO_ENABLED=0 go build -trimpath -o deploy/raftmq ./cmd/raftmq
docker build -q -t raftmq:dev deploy >/dev/null
echo "built raftmq:dev"
if [ ! -f deploy/certs/acl.yaml ]; then
	deploy/raftmq certs --dir deploy/certs --brokers broker-a:3,broker-b:3 --namesrvs 2 --users admin \
		--hosts namesrv-1,namesrv-2,broker-a-1,broker-a-2,broker-a-3,broker-b-1,broker-b-2,broker-b-3 >/dev/null
	printf 'users:\n  admin: {admin: true}\n' >deploy/certs/acl.yaml.tmp
	mv deploy/certs/acl.yaml.tmp deploy/certs/acl.yaml
	echo "made deploy/certs (CA, nodes, user admin, gossip key, acl.yaml)"
fi
