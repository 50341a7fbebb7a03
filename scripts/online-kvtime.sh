#!/usr/bin/env bash
# online-kvtime.sh — kv-time against the kv defaults and round-robin
# online: `kvrouter bench` through `kvrouter up` with the mock fleet, on
# the conversation trace (docs/benchmarks.md, "kv-time against kv").
#
#   scripts/online-kvtime.sh [KVROUTER_BINARY]
#
# Environment (defaults in brackets):
#   WORKERS [8]   mock workers
#   LIMIT   [3000] replay the first LIMIT requests of the trace (0: all)
#   SPEEDUP [8]   divide the trace's arrival times by this
#   RATIO   [2]   the mock engines' --speedup-ratio
#   ROUNDS  [2]   runs of each policy, the order alternating per round
#   PORT    [18463] the front door's port
#   POLICIES [kv-time kv round-robin] the runs' policies, in order: kv-time,
#                 kv (its defaults), round-robin, or kv:CREDIT:SCALE:CLAMP for a
#                 kv setting of the grid (e.g. kv:2:4:off, kv:16:16:off)
#
# SPEEDUP 8 with RATIO 2 is the load of a ×4 replay at full engine speed
# in half the wall time (every engine duration halved, so latencies are
# about half a ×4 run's). Each run starts a fresh `kvrouter up`, waits for
# /ready, replays the trace head with `kvrouter bench --json` and stops
# the fleet; one line per run: TTFT p50/p90/p99, ITL p99, hit ratio, hit
# ÷ the shared-LRU bound, busiest worker's share. Then the offline
# simulator on the same workload and engine speed, for reference. About
# 2.5 min a run with the defaults.
set -euo pipefail
kvr=${1:-}
if [[ -z $kvr ]]; then
	kvr=$(mktemp -d)/kvrouter
	go build -o "$kvr" ./cmd/kvrouter
fi
workers=${WORKERS:-8}
limit=${LIMIT:-3000}
speedup=${SPEEDUP:-8}
ratio=${RATIO:-2}
rounds=${ROUNDS:-2}
port=${PORT:-18463}
url=http://127.0.0.1:$port
wl="--workload trace --trace conversation --trace-limit $limit --speedup $speedup"
tmp=$(mktemp -d)
up_pid=
stop_up() {
	if [[ -n $up_pid ]]; then
		kill "$up_pid" 2>/dev/null || true
		wait "$up_pid" 2>/dev/null || true
		up_pid=
	fi
}
trap stop_up EXIT
mode_flags() {
	case $1 in
	kv) echo "--router-mode kv" ;; # kv's defaults
	kv:*:*:on | kv:*:*:off)
		IFS=: read -r _ credit scale clamp <<<"$1"
		[[ $clamp == on ]] && clamp=true || clamp=false
		echo "--router-mode kv --kv-overlap-score-credit $credit --router-prefill-load-scale $scale --router-prefill-clamp=$clamp"
		;;
	kv-time | round-robin | random | least-loaded) echo "--router-mode $1" ;;
	*)
		echo "online-kvtime.sh: unknown policy $1 (kv-time, kv, round-robin, random, least-loaded or kv:CREDIT:SCALE:on|off)" >&2
		exit 2
		;;
	esac
}
rows() { # label prefix, JSON file of results: one line per result
	python3 - "$@" <<'PY'
import json, sys
for r in json.load(open(sys.argv[2])):
    label = sys.argv[1] or "offline " + r["policy"]
    print(f"{label:36s} ttft p50 {r['ttft_p50_ms']:7.1f}  p90 {r['ttft_p90_ms']:7.1f}  p99 {r['ttft_p99_ms']:7.1f} ms"
          f"  itl p99 {r['itl_p99_ms']:6.1f} ms  hit {r['hit_ratio']:.3f}  / bound {r.get('hit_ratio_over_bound', 0):.3f}"
          f"  busiest {r.get('max_worker_share', 0):.3f}  n {r['requests']} failed {r['failed']}")
PY
}
read -r -a policies <<<"${POLICIES:-kv-time kv round-robin}"
for p in "${policies[@]}"; do mode_flags "$p" >/dev/null; done
echo "# $(date -u +%FT%TZ) $(git rev-parse --short HEAD 2>/dev/null || echo '?'), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# $workers mock workers, --speedup-ratio $ratio; bench $wl --bound-workers $workers"
for ((r = 1; r <= rounds; r++)); do
	order=("${policies[@]}")
	if ((r % 2 == 0)); then # the other order
		order=()
		for ((i = ${#policies[@]} - 1; i >= 0; i--)); do order+=("${policies[i]}"); done
	fi
	for p in "${order[@]}"; do
		# shellcheck disable=SC2046
		"$kvr" up --mock-workers "$workers" --block-size 64 --port "$port" --nats-port -1 \
			--speedup-ratio "$ratio" $(mode_flags "$p") >"$tmp/up.$p.$r.log" 2>&1 &
		up_pid=$!
		for _ in $(seq 300); do
			if curl -fs "$url/ready" >/dev/null 2>&1; then break; fi
			sleep 0.2
		done
		curl -fs "$url/ready" >/dev/null
		start=$(date +%s)
		# shellcheck disable=SC2086
		"$kvr" bench --url "$url" $wl --bound-workers "$workers" --json >"$tmp/$p.$r.json" 2>"$tmp/$p.$r.err" || true
		stop_up
		rows "online $p (round $r, $(($(date +%s) - start)) s)" "$tmp/$p.$r.json"
		echo "#   load $(cut -d' ' -f1-3 /proc/loadavg)"
	done
done
# shellcheck disable=SC2086
"$kvr" sim $wl --workers "$workers" --speedup-ratio "$ratio" --policy kv-time,kv,round-robin --json >"$tmp/sim.json" 2>/dev/null
rows "" "$tmp/sim.json"
echo "# results in $tmp"
