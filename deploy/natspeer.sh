# deploy/natspeer.sh — sourced by the scripts that measure the peer (nats-r3-always.sh,
# nats-r3-cpu.sh) with their name as $1: loads the cluster helpers of
# ../shared/tools/natscluster.sh (start_nats3, stop_nats, nats_sync_rate, ...), installs
# nats-server and nats with `go install` the first time, makes the run's directory $T, which
# it removes, with any servers still running, when the script exits, and defines start_peer.
name=$1
root=$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel)
helpers="$root/../shared/tools/natscluster.sh"
[ -r "$helpers" ] || { echo "$name: $helpers is not there" >&2; exit 2; }
# shellcheck source=/dev/null
. "$helpers"
ensure_nats || { echo "$name: cannot install nats-server/nats from the Go module proxy" >&2; exit 1; }
T=$(mktemp -d "${TMPDIR:-/tmp}/$name-XXXX")
trap 'stop_nats; rm -rf "$T"' EXIT

# start_peer DIR SYNC: start_nats3 DIR SYNC, and again (up to 3 tries, each on new random ports)
# when one of the three servers did not start. natscluster.sh picks the servers' ports at random
# in 42001-47013, inside Linux's ephemeral range (32768-60999 here), so a port is sometimes taken
# by an outgoing connection when a server binds it: 3 starts of 30 failed so on 2026-12-08 (the
# server's log: `[FTL] Error listening on port ... bind: address already in use`), and a
# cluster of two then measures nothing. Each failed try is said on stderr with the server's
# fatal line, before $T (and the log) goes. Returns 1 when no try started all three.
start_peer() {
	local dir=$1 sync=$2 try p up why
	for try in 1 2 3; do
		start_nats3 "$dir" "$sync"
		up=1
		for p in "${NPIDS[@]}"; do kill -0 "$p" 2>/dev/null || up=0; done
		grep -qh "metadata leader" "$dir"/n*.log 2>/dev/null || up=0
		[ "$up" = 1 ] && return 0
		why=$(grep -h '\[FTL\]' "$dir"/n*.log 2>/dev/null | head -1)
		echo "$name: the NATS cluster did not start (try $try of 3): ${why:-no server said why, and none became the metadata leader}" >&2
		stop_nats
		rm -rf "$dir"
	done
	return 1
}
