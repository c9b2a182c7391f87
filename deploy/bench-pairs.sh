#!/usr/bin/env bash
# deploy/bench-pairs.sh — two builds of raftmq in alternated pairs of runs: what a change does,
# on a machine whose figures swing between runs.
#
# Each pair runs deploy/bench-local.sh once with A and once with B, each run a fresh cluster,
# in the order A B, then B A, then A B, ..., so that neither side always runs first or in the
# same minute. It prints each run's figures as it ends and then, for each figure, the median
# of the pairs' ratios B/A, their range, and in how many pairs B came out ahead. On the VMs of
# broker/README.md one build's sync16 swung 8.7k-11.4k msgs/s between three runs of one hour,
# so a change of 5-10% shows only over ten pairs and more.
#
# Usage: deploy/bench-pairs.sh [--pairs N] [--only NAMES] [--json] A B
#   A, B          each a git revision of this repository (built with go build in a temporary
#                 worktree) or the path of a raftmq executable (a build, or a script that sets
#                 variables and execs one)
#   --pairs N     N pairs (default 10)
#   --only NAMES  the benches of bench-local.sh each run runs (default sync16,sync1; any of
#                 batch, sync16, sync1, consume, e2e)
#   --json        also a final line: one JSON object with every run's figures and the summary
# Compared, for each bench run: msgs/s (higher is ahead; not for e2e, paced at 1000), p50 and
# p99 (lower), and for the produce benches the CPU per message of the brokers and the bench
# together (cpu_all_us, lower), the messages per Raft entry (per_entry, higher), and the means of
# a follower's log write (store_ms, lower: its pwrite and sync) and of the master's AppendEntries
# round trip (ae_ms, lower), from the brokers' histograms: a change to the disk's path shows in
# them through swings of the VM that hide it in msgs/s (2026-12-07, broker/README.md); and the
# brokers' threads' wait for a CPU per message (cpu_wait_us, lower: a change to how they share
# the CPUs shows there).
# Environment: what bench-local.sh reads (RAFTMQ_BENCH_PORT, RAFTMQ_BENCH_BROKER_FLAGS, ...),
# for both sides; RAFTMQ_BENCH_BROKER_FLAGS_A and RAFTMQ_BENCH_BROKER_FLAGS_B add flags to one
# side's brokers (to compare a flag, give the same build as A and B).
# Example: deploy/bench-pairs.sh --pairs 10 main HEAD
# It runs this checkout's deploy/bench-local.sh for every run: bash reads a script as it runs it,
# so an edit to it mid-run breaks the run under way (2026-12-06); edit in another worktree.
set -euo pipefail

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; }
say() { echo "bench-pairs: $*" >&2; }

pairs=10 only=sync16,sync1 json=0
args=()
while [ $# -gt 0 ]; do
	case $1 in
	--pairs) pairs=${2:-}; shift 2 || shift ;;
	--pairs=*) pairs=${1#*=}; shift ;;
	--only) only=${2:-}; shift 2 || shift ;;
	--only=*) only=${1#*=}; shift ;;
	--json) json=1; shift ;;
	-h | --help) usage; exit 0 ;;
	-*) say "unknown argument $1 (see --help)"; exit 2 ;;
	*) args+=("$1"); shift ;;
	esac
done
case $pairs in '' | *[!0-9]* | 0) say "--pairs wants a positive number"; exit 2 ;; esac
[ ${#args[@]} = 2 ] || { say "wants two builds, A and B (see --help)"; exit 2; }

root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
work=$(mktemp -d "${TMPDIR:-/tmp}/raftmq-pairs-XXXXXX")
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	local wt
	for wt in "$work"/wt-*; do
		[ -d "$wt" ] && git -C "$root" worktree remove --force "$wt" >/dev/null 2>&1
	done
	rm -rf "$work"
	exit "$rc"
}
trap cleanup EXIT
trap 'say interrupted; exit 130' INT
trap 'say terminated; exit 143' TERM

# side LABEL ARG → the executable for ARG: a path as given, or a revision built
side() {
	local label=$1 arg=$2 rev
	if [ -f "$arg" ] && [ -x "$arg" ]; then
		echo "$(cd "$(dirname "$arg")" && pwd)/$(basename "$arg")"
		return
	fi
	rev=$(git -C "$root" rev-parse --verify --quiet "$arg^{commit}") || { say "$label: $arg is neither an executable nor a revision"; exit 2; }
	say "$label: building $arg (${rev:0:7})"
	git -C "$root" worktree add --detach --quiet "$work/wt-$label" "$rev"
	go build -C "$work/wt-$label" -o "$work/raftmq-$label" ./cmd/raftmq
	git -C "$root" worktree remove --force "$work/wt-$label"
	echo "$work/raftmq-$label"
}
bin_A=$(side A "${args[0]}")
bin_B=$(side B "${args[1]}")
label_A=${args[0]} label_B=${args[1]}

# the figures compared, each with the direction that is ahead (+ higher, - lower)
IFS=, read -r -a benches <<<"$only"
figs=()
for b in "${benches[@]}"; do
	case $b in
	batch | sync16 | sync1) figs+=("$b.mps +" "$b.p50 -" "$b.p99 -" "$b.cpu_all_us -" "$b.per_entry +" "$b.store_ms -" "$b.ae_ms -" "$b.cpu_wait_us -") ;;
	consume) figs+=("consume.mps +") ;;
	e2e) figs+=("e2e.p50 -" "e2e.p99 -") ;;
	*) say "--only: no bench named '$b' (batch, sync16, sync1, consume, e2e)"; exit 2 ;;
	esac
done

# value JSON KEY → the first figure of per_run's KEY (null when missing)
value() { sed -n "s/.*\"per_run\":.*\"${2//./\\.}\":\[\([^],]*\).*/\1/p" "$1" | head -n 1 | grep . || echo null; }

declare -A V # SIDE.FIGURE → one value a pair, in pair order
run_side() { # SIDE PAIR
	local s=$1 p=$2 bin extra out f line=""
	bin=bin_$s
	extra="RAFTMQ_BENCH_BROKER_FLAGS_$s"
	out="$work/$s-$p.out"
	RAFTMQ_BENCH_BROKER_FLAGS="${RAFTMQ_BENCH_BROKER_FLAGS:-} ${!extra:-}" \
		"$root/deploy/bench-local.sh" --bin "${!bin}" --only "$only" --json >"$out" 2>"$work/$s-$p.log" ||
		{ say "pair $p, $s: bench-local.sh failed:"; tail -n 20 "$work/$s-$p.log" >&2; exit 1; }
	tail -n 1 "$out" >"$out.json"
	for f in "${figs[@]}"; do
		f=${f% *}
		V[$s.$f]="${V[$s.$f]:-} $(value "$out.json" "$f")"
		line="$line $f $(awk -v v="${V[$s.$f]##* }" 'BEGIN {print (v == "null" ? v : sprintf("%.4g", v))}')"
	done
	say "pair $p/$pairs $s:$line"
}
say "A: $label_A ($bin_A); B: $label_B ($bin_B); $pairs pairs of $only"
for ((p = 1; p <= pairs; p++)); do
	if ((p % 2)); then run_side A "$p"; run_side B "$p"; else run_side B "$p"; run_side A "$p"; fi
done

# summary FIGURE DIRECTION: the values, the median of the ratios B/A, their range, B ahead
summary() {
	local a=${V[A.$1]# } b=${V[B.$1]# }
	awk -v f="$1" -v dir="$2" -v a="$a" -v b="$b" -v json="$3" 'BEGIN {
		na = split(a, x, " "); split(b, y, " "); n = 0; ahead = 0
		for (i = 1; i <= na; i++) {
			if (x[i] == "null" || y[i] == "null" || x[i] + 0 == 0) continue
			r[++n] = y[i] / x[i]
			if ((dir == "+" && y[i] > x[i]) || (dir == "-" && y[i] < x[i])) ahead++
		}
		for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (r[j] < r[i]) {t = r[i]; r[i] = r[j]; r[j] = t}
		med = n == 0 ? "null" : (n % 2 ? r[(n + 1) / 2] : (r[n / 2] + r[n / 2 + 1]) / 2)
		if (json) {
			ja = a; gsub(/ /, ",", ja); jb = b; gsub(/ /, ",", jb)
			printf "\"%s\":{\"a\":[%s],\"b\":[%s],\"ratio_median\":%s,\"ratio_min\":%s,\"ratio_max\":%s,\"b_ahead\":%d,\"pairs\":%d}", f, ja, jb, med == "null" ? "null" : sprintf("%.4f", med), n ? sprintf("%.4f", r[1]) : "null", n ? sprintf("%.4f", r[n]) : "null", ahead, n
		} else if (n == 0) {
			printf "  %-20s no pair with both figures\n", f
		} else {
			printf "  %-20s B/A median %.3f (%.3f-%.3f); B ahead in %d of %d pairs (%s is ahead)\n", f, med, r[1], r[n], ahead, n, dir == "+" ? "higher" : "lower"
		}
	}'
}
echo "raftmq in $pairs alternated pairs ($only), A $label_A, B $label_B ($(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg))"
for f in "${figs[@]}"; do summary "${f% *}" "${f#* }" 0; done
if [ "$json" = 1 ]; then
	out=""
	for f in "${figs[@]}"; do out="$out${out:+,}$(summary "${f% *}" "${f#* }" 1)"; done
	echo "{\"a\":\"$label_A\",\"b\":\"$label_B\",\"pairs\":$pairs,\"only\":\"$only\",\"figures\":{$out}}"
fi
