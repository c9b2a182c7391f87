#!/usr/bin/env bash
# Builds the static raftmq binary and the raftmq:dev image from it.
set -euo pipefail
cd "$(dirname "$0")/.."
CGO_ENABLED=0 go build -trimpath -o deploy/raftmq ./cmd/raftmq
docker build -q -t raftmq:dev deploy >/dev/null
echo "built raftmq:dev"
