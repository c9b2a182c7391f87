#!/usr/bin/env bash
# How long a replica with a large commitlog takes to start, for one or more
# raftmq binaries in turn (A B A B ...).
#
#   deploy/start-time.sh [--duration 40s] [--rounds 3] [--flags "--raft-log commitlog"] [BIN...]
#
# Starts a name server and a 3-replica group as processes on 127.0.0.1 (ports
# 31900-31943) with the first BIN (default: a build of this checkout), fills the
# commitlog with `raftmq bench produce --mode batch` for --duration, then
# stops a follower and starts it again with each BIN in turn, --rounds times,
# dropping the page cache first when it may (root), and prints the times of
# its "broker started" line: store_open (the store's recovery), raft_start
# (Raft's start, the snapshot's restore in it) and total. --flags go to every
# broker. The data, in a temporary directory, is removed on exit.
set -euo pipefail

duration=40s rounds=3 flags=""
bins=()
while [ $# -gt 0 ]; do
	case "$1" in
	--duration) duration=$2; shift 2 ;;
	--rounds) rounds=$2; shift 2 ;;
	--flags) flags=$2; shift 2 ;;
	-h | --help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) bins+=("$1"); shift ;;
	esac
done
d=$(mktemp -d /tmp/raftmq-start-time-XXXXXX)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$d"
}
trap cleanup EXIT
if [ ${#bins[@]} -eq 0 ]; then
	(cd "$(dirname "$0")/.." && go build -o "$d/raftmq" ./cmd/raftmq)
	bins=("$d/raftmq")
fi
bin=${bins[0]}
base=31900
ns="127.0.0.1:$base"
peers="1=127.0.0.1:$((base + 21)),2=127.0.0.1:$((base + 22)),3=127.0.0.1:$((base + 23))"

"$bin" namesrv --grpc "$ns" --gossip "127.0.0.1:$((base + 1))" --http "127.0.0.1:$((base + 2))" >"$d/namesrv.log" 2>&1 &
pids+=($!)
declare -A broker
start_broker() { # BIN ID
	# shellcheck disable=SC2086 # --flags are words
	"$1" broker --group st --id "$2" --dir "$d/b$2" --grpc "127.0.0.1:$((base + 10 + $2))" \
		--raft "127.0.0.1:$((base + 20 + $2))" --peers "$peers" --gossip "127.0.0.1:$((base + 30 + $2))" \
		--join "127.0.0.1:$((base + 1))" --http "127.0.0.1:$((base + 40 + $2))" $flags >>"$d/broker$2.log" 2>&1 &
	broker[$2]=$!
	pids+=($!)
}
started() { grep -c "broker started" "$d/broker$1.log" 2>/dev/null || true; }
for i in 1 2 3; do start_broker "$bin" "$i"; done
for ((w = 0; w < 120; w++)); do # 60 s for a master
	"$bin" topic create --namesrv "$ns" --name big --queues 8 >/dev/null 2>&1 && break
	sleep 0.5
done
[ "$w" -lt 120 ] || { echo "topic create failed for 60 s:"; tail -5 "$d/broker1.log"; exit 1; }
"$bin" bench produce --namesrv "$ns" --topic big --size 1024 --clients 16 --mode batch --batch 64 \
	--duration "$duration" --json >"$d/produce.out" 2>&1 || { tail -5 "$d/produce.out"; exit 1; }
master=$("$bin" cluster list --namesrv "$ns" | awk '$1 == "st" && $3 == "master" {print $2}')
f=3
[ "$master" = 3 ] && f=2
echo "commitlog of replica $f: $(du -sh "$d/b$f/store/commitlog" | cut -f1); produced $(tail -1 "$d/produce.out" | grep -o '"msgs_per_sec":[0-9.]*')"
for ((r = 1; r <= rounds; r++)); do
	for b in "${bins[@]}"; do
		kill "${broker[$f]}"
		wait "${broker[$f]}" 2>/dev/null || true
		n=$(started "$f")
		sync
		cache=kept
		if echo 3 >/proc/sys/vm/drop_caches 2>/dev/null; then cache=dropped; fi
		start_broker "$b" "$f"
		for ((w = 0; $(started "$f") <= n; w++)); do
			[ "$w" -lt 1200 ] || { echo "replica $f did not start within 240 s:"; tail -5 "$d/broker$f.log"; exit 1; }
			sleep 0.2
		done
		line=$(grep "broker started" "$d/broker$f.log" | tail -1)
		echo "round $r, $b (page cache $cache): $(grep -o 'store_open=[^ ]*\|raft_start=[^ ]*\|total=[^ ]*' <<<"$line" | tr '\n' ' ')"
	done
done
