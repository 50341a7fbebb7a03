#!/usr/bin/env bash
# queue-evidence.sh — the admission queue against no thresholds and
# reject-on-busy in the offline simulator (docs/benchmarks.md, "Overload:
# queue, reject or neither").
#
#   scripts/queue-evidence.sh [KVROUTER_BINARY]
#
# For the conversation trace and a multi-turn workload at replay speeds
# ×4, ×8 and ×16, prints one goodput line (TTFT ≤ 2 s) per run and the
# TTFT p50/p99 row: no thresholds; reject-on-busy (503 while every worker
# has more than 2 × max batched tokens of prefill pending); the queue
# (waiting at the same saturation point, 1 s queue timeout) under fcfs,
# wspt and priority; and the same three with deadline-aware release
# (--router-queue-ttft-target 2s, the goodput target: a released request
# that cannot get its first token within 2 s is refused), named
# fcfs+late, wspt+late and priority+late. A few minutes on 2 cores.
set -euo pipefail
kvr=${1:-}
if [[ -z $kvr ]]; then
	kvr=$(mktemp -d)/kvrouter
	go build -o "$kvr" ./cmd/kvrouter
fi
frac=2
timeout=1s
target=2s
modes=(none reject fcfs wspt priority fcfs+late wspt+late priority+late)
flags() {
	case $1 in
	none) ;;
	reject) echo "--active-prefill-tokens-threshold-frac $frac" ;;
	*+late) echo "--router-queue-threshold $frac --router-queue-timeout $timeout --router-queue-policy ${1%+late} --router-queue-ttft-target $target" ;;
	*) echo "--router-queue-threshold $frac --router-queue-timeout $timeout --router-queue-policy $1" ;;
	esac
}
for s in 4 8 16; do
	conv="--workload trace --trace conversation --speedup $s"
	# Multi-turn: 2048 conversations of 8 turns, 3 new per second and
	# 10 s between turns at ×1; ×s multiplies the rate and divides the gap.
	think=$(awk -v s="$s" 'BEGIN { printf "%gms", 10000 / s }')
	mt="--workload multi-turn --mt-sessions 2048 --mt-user-len 1024 --mt-output-len 128 --mt-session-rate $((3 * s)) --mt-think-time $think"
	for w in conv mt; do
		for m in "${modes[@]}"; do
			# shellcheck disable=SC2046
			out=$("$kvr" sim ${!w} --policy kv $(flags "$m") 2>/dev/null)
			row=$(echo "$out" | awk '$1 == "kv" && NF > 10 { print "ttft p50 " $4 " ms, p99 " $6 " ms, hit " $13 }')
			good=$(echo "$out" | grep '^kv: goodput' | sed 's/^kv: //')
			printf '%-4s ×%-2s %-14s %s; %s\n' "$w" "$s" "$m" "$row" "$good"
		done
	done
done
