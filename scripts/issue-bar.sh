#!/usr/bin/env bash
# issue-bar.sh — run every grid of the kv-time bar (docs/benchmarks.md, "kv-time against kv") and
# count the checks scripts/grid-bar.py passes: the conversation, synthetic, multi-turn (default and
# heavy) and prefix-ratio (200 and 1,000 requests) workloads at replay ×1, ×2, ×4 and ×8, on a
# uniform fleet of 8 and a half-fast one (workers 4–7 twice as fast), kv-time at its defaults.
#
#   scripts/issue-bar.sh [OUTDIR]        # KVROUTER=path/to/kvrouter (default: go run ./cmd/kvrouter)
#
# Each grid's JSON and grid-bar.py report go to OUTDIR (default bar-out/); the last table
# (grid-bar.py --fixed, also in OUTDIR/fixed.txt) holds each kv setting, round-robin and kv-time
# fixed across every scenario. The grids run one simulation at a time (--parallel 1; PARALLEL=n to
# change): the whole bar takes about half an hour on a 2-core machine, 14 minutes with PARALLEL=2,
# most of it the conversation grids. It exits 1 when any check fails.
set -euo pipefail
out=${1:-bar-out}
mkdir -p "$out"
if [[ -n "${KVROUTER:-}" ]]; then kv=("$KVROUTER"); else
	go build -o "$out/kvrouter" ./cmd/kvrouter
	kv=("$out/kvrouter")
fi
here=$(cd "$(dirname "$0")" && pwd)
F='uniform=1;half-fast=1,1,1,1,2,2,2,2'
P=(--policy kv,round-robin,kv-time --parallel "${PARALLEL:-1}" --json)
MTH=(--mt-sessions 1024 --mt-user-len 1024 --mt-output-len 128 --mt-session-rate 3)
grid() { # name, then the workload and scenario flags
	local name=$1
	shift
	"${kv[@]}" sim --grid "$@" "${P[@]}" >"$out/$name.json" 2>"$out/$name.log"
	python3 "$here/grid-bar.py" kv-time <"$out/$name.json" >"$out/$name.txt" || true
	echo "$name: $(grep -c PASS "$out/$name.txt" || true) pass, $(grep -c FAIL "$out/$name.txt" || true) fail"
}
grid prefix-ratio-200 --workload prefix-ratio --workers 8 --grid-replay 1,2,4,8 --grid-fleets "$F"
grid prefix-ratio-1000 --workload prefix-ratio --requests 1000 --workers 8 --grid-replay 1,2,4,8 --grid-fleets "$F"
grid multi-turn --workload multi-turn --workers 8 --grid-replay 1,2,4,8 --grid-fleets "$F"
grid multi-turn-heavy --workload multi-turn "${MTH[@]}" --workers 8 --grid-replay 1,2,4,8 --grid-fleets "$F"
grid synthetic --trace synthetic --grid-replay 1,2,4,8 --grid-fleets "$F"
grid conversation --trace conversation --grid-replay 1,2,4,8 --grid-fleets "$F"
pass=$(cat "$out"/*.txt | grep -c PASS || true)
fail=$(cat "$out"/*.txt | grep -c FAIL || true)
echo "kv-time: $pass of $((pass + fail)) checks pass"
grep -h FAIL "$out"/*.txt || true
python3 "$here/grid-bar.py" --fixed "$out"/*.json | tee "$out/fixed.txt"
[[ $fail -eq 0 ]]
