"""Run the fuzz suite (tests/test_fuzz.py) at scale and print what it found, by outcome.

    python scripts/fuzz.py                 # 250 generated cases per input kind (about 3,000 in all)
    python scripts/fuzz.py --examples 40   # a quick look
    python scripts/fuzz.py --json          # the counts as JSON

Every kind of input the suite knows (model, HF, graph-model, GPU, cluster, fill-job, plan and
Megatron-args files, command-line numbers; and since issue 55 YAML alias bombs, special files as
output targets, extreme finite values in physical fields, empty and zero flag values) is mutated by
hypothesis with random seeds, each case run through the CLI in-process under a 60 s CPU limit.
Failed cases are recorded, not stopped at (PLANNER_FUZZ_KEEP_GOING), so the counts are complete:
tracebacks, hangs (over 60 s of CPU), special files replaced, nonsense accepted (exit 0 for an input
no real system has, or a step time under a microsecond or over 100 days), and every other broken
contract (wrong exit code, multi-line error, non-finite or invalid JSON). Exit status 1 when any
count but "ok" is non-zero. The figures go into docs/reliability.md.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CLASSES = (
    ("tracebacks", lambda o: o.startswith("traceback")),
    ("hangs over 60 s of CPU", lambda o: o == "hang"),
    ("special files replaced", lambda o: o.startswith("special file replaced")),
    ("nonsense accepted", lambda o: o.startswith("nonsense accepted")),
    ("other broken contracts", lambda o: o != "ok"),
)
"""Outcome classes in the order they are reported; a case counts in the first class it matches."""


def classify(outcome: str) -> str:
    """The class of one recorded outcome ('ok' when none)."""
    return next((name for name, test in CLASSES if test(outcome)), "ok")


def summarize(lines: list[dict], examples: int, seconds: float) -> dict:
    """Counts per class and per input kind, the slowest command, and the first few failures."""
    by_class = collections.Counter(classify(r["outcome"]) for r in lines)
    by_kind = collections.Counter(r["kind"] for r in lines)
    failures = [r for r in lines if r["outcome"] != "ok"]
    slowest = max(lines, key=lambda r: r["s"], default=None)
    return {
        "generated_cases": examples,
        "commands": len(lines),
        "wall_s": round(seconds, 1),
        "counts": {name: by_class.get(name, 0) for name, _ in CLASSES} | {"ok": by_class.get("ok", 0)},
        "commands_per_kind": dict(sorted(by_kind.items())),
        "exit_codes": dict(sorted(collections.Counter(str(r["code"]) for r in lines).items())),
        "slowest_s": slowest["s"] if slowest else 0.0,
        "slowest": list(slowest["args"]) if slowest else [],
        "failures": [
            {"kind": r["kind"], "args": r["args"], "outcome": r["outcome"], "stderr": r.get("stderr", "")}
            for r in failures[:20]
        ],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=250, help="generated cases per input kind")
    parser.add_argument("-k", default="", help="only the fuzz tests matching this pytest -k expression")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--log", type=Path, help="write pytest's whole output here")
    args = parser.parse_args(argv)
    if args.examples < 1:
        parser.error("--examples must be at least 1")
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "fuzz.jsonl"
        env = {
            **os.environ,
            "PLANNER_FUZZ_EXAMPLES": str(args.examples),
            "PLANNER_FUZZ_REPORT": str(report),
            "PLANNER_FUZZ_KEEP_GOING": "1",
        }
        # Its own --basetemp: a concurrent pytest session's clean-up of old temporary folders
        # never removes this run's files.
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--hypothesis-show-statistics",
                   f"--basetemp={Path(tmp) / 'pytest'}", str(ROOT / "tests" / "test_fuzz.py"),
                   *(["-k", args.k] if args.k else [])]  # fmt: skip
        started = time.monotonic()
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
        seconds = time.monotonic() - started
        lines = [json.loads(line) for line in report.read_text().splitlines()] if report.exists() else []
    if args.log is not None:
        args.log.write_text(done.stdout + done.stderr)
    # Hypothesis' statistics: "- 250 passing, 0 failing, and 0 invalid test cases" per test.
    examples = sum(int(a) + int(b) for a, b in re.findall(r"(\d+) passing, (\d+) failing", done.stdout))
    summary = summarize(lines, examples, seconds)
    # A test failing outside a recorded case (the suite's own code): named, and the run fails.
    summary["failed_tests"] = re.findall(r"^FAILED (\S+)", done.stdout, flags=re.M)
    if done.returncode not in (0, 1, 5) or not lines:
        sys.stderr.write(done.stdout[-3000:] + done.stderr[-3000:])
        sys.stderr.write(f"error: the fuzz run itself failed (pytest exit {done.returncode})\n")
        return 2
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(
            f"{summary['generated_cases']:,} generated cases, {summary['commands']:,} commands in "
            f"{summary['wall_s']:.0f} s (slowest command {summary['slowest_s']:.2f} s: "
            f"{' '.join(summary['slowest'])})"
        )
        for name, count in summary["counts"].items():
            print(f"  {name:<24} {count:>7,}")
        print(
            "  commands per kind: " + ", ".join(f"{k} {v:,}" for k, v in summary["commands_per_kind"].items())
        )
        print("  exit codes: " + ", ".join(f"{k}: {v:,}" for k, v in summary["exit_codes"].items()))
        for f in summary["failures"]:
            print(f"  FAILED {f['kind']}: {' '.join(map(str, f['args']))}: {f['outcome']}")
        for name in summary["failed_tests"]:
            print(f"  FAILED TEST {name} (outside a recorded case; see --log)")
    bad = any(v for k, v in summary["counts"].items() if k != "ok") or summary["failed_tests"]
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
