#!/usr/bin/env python3
"""grid-bar.py — check a policy against the bar of issue 16 on `kvrouter sim --grid --json`.

    kvrouter sim --grid --policy kv-time [workload and fleet flags] --json | scripts/grid-bar.py kv-time
    scripts/grid-bar.py --fixed GRID.json [GRID.json ...]

For every scenario of the grid it checks POLICY against the scenario's best kv
setting (lowest TTFT p50, then p90, over the 36 settings) and round-robin:

  - TTFT p50 and p90 at most 1.05 × the best kv setting's, and below round-robin's;
  - ITL p99 at most 1.1 × the best kv setting's;
  - on a homogeneous fleet: hit ratio at least 97 % of the shared-LRU bound and the
    busiest worker's share at most 1.5 / N;
  - on a heterogeneous fleet: the fastest workers serve more requests per worker
    than the slowest (the same ratio by prefill tokens computed is printed beside
    it, as information).

Prints one line per scenario and criterion and exits 1 if any fails (2 on bad input).

--fixed holds every row of the grids fixed across all their scenarios instead: each
kv setting, round-robin and every other policy gets the same checks in every scenario
(against that scenario's best kv setting, as above), and the count of checks each
passes is printed, most first. The best kv setting per scenario is a different
setting in different scenarios (tuned per workload, load and fleet); this count says
how a single setting, the one an operator would deploy, does on the same bar. Exits
0 (2 on bad input).

Python 3 standard library only.
"""
import json
import sys


def checks(sc: dict, label: str) -> list[tuple[str, float, float, bool]]:
    """The bar's checks of row label in scenario sc: (name, got, limit, passed)."""
    rows = {r["label"]: r for r in sc["rows"]}
    p, best, rr = rows[label]["result"], rows[sc["best_kv"]]["result"], rows["round-robin"]["result"]
    speeds = sc.get("speeds") or [1]
    hetero = min(speeds) != max(speeds)
    n = p["workers"] or 1
    out = [
        ("ttft p50 <= 1.05 x best kv", p["ttft_p50_ms"], 1.05 * best["ttft_p50_ms"], p["ttft_p50_ms"] <= 1.05 * best["ttft_p50_ms"]),
        ("ttft p90 <= 1.05 x best kv", p["ttft_p90_ms"], 1.05 * best["ttft_p90_ms"], p["ttft_p90_ms"] <= 1.05 * best["ttft_p90_ms"]),
        ("ttft p50 < round-robin", p["ttft_p50_ms"], rr["ttft_p50_ms"], p["ttft_p50_ms"] < rr["ttft_p50_ms"]),
        ("ttft p90 < round-robin", p["ttft_p90_ms"], rr["ttft_p90_ms"], p["ttft_p90_ms"] < rr["ttft_p90_ms"]),
        ("itl p99 <= 1.1 x best kv", p["itl_p99_ms"], 1.1 * best["itl_p99_ms"], p["itl_p99_ms"] <= 1.1 * best["itl_p99_ms"]),
    ]
    if hetero:
        fps = rows[label]["fast_per_slow"]
        out.append(("fast workers carry more (per worker)", fps, 1.0, fps > 1))
    else:
        out.append(("hit / bound >= 0.97", p["hit_ratio_over_bound"], 0.97, p["hit_ratio_over_bound"] >= 0.97))
        out.append(("busiest share <= 1.5 / N", p["max_worker_share"], 1.5 / n, p["max_worker_share"] <= 1.5 / n))
    return out


def load(f) -> dict:
    grid = json.load(f)
    if not isinstance(grid, dict) or not grid.get("scenarios"):
        raise ValueError("no scenarios")
    return grid


def check_policy(policy: str) -> int:
    try:
        grid = load(sys.stdin)
    except (json.JSONDecodeError, ValueError) as e:
        print(f"grid-bar: stdin is not the JSON of kvrouter sim --grid --json: {e}", file=sys.stderr)
        return 2
    failed = 0
    for sc in grid["scenarios"]:
        labels = {r["label"] for r in sc["rows"]}
        if policy not in labels or "round-robin" not in labels:
            print(f"grid-bar: scenario {sc['name']!r} has no {policy!r} or round-robin row", file=sys.stderr)
            return 2
        print(f"{sc['name']} (best kv: {sc['best_kv']})")
        row = next(r for r in sc["rows"] if r["label"] == policy)
        for name, got, limit, ok in checks(sc, policy):
            failed += not ok
            print(f"  {'PASS' if ok else 'FAIL'}  {name:38s} {got:10.3f}  vs {limit:10.3f}")
            if name.startswith("fast workers") and "fast_work_per_slow" in row:
                # Information, not a check: the same ratio by prefill work.
                print(f"        {'by prefill tokens computed':38s} {row['fast_work_per_slow']:10.3f}")
    print(f"{policy}: {failed} check(s) failed" if failed else f"{policy}: every check passed")
    return 1 if failed else 0


def fixed(paths: list[str]) -> int:
    passed: dict[str, int] = {}
    total = scenarios = 0
    default = ""
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                grid = load(f)
        except (OSError, json.JSONDecodeError, ValueError) as e:
            print(f"grid-bar: {path}: not the JSON of kvrouter sim --grid --json: {e}", file=sys.stderr)
            return 2
        for sc in grid["scenarios"]:
            labels = [r["label"] for r in sc["rows"]]
            if "round-robin" not in labels:
                print(f"grid-bar: {path}: scenario {sc['name']!r} has no round-robin row", file=sys.stderr)
                return 2
            if scenarios and set(labels) != set(passed):
                print(f"grid-bar: {path}: scenario {sc['name']!r} has other rows than the first scenario", file=sys.stderr)
                return 2
            default = sc.get("default_kv", default)
            scenarios += 1
            for label in labels:
                c = checks(sc, label)
                passed[label] = passed.get(label, 0) + sum(ok for *_, ok in c)
            total += len(c)
    print(f"each row held fixed across {scenarios} scenarios: checks passed of {total}")
    for label, n in sorted(passed.items(), key=lambda kv: (-kv[1], kv[0])):
        note = "  (kv's default)" if label == default else ""
        print(f"  {label:24s} {n:5d}{note}")
    return 0


def main() -> int:
    if len(sys.argv) >= 3 and sys.argv[1] == "--fixed":
        return fixed(sys.argv[2:])
    if len(sys.argv) != 2 or sys.argv[1].startswith("--"):
        print("\n".join(line.strip() for line in __doc__.strip().splitlines()[2:4]), file=sys.stderr)
        return 2
    return check_policy(sys.argv[1])


if __name__ == "__main__":
    sys.exit(main())
