#!/usr/bin/env bash
# deploy/nats-r3-cpu.sh — the CPU the peer spends a synchronous message: NATS JetStream 2.15, 3
# servers on 127.0.0.1, replicas 3, 1 KiB, 16 synchronous publishers (`nats bench js pub sync`, as
# ../shared/tools/nats-r3-bench runs it), with lazy fsync (NATS's default) and with
# `sync_interval: always`.
#
# deploy/bench-local.sh reports raftmq's CPU a message over its four processes (the three brokers
# and the bench: NAME.cpu_all_us); this is the same figure for NATS, so that the two can be held
# side by side: whether a broker is bound by the CPU it spends or by its rounds' critical path
# (broker/README.md, 2026-12-07, twenty-fifth sitting). For each mode and run it prints one line:
#   NATS sync16 MODE run R: N msgs/s; servers S µs a message, with the bench A µs; CPUs busy C
# the servers' CPU from /proc/PID/stat before and after the bench, the bench's from its rusage
# (bash's `times` in a subshell that only runs it). An idle cluster spends a few ticks in seconds:
# nothing is subtracted. It uses ../shared/tools/natscluster.sh through deploy/natspeer.sh (which
# installs nats-server and nats with `go install` the first time) and stops its servers when it exits.
# Usage: deploy/nats-r3-cpu.sh [RUNS]   (default 3 runs of each mode)
set -u
runs=${1:-3}
case "$runs" in '' | *[!0-9]* | 0) echo "usage: deploy/nats-r3-cpu.sh [RUNS]" >&2; exit 2 ;; esac
# shellcheck source=deploy/natspeer.sh
. "$(dirname "$0")/natspeer.sh" nats-r3-cpu
msgs=60000
hz=$(getconf CLK_TCK)

# ticks PID...: the user and system clock ticks the processes have used.
ticks() {
	local sum=0 p f
	for p in "$@"; do
		read -ra f <"/proc/$p/stat" || return 1
		sum=$((sum + f[13] + f[14]))
	done
	echo "$sum"
}

# bench_cpu CMD...: runs CMD with its output in $T/out, then prints the CPU seconds it used
# (its children's user and system time, as `times` reports them in a subshell that ran only it).
bench_cpu() {
	(
		"$@" >"$T/out" 2>&1
		times >"$T/times" # not in a pipeline: that would run it in a fork with no children
		tail -1 "$T/times" | awk '{
			split($0, t, /[ \t]+/); s = 0
			for (i = 1; i <= 2; i++) { split(t[i], m, "m"); sub(/s$/, "", m[2]); s += m[1] * 60 + m[2] }
			printf "%.3f\n", s }'
	)
}

for mode in lazy always; do
	for run in $(seq 1 "$runs"); do
		start_peer "$T/$mode$run" "$mode" || exit 1 # SYNC: "always", or lazy for anything else
		timeout 10 "$NATSBIN/nats" -s "$NURL" stream rm benchstream -f >/dev/null 2>&1
		before=$(ticks "${NPIDS[@]}") || { echo "nats-r3-cpu: a NATS server stopped before the bench" >&2; exit 1; }
		t0=$(date +%s.%N)
		client=$(bench_cpu timeout 120 "$NATSBIN/nats" -s "$NURL" bench js pub sync bench.s --create --replicas 3 \
			--storage file --purge --clients 16 --msgs "$msgs" --size 1KiB --no-progress)
		t1=$(date +%s.%N)
		after=$(ticks "${NPIDS[@]}") || { echo "nats-r3-cpu: a NATS server stopped during the bench" >&2; exit 1; }
		rate=$(grep -E 'aggregated stats|publisher stats' "$T/out" | tail -1 | grep -oE '[0-9,]+ msgs/sec' | tr -d ', msgs/sec')
		awk -v m="$mode" -v r="$run" -v rate="${rate:-?}" -v s=$((after - before)) -v hz="$hz" -v c="$client" -v n="$msgs" -v t0="$t0" -v t1="$t1" 'BEGIN {
			srv = s / hz; w = t1 - t0
			printf "NATS sync16 %s run %d: %s msgs/s; servers %.1f µs a message, with the bench %.1f µs; CPUs busy %.2f\n", m, r, rate, srv * 1e6 / n, (srv + c) * 1e6 / n, (srv + c) / w }'
		stop_nats
		rm -rf "${T:?}/$mode$run" # each run's stream: 180 MB on disk
	done
done
