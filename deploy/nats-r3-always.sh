#!/usr/bin/env bash
# deploy/nats-r3-always.sh — the peer's synchronous publish with raftmq's promise: NATS JetStream
# 2.15, 3 servers on 127.0.0.1, replicas 3, `sync_interval: always` (fsync on every write), 1 KiB.
#
# ../shared/tools/nats-r3-bench measures NATS's synchronous publish with lazy fsync only (NATS's
# default, which acknowledges a message before any disk holds it). raftmq acknowledges after a
# quorum's fsync, so this measures the same two sync figures with NATS fsyncing every write: the
# comparison of like with like beside the issue's goals against lazy fsync. It prints one line:
#   NATS JetStream R3, 1 KiB, fsync always: sync publish 16 clients N msgs/s; sync publish 1 client p50 T
# It uses the cluster helpers of ../shared/tools/natscluster.sh through deploy/natspeer.sh (which
# installs nats-server and nats with `go install` the first time) and stops its servers when it exits.
# Usage: deploy/nats-r3-always.sh
set -u
# shellcheck source=deploy/natspeer.sh
. "$(dirname "$0")/natspeer.sh" nats-r3-always
start_peer "$T/always" always || exit 1
s16=$(nats_sync_rate "$NURL" 16 60000)
p50=$(nats_sync_p50 "$NURL")
echo "NATS JetStream R3, 1 KiB, fsync always: sync publish 16 clients ${s16:-?} msgs/s; sync publish 1 client p50 ${p50:-?}"
