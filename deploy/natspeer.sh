# deploy/natspeer.sh — sourced by the scripts that measure the peer (nats-r3-always.sh,
# nats-r3-cpu.sh) with their name as $1: loads the cluster helpers of
# ../shared/tools/natscluster.sh (start_nats3, stop_nats, nats_sync_rate, ...), installs
# nats-server and nats with `go install` the first time, and makes the run's directory $T, which
# it removes, with any servers still running, when the script exits.
name=$1
root=$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel)
helpers="$root/../shared/tools/natscluster.sh"
[ -r "$helpers" ] || { echo "$name: $helpers is not there" >&2; exit 2; }
# shellcheck source=/dev/null
. "$helpers"
ensure_nats || { echo "$name: cannot install nats-server/nats from the Go module proxy" >&2; exit 1; }
T=$(mktemp -d "${TMPDIR:-/tmp}/$name-XXXX")
trap 'stop_nats; rm -rf "$T"' EXIT
