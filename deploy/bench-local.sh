#!/usr/bin/env bash
# deploy/bench-local.sh — raftmq measured the way a new user runs it, next to NATS JetStream.
#
# Builds raftmq (go build -o into a temp dir), starts 1 `raftmq namesrv` and the 3 replicas of
# one broker group as separate processes on 127.0.0.1 (ports 29900-29943), each replica with its
# own data dir on disk and the default flags (an entry is applied and acked once fsynced on a majority),
# waits for a master, creates topic `bench` with 8 queues and runs, each as its own
# `raftmq bench ... --json`, 1 KiB bodies:
#   batch   bench produce --clients 16 --mode batch --batch 64 --duration 15s
#   sync16  bench produce --clients 16 --mode sync --duration 15s
#   sync1   bench produce --clients 1 --mode sync --duration 10s            (its p50)
#   consume bench consume --clients 4 --count N: a new group reads from the first offset the
#           N messages the three runs above counted as sent (it stops on the count; the
#           harness caps it at 300 s)
#   e2e     bench e2e --clients 4 --mode sync --rate 1000 --duration 10s: send to receive at a low
#           load (1000 msgs/s, a tenth of sync16's), a push consumer reading as the producers send
#   long    with --long: bench produce as batch, for 120 s (sustained), after consume
#   timers  with --timers: bench timers --rate 10000 --timer-senders 32 --delay 5s --spread 1s --duration 15s
#           --clients 8 --mode batch --batch 64: 10k timer messages/s scheduled on topic
#           bench-timers while 8 producers send batches to bench; how late the timers fire
#           (store time - due, p50/p99/max), and the ordinary sends' rate while they fire,
#           against the same 8 producers' rate without timers (bench produce, just before)
#   host    before each run's cluster starts, `raftmq bench host` in the run's data dir: this
#           machine's loopback round trip between two processes and 1 KiB fdatasync (alone and
#           three at once), and the floor of a lone sync send (2 round trips + 1 sync), which
#           sync1's p50 is reported against: figures of different sittings' machines compare
#           through it (the same build's sync1 p50 was 0.58 ms on one VM, 1.26 ms on another);
#           and the floor with the group's replicas on this one disk (2 round trips + the later
#           of 2 syncs started together: a commit waits for the master's sync and a follower's)
# then reads each broker's peak RSS (VmHWM) and GOMAXPROCS (its /metrics) and stops the cluster. A fresh cluster for each run.
# VmHWM counts the resident pages of the commitlog segments the broker maps (1 GiB each by
# default), so the harness also samples each broker's anonymous RSS (heap, stacks) every 0.5 s
# while the benches run and reports its peak.
#
# Usage: deploy/bench-local.sh [--runs N] [--only NAMES] [--bin PATH] [--long] [--timers] [--nats] [--nats-always] [--rocketmq] [--profile | --profile-bench NAME] [--trace-bench NAME] [--json] [--keep] [--tls]
#   --runs N   N runs (default 1); the figures reported are the medians
#   --only NAMES  just these of batch, sync16, sync1, consume and e2e (a comma-separated list;
#              consume reads what the produce benches run before it sent, so it needs one); the
#              figures of the others print as ?
#   --bin PATH run this raftmq executable (a build, or a script that execs one with variables
#              set) instead of building the checkout; the figures are labelled with PATH
#   --long     add the 120 s batched publish
#   --timers   add the timer bench (and create topic bench-timers)
#   --nats     after each raftmq run, ../shared/tools/nats-r3-bench (3-server JetStream R3 on
#              127.0.0.1; run once more when a figure of it comes back as ?) and the ratios
#              raftmq/NATS; with N runs, the median of the N paired ratios
#   --nats-always  after each raftmq run (and NATS's, with --nats), deploy/nats-r3-always.sh: NATS's
#              sync publish, 16 clients and 1 client's p50, with fsync on every write, as raftmq
#              acknowledges (nats-r3-bench measures them with lazy fsync only), and the ratios
#   --rocketmq after raftmq's own benches, the same four with RocketMQ's official Go client
#              (e2e/rocketmq/rmqbench, over the remoting protocol) on the same cluster and topic,
#              and the ratios official/raftmq SDK (its consume reads the same backlog)
#   --profile  a 10 s CPU profile of the master during the batched publish, saved as
#              ./raftmq-master-cpu-runR.pprof (the brokers run with --pprof)
#   --profile-bench NAME  the same during bench NAME instead (sync16, sync1, consume, rmq.sync16,
#              ...), saved as ./raftmq-master-cpu-NAME-runR.pprof
#   --trace-bench NAME  execution traces during the produce bench NAME (sync16 or sync1): 1 s of
#              each broker's, 5 s in (the brokers run with --pprof), and the whole of the bench's
#              own (raftmq bench --trace), saved as ./raftmq-trace-NAME-runR-ROLE.trace (ROLE
#              master1, follower2, bench, ...); at the end, with go on the PATH, where a round of
#              sends spent its time in each process (deploy/roundtrace, built then: nothing is
#              compiled while benches run)
#   --json     also a final line: one JSON object with all figures
# Each produce bench also reports, from the master's /metrics, its CPU time per message stored
# and the messages per Raft entry (group commit), as NAME.cpu_us and NAME.per_entry, and the
# CPU time per message of the three brokers and the bench process together (the brokers'
# /metrics and the bench's cpu_seconds), as NAME.cpu_all_us, and of the three brokers alone, as
# NAME.cpu_brokers_us (beside NATS's servers in deploy/nats-r3-cpu.sh), and the thread switches per message
# of the three brokers' threads (/proc/PID/task/*/status), as NAME.switches, their threads' wait for a
# CPU per message (runnable, not running: /proc/PID/task/*/schedstat), as NAME.cpu_wait_us, the share
# of the bench's time in which some task on the machine waited for a CPU (/proc/pressure/cpu), as
# NAME.cpu_some, and where a send's
# time went, means over the run in ms: NAME.client_ms (the bench's, send to answer),
# NAME.server_ms (the master's send service), NAME.commit_ms (Apply to applied), NAME.ae_ms
# (the master's AppendEntries round trip; with spare followers, the default for a group on one
# host, it counts a spare's wait for its interval too, so it no longer bounds the commit),
# NAME.follower_ae_ms (a follower's handling of one) and NAME.store_ms (its log write), from the
# brokers' /metrics histograms.
#   --keep     keep the temp dir (binary, logs, data) and print its path
#   --tls      a secured cluster: certificates from `raftmq certs`, TLS 1.3 on every gRPC
#              listener, mutual TLS on the Raft transport, encrypted gossip, and the bench
#              clients over TLS (what TLS costs: run once with and once without)
# Environment: RAFTMQ_BENCH_PORT (default 29900) moves the port range; RAFTMQ_BENCH_BROKER_FLAGS
# adds flags to every broker (e.g. "--preallocate-ahead off" to compare the zeroer);
# RAFTMQ_BENCH_BROKER_ENV sets variables in every broker's environment (e.g. "GOGC=200");
# RAFTMQ_BENCH_FLAGS adds flags to every raftmq bench (e.g. "--producer-ids=false" to compare
# deduplication by unique key alone with producer ids and sequences).
# Every process it starts is stopped when it exits, also on failure and Ctrl-C.
set -euo pipefail

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; }

runs=1 long=0 timers=0 nats=0 nats_always=0 rocketmq=0 profile=0 profile_bench=batch json=0 keep=0 tls=0
trace_bench="" traces=() # traces: the saved traces, each ROLE=PATH
only=batch,sync16,sync1,consume,e2e given_bin=""
master="" prof="" run_no=1
while [ $# -gt 0 ]; do
	case $1 in
	--runs) runs=${2:-}; shift 2 || shift ;;
	--runs=*) runs=${1#*=}; shift ;;
	--only) only=${2:-}; shift 2 || shift ;;
	--only=*) only=${1#*=}; shift ;;
	--bin) given_bin=${2:-}; shift 2 || shift ;;
	--bin=*) given_bin=${1#*=}; shift ;;
	--long) long=1; shift ;;
	--timers) timers=1; shift ;;
	--nats) nats=1; shift ;;
	--nats-always) nats_always=1; shift ;;
	--rocketmq) rocketmq=1; shift ;;
	--profile) profile=1; shift ;;
	--profile-bench) profile=1 profile_bench=${2:-}; shift 2 || shift ;;
	--trace-bench) trace_bench=${2:-}; shift 2 || shift ;;
	--json) json=1; shift ;;
	--keep) keep=1; shift ;;
	--tls) tls=1; shift ;;
	-h | --help) usage; exit 0 ;;
	*) echo "bench-local: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done
case $runs in '' | *[!0-9]* | 0) echo "bench-local: --runs wants a positive number" >&2; exit 2 ;; esac
IFS=, read -r -a only_list <<<"$only"
[ ${#only_list[@]} -gt 0 ] || { echo "bench-local: --only wants a list of batch, sync16, sync1, consume, e2e" >&2; exit 2; }
for i in "${only_list[@]}"; do
	case $i in batch | sync16 | sync1 | consume | e2e) ;; *) echo "bench-local: --only: no bench named '$i' (batch, sync16, sync1, consume, e2e)" >&2; exit 2 ;; esac
done
if [[ ",$only," == *,consume,* && ! ",$only," =~ ,(batch|sync16|sync1), ]]; then
	echo "bench-local: --only consume reads what a produce bench sent: add batch, sync16 or sync1" >&2
	exit 2
fi
case $trace_bench in '' | sync16 | sync1) ;; *) echo "bench-local: --trace-bench wants sync16 or sync1 (the rounds of sync sends)" >&2; exit 2 ;; esac
# wanted NAME: whether --only lists the bench NAME
wanted() { [[ ",$only," == *",$1,"* ]]; }
if [ -n "$given_bin" ]; then
	[ -x "$given_bin" ] || { echo "bench-local: --bin: $given_bin is not an executable" >&2; exit 2; }
	given_bin=$(cd "$(dirname "$given_bin")" && pwd)/$(basename "$given_bin")
fi
if [ "$rocketmq" = 1 ] && [ "$tls" = 1 ]; then
	echo "bench-local: --rocketmq and --tls: the remoting protocol is off on nodes with TLS" >&2
	exit 2
fi

root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
natsbench="$root/../shared/tools/nats-r3-bench"
if [ "$nats" = 1 ] && [ ! -x "$natsbench" ]; then
	echo "bench-local: --nats: $natsbench is not there" >&2
	exit 2
fi
natsalways="$root/deploy/nats-r3-always.sh"
if [ "$nats_always" = 1 ] && [ ! -r "$root/../shared/tools/natscluster.sh" ]; then
	echo "bench-local: --nats-always: $root/../shared/tools/natscluster.sh is not there" >&2
	exit 2
fi
commit=$(git -C "$root" rev-parse --short HEAD)
git -C "$root" diff --quiet HEAD -- 2>/dev/null || commit="$commit-dirty"
[ -z "$given_bin" ] || commit=$given_bin

base=${RAFTMQ_BENCH_PORT:-29900}
read -r -a broker_extra <<<"${RAFTMQ_BENCH_BROKER_FLAGS:-}"
read -r -a bench_extra <<<"${RAFTMQ_BENCH_FLAGS:-}"
read -r -a broker_env <<<"${RAFTMQ_BENCH_BROKER_ENV:-}"
if [ "$profile" = 1 ] || [ -n "$trace_bench" ]; then broker_extra+=(--pprof); fi
ns_addr=127.0.0.1:$base
peers="1=127.0.0.1:$((base + 21)),2=127.0.0.1:$((base + 22)),3=127.0.0.1:$((base + 23))"

say() { echo "bench-local: $*" >&2; }

# ---- processes and cleanup -------------------------------------------------------------
work=""
pids=()      # namesrv and brokers of the current cluster
dead=""      # set by alive
child=""     # the foreground command being waited for (run in the background so traps fire)
natspid=""   # nats-r3-bench or nats-r3-always.sh, in its own session
profpid=""   # the profile download
tracepids=() # the brokers' trace downloads

# tree PID...: the PIDs and all their descendants
tree() {
	local p c
	for p in "$@"; do
		echo "$p"
		# shellcheck disable=SC2013 # the file is one line of PIDs
		for c in $(cat /proc/"$p"/task/*/children 2>/dev/null); do tree "$c"; done
	done
}

# stop SECONDS PID...: SIGTERM, then SIGKILL what is left after SECONDS
stop() {
	local secs=$1 p left i
	shift
	[ $# -gt 0 ] || return 0
	kill -TERM "$@" 2>/dev/null || true
	for ((i = 0; i < secs * 5; i++)); do
		left=0
		for p in "$@"; do kill -0 "$p" 2>/dev/null && left=1; done
		[ "$left" = 0 ] && break
		sleep 0.2
	done
	for p in "$@"; do
		if kill -0 "$p" 2>/dev/null; then
			say "process $p did not stop in ${secs}s: SIGKILL"
			kill -KILL "$p" 2>/dev/null || true
		fi
	done
	wait "$@" 2>/dev/null || true
}

stop_cluster() {
	[ ${#pids[@]} -gt 0 ] || return 0
	stop 20 "${pids[@]}"
	pids=()
}

# stop_nats: the script first (its EXIT trap stops its servers and removes its dir), then
# whatever it left (the nats client under timeout runs in a process group of its own).
stop_nats() {
	[ -n "$natspid" ] || return 0
	local all
	mapfile -t all < <(tree "$natspid")
	stop 15 "$natspid"
	stop 10 "${all[@]:1}"
	natspid=""
}

cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	local all
	if [ -n "$child" ]; then
		mapfile -t all < <(tree "$child")
		stop 10 "${all[@]}"
	fi
	if [ -n "$profpid" ]; then
		mapfile -t all < <(tree "$profpid")
		stop 5 "${all[@]}"
	fi
	stop_nats
	stop_cluster
	if [ -n "$work" ]; then
		if [ "$keep" = 1 ]; then say "kept $work"; else rm -rf "$work"; fi
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'say interrupted; exit 130' INT
trap 'say terminated; exit 143' TERM

# run OUT ERR CMD...: runs CMD in the background, its stdout to the file OUT and its
# stderr to ERR (- for both: this script's), and waits, so that Ctrl-C and SIGTERM are
# handled at once, not when CMD ends; fails if a process of the cluster exits meanwhile (a
# client would go on counting failed sends, or wait for messages, until its end).
run() {
	local out=$1 err=$2 rc=0 all
	shift 2
	if [ "$out" = - ]; then "$@" & else "$@" >"$out" 2>"$err" & fi
	child=$!
	while kill -0 "$child" 2>/dev/null; do
		if ! alive; then
			mapfile -t all < <(tree "$child")
			stop 10 "${all[@]}"
			child=""
			fail "$dead exited during: ${*##*/}"
		fi
		sample_anon
		sleep 0.5
	done
	wait "$child" || rc=$?
	child=""
	return "$rc"
}

# alive: whether every process of the cluster runs; if not, $dead names the first that does not
alive() {
	local i
	for i in "${!pids[@]}"; do
		if ! kill -0 "${pids[$i]}" 2>/dev/null; then
			dead=$([ "$i" = 0 ] && echo namesrv || echo "broker $i")
			return 1
		fi
	done
}

# sample_anon: raise anon[ID] to broker ID's RssAnon (kB) if higher (bash builtins only: no fork)
declare -A anon
sample_anon() {
	local i k v _
	for i in 1 2 3; do
		if [ -z "${pids[$i]:-}" ] || [ ! -r "/proc/${pids[$i]}/status" ]; then continue; fi
		while read -r k v _; do
			if [ "$k" = RssAnon: ]; then
				if [ "$v" -gt "${anon[$i]:-0}" ]; then anon[$i]=$v; fi
				break
			fi
		done 2>/dev/null <"/proc/${pids[$i]}/status" || true
	done
}

fail() {
	say "FAILED: $*"
	local f
	for f in "$work"/run*/*.log; do
		[ -f "$f" ] || continue
		echo "--- last lines of $f" >&2
		tail -n 5 "$f" >&2
	done
	exit 1
}

# ---- small helpers ---------------------------------------------------------------------
jget() { sed -n "s/.*\"$2\":\([^,}]*\).*/\1/p" "$1" | tail -n 1; }      # FILE KEY → value
median() { printf '%s\n' "$@" | awk 'NF && $1 != "null" {print $1}' | sort -g |
	awk '{a[NR] = $1} END {if (NR == 0) print "null"; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (a == "null" || b == "null" || a == "" || b == "" || b + 0 == 0) print "null"; else printf "%.3f\n", a / b}'; }
fmt() { awk -v v="$1" -v d="${2:-0}" 'BEGIN {if (v == "null" || v == "") print "?"; else printf "%.*f\n", d, v}'; }
kfmt() { awk -v v="$1" 'BEGIN {if (v == "null" || v == "") print "?"; else if (v >= 10000) printf "%.1fk\n", v / 1000; else printf "%.0f\n", v}'; }
xfmt() { awk -v v="$1" 'BEGIN {if (v == "null" || v == "") print "?"; else printf "%.2fx\n", v}'; }
pct() { awk -v v="$1" 'BEGIN {if (v == "null" || v == "") print "?"; else printf "%.0f%%\n", v * 100}'; }
# to_ms 310.22us → 0.31022 (nats prints us, µs, ms or s)
to_ms() { awk -v s="$1" 'BEGIN {
	if (s ~ /(us|µs)$/) {sub(/(us|µs)$/, "", s); print s / 1000} else if (s ~ /ms$/) {sub(/ms$/, "", s); print s + 0}
	else if (s ~ /[0-9]s$/) {sub(/s$/, "", s); print s * 1000} else print "null"}'; }
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

declare -A V # figure name → space-separated values, one per run

add() { V[$1]="${V[$1]:-} ${2:-null}"; }

# ---- the cluster -----------------------------------------------------------------------
start_cluster() { # DIR
	local d=$1 i p used
	# Brokers delete their oldest segments while the disk is over 75% full
	# (storage's RetentionDiskRatio), counted over the whole filesystem, as
	# statfs has it: a run that crosses that loses the backlog consume reads.
	used=$(df -P "${d%/*}" | awk 'NR==2 {printf "%d", 100 - 100 * $4 / $2}')
	[ "${used:-0}" -lt 65 ] || say "  warning: the disk is ${used}% full; past 75% the brokers delete their oldest segments, and consume may then wait for messages that are gone"
	for p in $base $((base + 1)) $((base + 2)) $((base + 11)) $((base + 12)) $((base + 13)) \
		$((base + 21)) $((base + 22)) $((base + 23)) $((base + 31)) $((base + 32)) $((base + 33)) \
		$((base + 41)) $((base + 42)) $((base + 43)); do
		port_busy "$p" && fail "port $p on 127.0.0.1 is taken (set RAFTMQ_BENCH_PORT to move the range)"
	done
	mkdir -p "$d"
	local -a ns_sec=() b_sec=()
	if [ "$tls" = 1 ]; then
		"$bin" certs --dir "$d/certs" --brokers bench-a:3 --namesrvs 1 >/dev/null || fail "raftmq certs"
		export RAFTMQ_TLS_CA="$d/certs/ca.pem" # every client command speaks TLS
		ns_sec=(--tls-ca "$d/certs/ca.pem" --gossip-key-file "$d/certs/gossip.key"
			--tls-cert "$d/certs/namesrv-1/cert.pem" --tls-key "$d/certs/namesrv-1/key.pem")
	fi
	"$bin" namesrv --grpc "$ns_addr" --gossip "127.0.0.1:$((base + 1))" --http "127.0.0.1:$((base + 2))" \
		"${ns_sec[@]}" >"$d/namesrv.log" 2>&1 &
	pids+=($!)
	for i in 1 2 3; do
		[ "$tls" = 1 ] && b_sec=(--tls-ca "$d/certs/ca.pem" --gossip-key-file "$d/certs/gossip.key"
			--tls-cert "$d/certs/bench-a-$i/cert.pem" --tls-key "$d/certs/bench-a-$i/key.pem")
		env ${broker_env[@]+"${broker_env[@]}"} "$bin" broker --group bench-a --id "$i" --dir "$d/b$i" \
			--grpc "127.0.0.1:$((base + 10 + i))" --raft "127.0.0.1:$((base + 20 + i))" --peers "$peers" \
			--gossip "127.0.0.1:$((base + 30 + i))" --join "127.0.0.1:$((base + 1))" \
			--http "127.0.0.1:$((base + 40 + i))" "${b_sec[@]}" "${broker_extra[@]}" >"$d/broker$i.log" 2>&1 &
		pids+=($!)
	done
}



# wait_master → the master's replica id, within 60 s
wait_master() {
	local deadline=$((SECONDS + 60)) m
	while [ $SECONDS -lt $deadline ]; do
		alive || fail "$dead exited while the cluster started"
		m=$("$bin" cluster list --namesrv "$ns_addr" 2>/dev/null | awk '$1 == "bench-a" && $3 == "master" {print $2}' || true)
		if [ -n "$m" ]; then
			echo "$m"
			return 0
		fi
		sleep 0.5
	done
	fail "no master in 60 s"
}

create_topic() { # [NAME]
	local deadline=$((SECONDS + 30)) name=${1:-bench}
	until "$bin" topic create --namesrv "$ns_addr" --name "$name" --queues 8 >/dev/null 2>&1; do
		[ $SECONDS -lt $deadline ] || fail "topic create $name failed for 30 s"
		sleep 0.5
	done
	# the name server learns the topic by gossip: wait until its route has a master
	until "$bin" topic route --namesrv "$ns_addr" --name "$name" 2>/dev/null | grep -q master; do
		[ $SECONDS -lt $deadline ] || fail "topic $name has no route after 30 s"
		sleep 0.5
	done
}

# metrics_page ID: broker ID's /metrics page (its --http port); fails without an answer
metrics_page() { curl -s --max-time 5 "http://127.0.0.1:$((base + 40 + $1))/metrics" 2>/dev/null; }

# master_stats: from the master's /metrics (replica $master), "CPU-SECONDS ENTRY-MESSAGES
# ENTRIES MESSAGES-SENT": its process CPU time, the messages and the send entries it put
# through Raft, and the messages its send service stored; "" without curl or an answer
master_stats() {
	command -v curl >/dev/null || return 0
	metrics_page "$master" | awk '
		$1 == "process_cpu_seconds_total" {cpu = $2}
		$1 ~ /^raftmq_raft_entry_messages_sum/ {sum = $2}
		$1 ~ /^raftmq_raft_entry_messages_count/ {n = $2}
		$1 ~ /^raftmq_send_messages_total/ {sent = $2}
		END {if (cpu != "") printf "%s %s %s %s\n", cpu, sum + 0, n + 0, sent + 0}'
}

# broker_metric ID NAME: the value of metric NAME (unlabelled) on broker ID's /metrics; ""
# without curl or an answer
broker_metric() {
	command -v curl >/dev/null || return 0
	metrics_page "$1" |
		awk -v m="$2" '$1 == m {print $2}' || true
}

# brokers_cpu: the CPU seconds all three brokers spent so far (their /metrics'
# process_cpu_seconds_total, summed); "" without curl or an answer from each
brokers_cpu() {
	local i sum=0 c
	for i in 1 2 3; do
		c=$(broker_metric "$i" process_cpu_seconds_total)
		[ -n "$c" ] || return 0
		sum=$(awk -v s="$sum" -v c="$c" 'BEGIN {printf "%.3f", s + c}')
	done
	echo "$sum"
}

# all_cpu NAME JSON BEFORE AFTER BROKERS-BEFORE BROKERS-AFTER: adds NAME.cpu_all_us, the CPU
# microseconds per message stored of the three brokers and the bench process together
# (cpu_seconds in its JSON summary), the four processes that share the machine, and
# NAME.cpu_brokers_us, the three brokers' alone
all_cpu() {
	local name=$1 b=$3 a=$4 bb=$5 ba=$6 client
	client=$(jget "$2" cpu_seconds)
	if [ -z "$b" ] || [ -z "$a" ] || [ -z "$bb" ] || [ -z "$ba" ] || [ -z "$client" ]; then
		add "$name.cpu_all_us" null
		add "$name.cpu_brokers_us" null
		return 0
	fi
	local per_msg
	read -ra per_msg < <(awk -v b="$b" -v a="$a" -v bb="$bb" -v ba="$ba" -v c="$client" 'BEGIN {
		split(b, x); split(a, y); m = y[4] - x[4]
		if (m > 0) printf "%.2f %.2f\n", (ba - bb + c) * 1e6 / m, (ba - bb) * 1e6 / m; else print "null null" }')
	add "$name.cpu_all_us" "${per_msg[0]}"
	add "$name.cpu_brokers_us" "${per_msg[1]}"
}

# round_stats: "SEND-S SENDS COMMIT-S COMMITS AE-MS AES FAE-MS FAES STORE-MS STORES", the
# sums and counts so far of the histograms a send's time is read from: the master's send
# service (raftmq_send_seconds) and Apply to applied (raftmq_raft_commit_seconds), its
# AppendEntries round trips to the followers (raft_replication_appendEntries_rpc, ms), the
# followers' handling of them (raft_rpc_appendEntries, ms) and their log writes within it
# (raft_rpc_appendEntries_storeLogs, ms); "" without curl or an answer from each broker
round_stats() {
	command -v curl >/dev/null || return 0
	local i role page all=""
	for i in 1 2 3; do
		role=f
		[ "$i" = "$master" ] && role=m
		page=$(metrics_page "$i") || return 0
		[ -n "$page" ] || return 0
		all+=$(awk -v role="$role" '!/^#/ {print role, $0}' <<<"$page")$'\n'
	done
	awk '
		{name = $2; sub(/\{.*/, "", name)}
		$1 == "m" && name == "raftmq_send_seconds_sum" {v[1] += $3}
		$1 == "m" && name == "raftmq_send_seconds_count" {v[2] += $3}
		$1 == "m" && name == "raftmq_raft_commit_seconds_sum" {v[3] += $3}
		$1 == "m" && name == "raftmq_raft_commit_seconds_count" {v[4] += $3}
		$1 == "m" && name == "raft_replication_appendEntries_rpc_sum" {v[5] += $3}
		$1 == "m" && name == "raft_replication_appendEntries_rpc_count" {v[6] += $3}
		$1 == "f" && name == "raft_rpc_appendEntries_sum" {v[7] += $3}
		$1 == "f" && name == "raft_rpc_appendEntries_count" {v[8] += $3}
		$1 == "f" && name == "raft_rpc_appendEntries_storeLogs_sum" {v[9] += $3}
		$1 == "f" && name == "raft_rpc_appendEntries_storeLogs_count" {v[10] += $3}
		END {for (i = 1; i <= 10; i++) printf "%s%s", v[i] + 0, (i < 10 ? " " : "\n")}' <<<"$all"
}

# round_keys: where a send's time went, after the bench's own client_ms, in round_stats'
# order (a sum and a count each; the first two in seconds, the rest in ms)
round_keys=(server_ms commit_ms ae_ms follower_ae_ms store_ms)

# round NAME JSON BEFORE AFTER: adds where the bench's sends spent their time, means in ms over
# the run (two round_stats): NAME.client_ms (the bench's own mean, send to answer),
# NAME.server_ms (the master's send service), NAME.commit_ms (Apply to applied),
# NAME.ae_ms (the master's AppendEntries round trip), NAME.follower_ae_ms (a follower's
# handling of one; the empty ones that carry only the commit index count too) and
# NAME.store_ms (its log write). Each holds the next, but for the empty AppendEntries; what
# lies between two is hops: client to server and back, the batcher before Raft, the
# transport's wire and wake-ups around a follower's handling.
round() {
	local name=$1 b=$3 a=$4 k i=1
	add "$name.client_ms" "$(jget "$2" mean_ms)"
	[ -n "$b" ] && [ -n "$a" ] || b="" a="" # a broker did not answer: every figure null
	for k in "${round_keys[@]}"; do
		add "$name.$k" "$(awk -v b="$b" -v a="$a" -v i="$i" -v scale="$([ "$i" -le 3 ] && echo 1000 || echo 1)" 'BEGIN {
			split(b, x); split(a, y); n = y[i + 1] - x[i + 1]
			if (n > 0) printf "%.3f", (y[i] - x[i]) * scale / n; else print "null"}')"
		i=$((i + 2))
	done
}

# round_line NAME last|median: round's figures of NAME, of the last run or the medians, as a line
round_line() {
	local name=$1 k
	local -A f
	for k in client_ms "${round_keys[@]}"; do
		if [ "$2" = last ]; then f[$k]=${V[$name.$k]##* }; else f[$k]=$(g "$name.$k"); fi
	done
	echo "client $(fmt "${f[client_ms]}" 2), server $(fmt "${f[server_ms]}" 2), commit $(fmt "${f[commit_ms]}" 2) ms;" \
		"AppendEntries round trip $(fmt "${f[ae_ms]}" 2), a follower's handling $(fmt "${f[follower_ae_ms]}" 2), its log write $(fmt "${f[store_ms]}" 2) ms"
}

# brokers_tasks FILE: every thread's /proc/PID/task/TID/FILE of the three brokers, one after another
brokers_tasks() {
	local i
	for i in 1 2 3; do cat /proc/"${pids[$i]}"/task/*/"$1" 2>/dev/null; done
}

# brokers_switches: the thread switches (voluntary and not) all three brokers' threads made so far
brokers_switches() {
	brokers_tasks status | awk '$1 ~ /^(non)?voluntary_ctxt_switches:$/ {n += $2} END {print n + 0}'
}

# brokers_cpu_wait: how long all three brokers' threads have waited so far, runnable, for a CPU,
# in µs (the second field of schedstat, ns); empty without schedstat
brokers_cpu_wait() {
	brokers_tasks schedstat | awk '{n += $2; seen = 1} END {if (seen) printf "%.0f\n", n / 1000}'
}

# cpu_pressure: the machine's "some" CPU pressure so far, µs (/proc/pressure/cpu: the time in
# which at least one task waited for a CPU), then the clock's µs; empty without PSI
cpu_pressure() {
	local t
	t=$(awk '$1 == "some" {for (i = 2; i <= NF; i++) if ($i ~ /^total=/) {sub(/^total=/, "", $i); print $i}}' /proc/pressure/cpu 2>/dev/null)
	[ -n "$t" ] && echo "$t $(($(date +%s%N) / 1000))"
}

# per_message KEY DIGITS BEFORE AFTER COUNT-BEFORE COUNT-AFTER: adds KEY, how much a count of
# the brokers' grew per message stored (two master_stats, two readings of the count)
per_message() {
	add "$1" "$(awk -v d="$2" -v b="$3" -v a="$4" -v cb="$5" -v ca="$6" 'BEGIN {split(b, x); split(a, y); m = y[4] - x[4]; if (m > 0 && cb != "" && ca != "") printf "%.*f", d, (ca - cb) / m; else print "null"}')"
}

# cpu_some NAME PSI-BEFORE PSI-AFTER: adds NAME.cpu_some, the share of the bench's time in which
# some task on the machine waited for a CPU (two cpu_pressure)
cpu_some() {
	add "$1.cpu_some" "$(awk -v b="$2" -v a="$3" 'BEGIN {split(b, x); split(a, y); if (a != "" && b != "" && y[2] > x[2]) printf "%.3f", (y[1] - x[1]) / (y[2] - x[2]); else print "null"}')"
}

# master_deltas NAME BEFORE AFTER: adds NAME.cpu_us (the master's CPU microseconds per
# message stored) and NAME.per_entry (messages per send entry) from two master_stats
master_deltas() {
	local name=$1 b=$2 a=$3
	if [ -z "$b" ] || [ -z "$a" ]; then
		add "$name.cpu_us" null
		add "$name.per_entry" null
		return 0
	fi
	add "$name.cpu_us" "$(awk -v b="$b" -v a="$a" 'BEGIN {split(b, x); split(a, y); m = y[4] - x[4]; if (m > 0) printf "%.2f", (y[1] - x[1]) * 1e6 / m; else print "null"}')"
	add "$name.per_entry" "$(awk -v b="$b" -v a="$a" 'BEGIN {split(b, x); split(a, y); n = y[3] - x[3]; if (n > 0) printf "%.2f", (y[2] - x[2]) / n; else print "null"}')"
}

# bench DIR NAME TIMEOUT ARGS...: one `raftmq bench ARGS --json` (for a NAME rmq.*, one
# `rmqbench ARGS`: the official RocketMQ client); its JSON line lands in DIR/NAME.json; a
# produce bench also adds the master's CPU per message and messages per entry
bench() {
	local d=$1 name=$2 tmo=$3 before after brokers_before brokers_after sw_before sw_after rounds_before rounds_after
	local wait_before wait_after psi_before psi_after
	shift 3
	local -a tool=("$bin" bench) flags=(--json ${bench_extra[@]+"${bench_extra[@]}"})
	[[ $name == rmq.* ]] && tool=("$rmqbin") flags=()
	say "  $name: ${tool[*]##*/} $*"
	[ "$profile" = 1 ] && [ "$name" = "$profile_bench" ] && start_profile "$d"
	local ntraces=${#traces[@]} # those of earlier runs
	if [ "$name" = "$trace_bench" ]; then
		traces+=("bench=$PWD/raftmq-trace-$name-run$run_no-bench.trace")
		flags+=(--trace "${traces[-1]#bench=}")
		start_traces "$name"
	fi
	before=$(master_stats)
	brokers_before=$(brokers_cpu)
	sw_before=$(brokers_switches)
	wait_before=$(brokers_cpu_wait)
	psi_before=$(cpu_pressure)
	rounds_before=$(round_stats)
	run "$d/$name.out" "$d/$name.log" timeout "$tmo" "${tool[@]}" "$@" --namesrv "$ns_addr" --topic bench "${flags[@]}" ||
		fail "$name: ${tool[*]##*/} exited $?"
	after=$(master_stats)
	brokers_after=$(brokers_cpu)
	sw_after=$(brokers_switches)
	wait_after=$(brokers_cpu_wait)
	psi_after=$(cpu_pressure)
	rounds_after=$(round_stats)
	if [ -n "$profpid" ]; then
		wait "$profpid" && [ -s "$prof" ] && say "  CPU profile of the master during $name: $prof (go tool pprof -top $prof)"
		profpid=""
	fi
	if [ ${#tracepids[@]} -gt 0 ]; then
		wait "${tracepids[@]}" || say "  --trace-bench: a broker's trace did not download"
		tracepids=()
		local -a taken=("${traces[@]:ntraces}")
		say "  execution traces during $name: ${taken[*]#*=}"
	fi
	if [ "$1" = produce ]; then
		master_deltas "$name" "$before" "$after"
		say "  $name: the master spent ${V[$name.cpu_us]##* } CPU us per message; ${V[$name.per_entry]##* } messages per Raft entry"
	fi
	tail -n 1 "$d/$name.out" | grep '^{' >"$d/$name.json" || fail "$name: no JSON summary"
	if [ "$1" = produce ]; then
		all_cpu "$name" "$d/$name.json" "$before" "$after" "$brokers_before" "$brokers_after"
		say "  $name: the brokers and the bench spent ${V[$name.cpu_all_us]##* } CPU us per message together, the brokers alone ${V[$name.cpu_brokers_us]##* }"
		per_message "$name.switches" 2 "$before" "$after" "$sw_before" "$sw_after"
		say "  $name: the brokers' threads switched ${V[$name.switches]##* } times per message"
		per_message "$name.cpu_wait_us" 1 "$before" "$after" "$wait_before" "$wait_after"
		cpu_some "$name" "$psi_before" "$psi_after"
		say "  $name: the brokers' threads waited ${V[$name.cpu_wait_us]##* } us per message for a CPU; some task waited for one $(pct "${V[$name.cpu_some]##* }") of the time"
		round "$name" "$d/$name.json" "$rounds_before" "$rounds_after"
		say "  $name: $(round_line "$name" last)"
	fi
	local failed
	failed=$(jget "$d/$name.json" failed)
	[ "${failed:-0}" = 0 ] || say "  $name: $failed sends failed"
	say "  $name: $(head -n 2 "$d/$name.out" | tr '\n' ' ')"
}

# start_profile DIR: a 10 s CPU profile of the master (replica $master), 3 s into the bench
# about to start, downloaded in the background (bench waits for it)
start_profile() {
	local h=127.0.0.1:$((base + 40 + master)) suffix=""
	[ "$profile_bench" = batch ] || suffix="-$profile_bench"
	if command -v curl >/dev/null && [ "$(curl -s -o /dev/null -w '%{http_code}' "http://$h/debug/pprof/")" = 200 ]; then
		prof="$PWD/raftmq-master-cpu$suffix-run$run_no.pprof"
		(sleep 3 && curl -s -o "$prof" "http://$h/debug/pprof/profile?seconds=10") &
		profpid=$!
	else
		say "  --profile: the broker's --http endpoint ($h) serves /metrics and /healthz only, no /debug/pprof/: no profile"
	fi
}

# start_traces NAME: a 1 s execution trace of each broker, 5 s into the bench about to start,
# downloaded in the background (bench waits for them)
start_traces() {
	local i role h
	for i in 1 2 3; do
		role=follower
		[ "$i" = "$master" ] && role=master
		h=127.0.0.1:$((base + 40 + i))
		traces+=("$role=$PWD/raftmq-trace-$1-run$run_no-$role$i.trace")
		(sleep 5 && curl -sf -o "${traces[-1]#*=}" "http://$h/debug/pprof/trace?seconds=1") &
		tracepids+=($!)
	done
}

# host_floor DIR: `raftmq bench host` in DIR (the brokers' disk) while nothing else runs:
# adds host.rtt, host.sync, host.sync3, host.floor, host.commit2 and host.floor_disk (p50s, ms)
host_floor() {
	local d=$1
	mkdir -p "$d"
	run "$d/host.out" "$d/host.log" "$bin" bench host --json --dir "$d" || fail "bench host exited $?"
	tail -n 1 "$d/host.out" >"$d/host.json"
	add host.rtt "$(jget "$d/host.json" round_trip_p50_ms)"
	add host.sync "$(jget "$d/host.json" sync_p50_ms)"
	add host.sync3 "$(jget "$d/host.json" sync3_p50_ms)"
	add host.floor "$(jget "$d/host.json" floor_ms)"
	add host.commit2 "$(jget "$d/host.json" commit_sync2_p50_ms)"
	add host.floor_disk "$(jget "$d/host.json" floor_one_disk_ms)"
	say "  this machine: loopback round trip p50 ${V[host.rtt]##* } ms, 1 KiB fdatasync p50 ${V[host.sync]##* } ms alone, ${V[host.sync3]##* } ms three at once, the later of two started together ${V[host.commit2]##* } ms; a lone sync send's floor ${V[host.floor]##* } ms, ${V[host.floor_disk]##* } ms with the group on this one disk"
}

# ---- one run ---------------------------------------------------------------------------
run_raftmq() { # R
	local r=$1 d="$work/run$1" i sent total
	run_no=$r
	say "run $r/$runs: raftmq, 1 namesrv + 3 brokers on 127.0.0.1:$base-$((base + 43)), data in $d"
	anon=()
	host_floor "$d"
	start_cluster "$d"
	master=$(wait_master)
	create_topic
	say "  master is replica $master; topic bench has 8 queues"

	! wanted batch || bench "$d" batch 120 produce --clients 16 --size 1024 --mode batch --batch 64 --duration 15s
	! wanted sync16 || bench "$d" sync16 120 produce --clients 16 --size 1024 --mode sync --duration 15s
	! wanted sync1 || bench "$d" sync1 120 produce --clients 1 --size 1024 --mode sync --duration 10s
	total=0
	for i in batch sync16 sync1; do
		[ -f "$d/$i.json" ] || continue
		sent=$(jget "$d/$i.json" sent)
		total=$((total + ${sent:-0}))
	done
	! wanted consume || bench "$d" consume 300 consume --clients 4 --size 1024 --group bench-consume --count "$total"
	! wanted e2e || bench "$d" e2e 120 e2e --clients 4 --size 1024 --mode sync --rate 1000 --duration 10s --group bench-e2e
	if [ "$rocketmq" = 1 ]; then
		bench "$d" rmq.batch 120 produce --clients 16 --size 1024 --mode batch --batch 64 --duration 15s
		bench "$d" rmq.sync16 120 produce --clients 16 --size 1024 --mode sync --duration 15s
		bench "$d" rmq.sync1 120 produce --clients 1 --size 1024 --mode sync --duration 10s
		bench "$d" rmq.consume 300 consume --clients 4 --size 1024 --group rmq-consume --count "$total"
		for i in batch sync16 consume; do
			add "ratio.rmq_$i" "$(ratio "$(jget "$d/rmq.$i.json" msgs_per_sec)" "$(jget "$d/$i.json" msgs_per_sec)")"
		done
		add ratio.rmq_p50 "$(ratio "$(jget "$d/rmq.sync1.json" p50_ms)" "$(jget "$d/sync1.json" p50_ms)")"
	fi
	if [ "$long" = 1 ]; then
		bench "$d" long 300 produce --clients 16 --size 1024 --mode batch --batch 64 --duration 120s
	fi
	if [ "$timers" = 1 ]; then
		create_topic bench-timers
		bench "$d" timers_base 120 produce --clients 8 --size 1024 --mode batch --batch 64 --duration 15s
		bench "$d" timers 300 timers --rate 10000 --timer-senders 32 --delay 5s --spread 1s --duration 15s --clients 8 --size 1024 --mode batch --batch 64
		for i in timers_acked timers_fired timer_duplicates timers_early fire_late_p50_ms fire_late_p99_ms fire_late_max_ms; do
			add "timers.$i" "$(jget "$d/timers.json" "$i")"
		done
		add ratio.timers_sends "$(ratio "$(jget "$d/timers.json" msgs_per_sec)" "$(jget "$d/timers_base.json" msgs_per_sec)")"
	fi

	for i in batch sync16 sync1 consume e2e long timers_base timers rmq.batch rmq.sync16 rmq.sync1 rmq.consume; do
		if [ ! -f "$d/$i.json" ]; then
			# one left out by --only still has its figures, as null: the ratios read them
			if wanted "$i" || [[ ! $i =~ ^(batch|sync16|sync1|consume|e2e)$ ]]; then continue; fi
			add "$i.mps" null
			add "$i.p50" null
			add "$i.p99" null
			continue
		fi
		add "$i.mps" "$(jget "$d/$i.json" msgs_per_sec)"
		add "$i.p50" "$(jget "$d/$i.json" p50_ms)"
		add "$i.p99" "$(jget "$d/$i.json" p99_ms)"
	done
	add consume.count "$total"
	add ratio.sync1_floor "$(ratio "${V[sync1.p50]##* }" "${V[host.floor]##* }")"
	add ratio.sync1_floor_disk "$(ratio "${V[sync1.p50]##* }" "${V[host.floor_disk]##* }")"
	for i in 1 2 3; do
		add "rss.$i" "$(awk '/^VmHWM:/ {printf "%.1f", $2 / 1024}' "/proc/${pids[$i]}/status" 2>/dev/null || echo null)"
		add "anon.$i" "$(awk -v kb="${anon[$i]:-}" 'BEGIN {if (kb == "") print "null"; else printf "%.1f", kb / 1024}')"
		# threads running Go code (--gomaxprocs auto: Go's default over the 3 replicas here)
		add "procs.$i" "$(broker_metric "$i" go_sched_gomaxprocs_threads)"
	done
	master=$("$bin" cluster list --namesrv "$ns_addr" 2>/dev/null | awk '$1 == "bench-a" && $3 == "master" {print $2}' || true)
	add master "${master:-null}"
	say "  brokers' GOMAXPROCS: ${V[procs.1]##* }, ${V[procs.2]##* }, ${V[procs.3]##* }"
	say "  peak RSS (MB): broker 1 ${V[rss.1]##* }, broker 2 ${V[rss.2]##* }, broker 3 ${V[rss.3]##* }; anonymous ${V[anon.1]##* }, ${V[anon.2]##* }, ${V[anon.3]##* }; master now replica ${master:-?}"
	stop_cluster
	rm -rf "$d"/b[123] # the data; the logs stay for --keep
}

# run_peer SCRIPT OUT: a NATS script in its own session (stop_nats stops what it leaves), its
# output to OUT and, indented, to stderr
run_peer() {
	setsid "$1" >"$2" 2>&1 &
	natspid=$!
	wait "$natspid" || say "  $(basename "$1") exited $?"
	stop_nats
	sed 's/^/  /' "$2" >&2
}

run_nats() { # R
	local r=$1 out="$work/nats$1.txt" l1 l2 try
	for try in 1 2; do
		say "run $r/$runs: NATS, $natsbench"
		run_peer "$natsbench" "$out"
		# A figure printed as ? most often means one of the tool's servers could not bind its
		# random port (start_peer in deploy/natspeer.sh says why). The tool does not try again
		# itself, so the whole run is tried again, once.
		grep -q '?' "$out" || break
		[ "$try" = 1 ] && say "  a NATS figure came back as ?: running $(basename "$natsbench") once more"
	done
	l1=$(grep 'batched async publish' "$out" || true)
	l2=$(grep 'sync publish 16 clients' "$out" || true)
	add nats.lazy "$(sed -n 's/.*lazy fsync \([0-9][0-9]*\) msgs\/s.*/\1/p' <<<"$l1")"
	add nats.always "$(sed -n 's/.*fsync always \([0-9][0-9]*\) msgs\/s.*/\1/p' <<<"$l1")"
	add nats.sync16 "$(sed -n 's/.*sync publish 16 clients \([0-9][0-9]*\) msgs\/s.*/\1/p' <<<"$l2")"
	add nats.p50 "$(to_ms "$(sed -n 's/.*1 client p50 \([^;]*\);.*/\1/p' <<<"$l2")")"
	add nats.consume "$(sed -n 's/.*consume 4 clients \([0-9][0-9]*\) msgs\/s.*/\1/p' <<<"$l2")"
	# the paired ratios of this run
	add ratio.batch_lazy "$(ratio "${V[batch.mps]##* }" "${V[nats.lazy]##* }")"
	add ratio.batch_always "$(ratio "${V[batch.mps]##* }" "${V[nats.always]##* }")"
	add ratio.sync16 "$(ratio "${V[sync16.mps]##* }" "${V[nats.sync16]##* }")"
	add ratio.p50 "$(ratio "${V[sync1.p50]##* }" "${V[nats.p50]##* }")"
	add ratio.consume "$(ratio "${V[consume.mps]##* }" "${V[nats.consume]##* }")"
}

run_nats_always() { # R
	local r=$1 out="$work/nats-always$1.txt" l
	say "run $r/$runs: NATS with fsync always, $natsalways"
	run_peer "$natsalways" "$out"
	l=$(grep 'fsync always: sync publish 16 clients' "$out" || true)
	add nats.sync16_always "$(sed -n 's/.*sync publish 16 clients \([0-9][0-9]*\) msgs\/s.*/\1/p' <<<"$l")"
	add nats.p50_always "$(to_ms "$(sed -n 's/.*1 client p50 \([^;]*\)$/\1/p' <<<"$l")")"
	add ratio.sync16_always "$(ratio "${V[sync16.mps]##* }" "${V[nats.sync16_always]##* }")"
	add ratio.p50_always "$(ratio "${V[sync1.p50]##* }" "${V[nats.p50_always]##* }")"
}

# ---- main ------------------------------------------------------------------------------
work=$(mktemp -d "${TMPDIR:-/tmp}/raftmq-bench-XXXXXX")
case $(stat -f -c %T "$work") in tmpfs | ramfs) say "warning: $work is on $(stat -f -c %T "$work"): fsync costs nothing there (set TMPDIR to a disk)" ;; esac
bin="$work/raftmq"
if [ -n "$given_bin" ]; then
	bin=$given_bin
	say "raftmq: $bin"
else
	say "building raftmq at $commit"
	run - - go build -C "$root" -o "$bin" ./cmd/raftmq || fail "go build"
fi
rmqbin="$work/rmqbench"
if [ "$rocketmq" = 1 ]; then
	say "building rmqbench (RocketMQ's official Go client)"
	run - - go build -C "$root/e2e/rocketmq" -o "$rmqbin" ./rmqbench || fail "go build rmqbench"
fi
for ((r = 1; r <= runs; r++)); do
	run_raftmq "$r"
	if [ "$nats" = 1 ]; then run_nats "$r"; fi
	if [ "$nats_always" = 1 ]; then run_nats_always "$r"; fi
done
elapsed=$SECONDS # the whole script, the build too

m() {
	local vals
	read -ra vals <<<"${V[$1]:-}"
	median "${vals[@]}"
}
declare -A M
for k in "${!V[@]}"; do M[$k]=$(m "$k"); done
g() { echo "${M[$1]:-null}"; }

label="median of $runs runs"
[ "$tls" = 1 ] && label="$label, TLS on every link"
[ "$runs" = 1 ] && label="1 run"
echo "raftmq $commit, 3-replica group on 127.0.0.1, 1 KiB messages, $label ($(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)); ${elapsed}s"
line="batched publish, 16 clients x 64 per batch, 15s:  $(kfmt "$(g batch.mps)") msgs/s, p50 $(fmt "$(g batch.p50)" 1) ms, p99 $(fmt "$(g batch.p99)" 1) ms"
[ "$nats" = 1 ] && line="$line | NATS lazy $(kfmt "$(g nats.lazy)") ($(xfmt "$(g ratio.batch_lazy)")), fsync-always $(kfmt "$(g nats.always)") ($(xfmt "$(g ratio.batch_always)"))"
echo "$line"
if [ "$long" = 1 ]; then
	echo "batched publish, sustained 120s:                  $(kfmt "$(g long.mps)") msgs/s, p50 $(fmt "$(g long.p50)" 1) ms, p99 $(fmt "$(g long.p99)" 1) ms ($(xfmt "$(ratio "$(g long.mps)" "$(g batch.mps)")") the 15 s figure)"
fi
if [ "$timers" = 1 ]; then
	echo "timers, 10k/s scheduled for 15s, due 5-6 s later: $(fmt "$(g timers.timers_acked)") acked, $(fmt "$(g timers.timers_fired)") fired, $(fmt "$(g timers.timer_duplicates)") twice, $(fmt "$(g timers.timers_early)") early; fired late by p50 $(fmt "$(g timers.fire_late_p50_ms)") ms, p99 $(fmt "$(g timers.fire_late_p99_ms)") ms, max $(fmt "$(g timers.fire_late_max_ms)") ms"
	echo "  ordinary batched sends (8 clients x 64) while timers fired: $(kfmt "$(g timers.mps)") msgs/s, p99 $(fmt "$(g timers.p99)" 1) ms ($(xfmt "$(g ratio.timers_sends)") the same sends without timers, $(kfmt "$(g timers_base.mps)") msgs/s)"
fi
line="sync publish, 16 clients, 15s:                    $(kfmt "$(g sync16.mps)") msgs/s, p50 $(fmt "$(g sync16.p50)" 2) ms, p99 $(fmt "$(g sync16.p99)" 2) ms"
[ "$nats" = 1 ] && line="$line | NATS lazy $(kfmt "$(g nats.sync16)") ($(xfmt "$(g ratio.sync16)"))"
[ "$nats_always" = 1 ] && line="$line | NATS fsync-always $(kfmt "$(g nats.sync16_always)") ($(xfmt "$(g ratio.sync16_always)"))"
echo "$line"
line="sync publish, 1 client, 10s:                      p50 $(fmt "$(g sync1.p50)" 2) ms, p99 $(fmt "$(g sync1.p99)" 2) ms, $(kfmt "$(g sync1.mps)") msgs/s"
[ "$nats" = 1 ] && line="$line | NATS lazy p50 $(fmt "$(g nats.p50)" 2) ms (raftmq's is $(xfmt "$(g ratio.p50)"))"
[ "$nats_always" = 1 ] && line="$line | NATS fsync-always p50 $(fmt "$(g nats.p50_always)" 2) ms (raftmq's is $(xfmt "$(g ratio.p50_always)"))"
echo "$line"
line="consume, 4 clients, $(fmt "$(g consume.count)") messages from the first:  $(kfmt "$(g consume.mps)") msgs/s (bench consume records no latency)"
[ "$nats" = 1 ] && line="$line | NATS 300000 messages $(kfmt "$(g nats.consume)") ($(xfmt "$(g ratio.consume)"))"
echo "$line"
echo "this machine (raftmq bench host, before each run): loopback round trip p50 $(fmt "$(g host.rtt)" 3) ms, 1 KiB fdatasync p50 $(fmt "$(g host.sync)" 3) ms alone, $(fmt "$(g host.sync3)" 3) ms three at once; a lone sync send's floor (2 round trips + 1 sync) $(fmt "$(g host.floor)" 3) ms: sync1's p50 is $(xfmt "$(g ratio.sync1_floor)") it; with the group's replicas on this one disk (2 round trips + the later of 2 syncs started together, $(fmt "$(g host.commit2)" 3) ms) $(fmt "$(g host.floor_disk)" 3) ms: sync1's p50 is $(xfmt "$(g ratio.sync1_floor_disk)") it"
echo "send to receive, 4 producers at 1000 msgs/s, 10s:   p50 $(fmt "$(g e2e.p50)" 2) ms, p99 $(fmt "$(g e2e.p99)" 2) ms, $(kfmt "$(g e2e.mps)") msgs/s received (a push consumer; born time to receive, the born time in ms)"
if [ "$rocketmq" = 1 ]; then
	echo "RocketMQ's official Go client, same cluster and topic (ratio to raftmq's SDK):"
	echo "  batched publish, 16 clients x 64:  $(kfmt "$(g rmq.batch.mps)") msgs/s, p99 $(fmt "$(g rmq.batch.p99)" 1) ms ($(xfmt "$(g ratio.rmq_batch)"))"
	echo "  sync publish, 16 clients:          $(kfmt "$(g rmq.sync16.mps)") msgs/s, p50 $(fmt "$(g rmq.sync16.p50)" 2) ms ($(xfmt "$(g ratio.rmq_sync16)"))"
	echo "  sync publish, 1 client:            p50 $(fmt "$(g rmq.sync1.p50)" 2) ms, p99 $(fmt "$(g rmq.sync1.p99)" 2) ms ($(xfmt "$(g ratio.rmq_p50)") raftmq's p50)"
	echo "  consume, 4 goroutines, the same backlog:  $(kfmt "$(g rmq.consume.mps)") msgs/s ($(xfmt "$(g ratio.rmq_consume)"))"
fi
echo "the master's CPU per message (us), messages per Raft entry: batched $(fmt "$(g batch.cpu_us)" 1), $(fmt "$(g batch.per_entry)" 1); sync16 $(fmt "$(g sync16.cpu_us)" 1), $(fmt "$(g sync16.per_entry)" 1); sync1 $(fmt "$(g sync1.cpu_us)" 1), $(fmt "$(g sync1.per_entry)" 1)"
echo "the CPU per message (us) of the three brokers and the bench together: batched $(fmt "$(g batch.cpu_all_us)" 1); sync16 $(fmt "$(g sync16.cpu_all_us)" 1); sync1 $(fmt "$(g sync1.cpu_all_us)" 1); the brokers alone: batched $(fmt "$(g batch.cpu_brokers_us)" 1); sync16 $(fmt "$(g sync16.cpu_brokers_us)" 1); sync1 $(fmt "$(g sync1.cpu_brokers_us)" 1)"
echo "the brokers' thread switches per message: batched $(fmt "$(g batch.switches)" 2); sync16 $(fmt "$(g sync16.switches)" 1); sync1 $(fmt "$(g sync1.switches)" 1)"
echo "the brokers' threads' wait for a CPU per message (us): batched $(fmt "$(g batch.cpu_wait_us)" 2); sync16 $(fmt "$(g sync16.cpu_wait_us)" 1); sync1 $(fmt "$(g sync1.cpu_wait_us)" 1); the share of the time some task waited for a CPU: batched $(pct "$(g batch.cpu_some)"); sync16 $(pct "$(g sync16.cpu_some)"); sync1 $(pct "$(g sync1.cpu_some)")"
echo "where a send's time went (means): sync16: $(round_line sync16 median); sync1: $(round_line sync1 median)"
echo "the brokers' GOMAXPROCS (threads running Go code at once): $(g procs.1), $(g procs.2), $(g procs.3)"
echo "peak RSS (VmHWM): broker 1 $(fmt "$(g rss.1)") MB, broker 2 $(fmt "$(g rss.2)") MB, broker 3 $(fmt "$(g rss.3)") MB; anonymous (heap, stacks): $(fmt "$(g anon.1)"), $(fmt "$(g anon.2)"), $(fmt "$(g anon.3)") MB (master at the end of each run: replica $(tr -s ' ' ',' <<<"${V[master]# }"))"
if [ "$runs" -gt 1 ]; then
	[ "$nats$nats_always" = 00 ] || echo "(ratios raftmq/NATS: the median of the $runs ratios of each raftmq run to the NATS run right after it)"
	echo "each run:"
	for k in host.floor ratio.sync1_floor host.floor_disk ratio.sync1_floor_disk batch.mps long.mps sync16.mps sync1.p50 consume.mps e2e.p99 rmq.batch.mps rmq.sync16.mps rmq.sync1.p50 rmq.consume.mps batch.cpu_us sync16.cpu_us sync16.per_entry batch.cpu_all_us sync16.cpu_all_us sync16.cpu_brokers_us sync16.switches sync1.switches sync16.cpu_wait_us sync1.cpu_wait_us sync16.cpu_some sync1.cpu_some sync16.client_ms "${round_keys[@]/#/sync16.}" sync1.client_ms "${round_keys[@]/#/sync1.}" nats.lazy nats.always nats.sync16 nats.p50 nats.consume nats.sync16_always nats.p50_always rss.1 rss.2 rss.3 anon.1 anon.2 anon.3; do
		if [ -n "${V[$k]:-}" ]; then
			awk -v k="$k" '{printf "  %s:", k; for (i = 1; i <= NF; i++) printf " %s", ($i == "null" ? $i : sprintf("%.6g", $i)); print ""}' <<<"${V[$k]}"
		fi
	done
fi

if [ ${#traces[@]} -gt 0 ]; then
	if command -v go >/dev/null; then
		for t in "${traces[@]}"; do
			role=${t%%=*}
			[ "$role" = bench ] && role=client
			echo "where a round of sends went in ${t#*=} (deploy/roundtrace $role):"
			[ -s "${t#*=}" ] && go run -C "$root/deploy/roundtrace" . "$role" <"${t#*=}" | sed 's/^/  /' ||
				echo "  (no trace, or roundtrace failed)"
		done
	else
		echo "execution traces: ${traces[*]#*=} (go run ./deploy/roundtrace master|follower|client < FILE reads them)"
	fi
fi

if [ "$json" = 1 ]; then
	fig() { # NAME → {"msgs_per_sec":..,"p50_ms":..,"p99_ms":..}
		printf '{"msgs_per_sec":%s,"p50_ms":%s,"p99_ms":%s}' "$(g "$1.mps")" "$(g "$1.p50")" "$(g "$1.p99")"
	}
	out="{\"commit\":\"$commit\",\"runs\":$runs,\"tls\":$([ "$tls" = 1 ] && echo true || echo false),\"seconds\":$elapsed,\"raftmq\":{\"batch\":$(fig batch),\"sync16\":$(fig sync16),\"sync1\":$(fig sync1)"
	out="$out,\"host\":{\"round_trip_p50_ms\":$(g host.rtt),\"sync_p50_ms\":$(g host.sync),\"sync3_p50_ms\":$(g host.sync3),\"floor_ms\":$(g host.floor),\"sync1_p50_vs_floor\":$(g ratio.sync1_floor),\"commit_sync2_p50_ms\":$(g host.commit2),\"floor_one_disk_ms\":$(g host.floor_disk),\"sync1_p50_vs_floor_one_disk\":$(g ratio.sync1_floor_disk)}"
	out="$out,\"consume\":{\"msgs_per_sec\":$(g consume.mps),\"messages\":$(g consume.count),\"p99_ms\":null},\"e2e_low_load\":$(fig e2e)"
	[ "$long" = 1 ] && out="$out,\"batch_long\":$(fig long)"
	[ "$timers" = 1 ] && out="$out,\"timers\":{\"acked\":$(g timers.timers_acked),\"fired\":$(g timers.timers_fired),\"duplicates\":$(g timers.timer_duplicates),\"early\":$(g timers.timers_early),\"fire_late_p50_ms\":$(g timers.fire_late_p50_ms),\"fire_late_p99_ms\":$(g timers.fire_late_p99_ms),\"fire_late_max_ms\":$(g timers.fire_late_max_ms),\"sends_while_firing\":$(fig timers),\"sends_without_timers\":$(fig timers_base)}"
	out="$out,\"rss_mb\":{\"1\":$(g rss.1),\"2\":$(g rss.2),\"3\":$(g rss.3)},\"anon_rss_mb\":{\"1\":$(g anon.1),\"2\":$(g anon.2),\"3\":$(g anon.3)},\"gomaxprocs\":{\"1\":$(g procs.1),\"2\":$(g procs.2),\"3\":$(g procs.3)},\"master\":[$(tr -s ' ' ',' <<<"${V[master]# }")]}"
	if [ "$rocketmq" = 1 ]; then
		out="$out,\"rocketmq_client\":{\"batch\":$(fig rmq.batch),\"sync16\":$(fig rmq.sync16),\"sync1\":$(fig rmq.sync1),\"consume\":{\"msgs_per_sec\":$(g rmq.consume.mps)}"
		out="$out,\"ratios_to_sdk\":{\"batch\":$(g ratio.rmq_batch),\"sync16\":$(g ratio.rmq_sync16),\"sync1_p50\":$(g ratio.rmq_p50),\"consume\":$(g ratio.rmq_consume)}}"
	fi
	if [ "$nats" = 1 ]; then
		out="$out,\"nats\":{\"batch_lazy_msgs_per_sec\":$(g nats.lazy),\"batch_always_msgs_per_sec\":$(g nats.always),\"sync16_msgs_per_sec\":$(g nats.sync16),\"sync1_p50_ms\":$(g nats.p50),\"consume_msgs_per_sec\":$(g nats.consume)}"
		out="$out,\"ratios\":{\"batch_vs_lazy\":$(g ratio.batch_lazy),\"batch_vs_always\":$(g ratio.batch_always),\"sync16_vs_lazy\":$(g ratio.sync16),\"sync1_p50\":$(g ratio.p50),\"consume\":$(g ratio.consume)}"
	fi
	if [ "$nats_always" = 1 ]; then
		out="$out,\"nats_fsync_always\":{\"sync16_msgs_per_sec\":$(g nats.sync16_always),\"sync1_p50_ms\":$(g nats.p50_always),\"sync16_ratio\":$(g ratio.sync16_always),\"sync1_p50_ratio\":$(g ratio.p50_always)}"
	fi
	per=""
	for k in $(printf '%s\n' "${!V[@]}" | sort); do
		per="$per${per:+,}\"$k\":[$(tr -s ' ' ',' <<<"${V[$k]# }")]"
	done
	echo "$out,\"per_run\":{$per}}"
fi
