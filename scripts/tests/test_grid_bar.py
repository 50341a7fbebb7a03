"""scripts/grid-bar.py on a hand-made grid whose every check is worked out below."""

from __future__ import annotations

import json
import pathlib
import re
import subprocess
import sys

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "grid-bar.py"


def row(label, p50, p90, itl, hit=1.0, share=0.25, fast_per_slow=0.0, kv=True):
    return {
        "label": label,
        "kv_setting": {"credit": 1, "scale": 1, "clamp": True} if kv else None,
        "fast_per_slow": fast_per_slow,
        "result": {"workers": 4, "ttft_p50_ms": p50, "ttft_p90_ms": p90, "itl_p99_ms": itl,
                   "hit_ratio_over_bound": hit, "max_worker_share": share},
    }


# Uniform fleet of 4 (7 checks a row): best kv is "kv a" (p50 100, p90 200, itl 10);
# limits p50 <= 105, p90 <= 210, itl <= 11, hit >= 0.97, share <= 0.375, below
# round-robin's 150 / 400.
#   kv a:        all 7 pass.
#   kv b:        p50 106 fails, p90 300 fails, rest pass (hit 0.98, share 0.3)    -> 5.
#   x:           p50 104, p90 209 pass; itl 12 fails; hit 0.96 fails; share 0.4 fails -> 4.
#   round-robin: p50/p90 fail both ways (4), itl 10 passes, hit 0.5 fails, share 0.25 passes -> 2.
UNIFORM = {
    "name": "uniform", "speeds": [1, 1, 1, 1], "best_kv": "kv a", "default_kv": "kv b",
    "rows": [
        row("kv a", 100, 200, 10),
        row("kv b", 106, 300, 10, hit=0.98, share=0.3),
        row("round-robin", 150, 400, 10, hit=0.5, kv=False),
        row("x", 104, 209, 12, hit=0.96, share=0.4, kv=False),
    ],
}
# Half-fast fleet (6 checks a row): best kv is "kv b" (p50 50, p90 100, itl 20);
# limits p50 <= 52.5, p90 <= 105, itl <= 22, below round-robin's 60 / 90, fast per slow > 1.
#   kv a:        p50 55 fails, p90 95 passes; below rr: p50 passes, p90 fails; itl passes; fps 2 passes -> 4.
#   kv b:        p90 100 >= rr 90 fails; the rest pass                              -> 5.
#   x:           all pass (p50 40, p90 80, itl 22, fps 1.5)                            -> 6.
#   round-robin: p50 60 > 52.5 fails, p90 90 passes, not below itself (2 fail), itl passes, fps 0.9 fails -> 2.
HETERO = {
    "name": "half-fast", "speeds": [1, 1, 2, 2], "best_kv": "kv b", "default_kv": "kv b",
    "rows": [
        row("kv a", 55, 95, 20, fast_per_slow=2),
        row("kv b", 50, 100, 20, fast_per_slow=1.2),
        row("round-robin", 60, 90, 20, fast_per_slow=0.9, kv=False),
        dict(row("x", 40, 80, 22, fast_per_slow=1.5, kv=False), fast_work_per_slow=4.25),
    ],
}


def run(args, stdin=None):
    return subprocess.run([sys.executable, str(SCRIPT), *args], input=stdin, capture_output=True, text=True, check=False)


def test_fixed_counts_each_row_over_every_scenario(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps({"scenarios": [UNIFORM]}))
    b.write_text(json.dumps({"scenarios": [HETERO]}))
    res = run(["--fixed", str(a), str(b)])
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == "each row held fixed across 2 scenarios: checks passed of 13"
    rows = [re.fullmatch(r"  (.+?) +(\d+)(  \(kv's default\))?", line) for line in lines[1:]]
    assert all(rows), lines
    got = [(m[1], int(m[2]), bool(m[3])) for m in rows]
    # Most checks first, ties by label; the default marked from the grids' default_kv.
    assert got == [("kv a", 7 + 4, False), ("kv b", 5 + 5, True), ("x", 4 + 6, False), ("round-robin", 2 + 2, False)]


def test_policy_mode_exit_codes(tmp_path):
    res = run(["x"], stdin=json.dumps({"scenarios": [HETERO]}))
    assert res.returncode == 0 and "x: every check passed" in res.stdout
    # Six checks, and the ratio by work beside the fast workers' one, as information.
    assert res.stdout.count("PASS") == 6 and "FAIL" not in res.stdout
    assert "by prefill tokens computed" in res.stdout and "4.250" in res.stdout
    res = run(["x"], stdin=json.dumps({"scenarios": [UNIFORM, HETERO]}))
    assert res.returncode == 1 and "x: 3 check(s) failed" in res.stdout
    assert run(["x"], stdin="not json").returncode == 2
    assert run(["missing"], stdin=json.dumps({"scenarios": [UNIFORM]})).returncode == 2
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert run(["--fixed", str(bad)]).returncode == 2
