#!/usr/bin/env python3
"""grid-bar.py — check a policy against the bar of issue 16 on `kvrouter sim --grid --json`.

    kvrouter sim --grid --policy kv-time [workload and fleet flags] --json | scripts/grid-bar.py kv-time

For every scenario of the grid it checks POLICY against the scenario's best kv
setting (lowest TTFT p50, then p90, over the 36 settings) and round-robin:

  - TTFT p50 and p90 at most 1.05 × the best kv setting's, and below round-robin's;
  - ITL p99 at most 1.1 × the best kv setting's;
  - on a homogeneous fleet: hit ratio at least 97 % of the shared-LRU bound and the
    busiest worker's share at most 1.5 / N;
  - on a heterogeneous fleet: the fastest workers serve more requests per worker
    than the slowest.

Prints one line per scenario and criterion and exits 1 if any fails (2 on bad input).
Python 3 standard library only.
"""
import json
import sys


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    policy = sys.argv[1]
    try:
        grid = json.load(sys.stdin)
    except json.JSONDecodeError as e:
        print(f"grid-bar: stdin is not the JSON of kvrouter sim --grid --json: {e}", file=sys.stderr)
        return 2
    failed = 0
    for sc in grid.get("scenarios", []):
        rows = {r["label"]: r for r in sc["rows"]}
        if policy not in rows or "round-robin" not in rows:
            print(f"grid-bar: scenario {sc['name']!r} has no {policy!r} or round-robin row", file=sys.stderr)
            return 2
        p, best, rr = rows[policy]["result"], rows[sc["best_kv"]]["result"], rows["round-robin"]["result"]
        speeds = sc.get("speeds") or [1]
        hetero = min(speeds) != max(speeds)
        n = p["workers"] or 1
        checks = [
            ("ttft p50 <= 1.05 x best kv", p["ttft_p50_ms"], 1.05 * best["ttft_p50_ms"], p["ttft_p50_ms"] <= 1.05 * best["ttft_p50_ms"]),
            ("ttft p90 <= 1.05 x best kv", p["ttft_p90_ms"], 1.05 * best["ttft_p90_ms"], p["ttft_p90_ms"] <= 1.05 * best["ttft_p90_ms"]),
            ("ttft p50 < round-robin", p["ttft_p50_ms"], rr["ttft_p50_ms"], p["ttft_p50_ms"] < rr["ttft_p50_ms"]),
            ("ttft p90 < round-robin", p["ttft_p90_ms"], rr["ttft_p90_ms"], p["ttft_p90_ms"] < rr["ttft_p90_ms"]),
            ("itl p99 <= 1.1 x best kv", p["itl_p99_ms"], 1.1 * best["itl_p99_ms"], p["itl_p99_ms"] <= 1.1 * best["itl_p99_ms"]),
        ]
        if hetero:
            fps = rows[policy]["fast_per_slow"]
            checks.append(("fast workers carry more (per worker)", fps, 1.0, fps > 1))
        else:
            checks.append(("hit / bound >= 0.97", p["hit_ratio_over_bound"], 0.97, p["hit_ratio_over_bound"] >= 0.97))
            checks.append(("busiest share <= 1.5 / N", p["max_worker_share"], 1.5 / n, p["max_worker_share"] <= 1.5 / n))
        print(f"{sc['name']} (best kv: {sc['best_kv']})")
        for name, got, limit, ok in checks:
            failed += not ok
            print(f"  {'PASS' if ok else 'FAIL'}  {name:38s} {got:10.3f}  vs {limit:10.3f}")
    if not grid.get("scenarios"):
        print("grid-bar: no scenarios", file=sys.stderr)
        return 2
    print(f"{policy}: {failed} check(s) failed" if failed else f"{policy}: every check passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
