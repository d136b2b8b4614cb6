#!/usr/bin/env python3
"""The papers planner stands on, reproduced side by side: each paper's claim computed by planner on
the paper's own setting, the paper's figure, the ratio, whether it is within the stated bound and,
when not, why (issue 57; the table and the discussion are docs/papers.md).

Papers: Nonuniform Tensor Parallelism (Arfeen et al. 2025, arXiv:2504.06095), AMP (Li et al. 2022,
arXiv:2210.07297, code DachengLi1/AMP), PipeFill (Arfeen et al. 2024/2025, arXiv:2410.07192) and
GraphPipe (Jeon et al. 2024/2025, arXiv:2406.17145), and Hagemann et al. 2023's layout sweep
(arXiv:2311.05610). Each row cites where its setting and its
paper figure come from. Bounds (issue 57): NTP's losses within 1.5x, GraphPipe's speedups within
15%, AMP's gain within 25%; a claim stated as an upper bound ("< 3%") is met when planner's figure
is at most the bound times the paper's. The claims are computed in ``scripts/_paper_claims.py``
(the :class:`Row` record, NTP, PipeFill) and ``scripts/_paper_searches.py`` (AMP, GraphPipe,
Hagemann); this script tables them.

Usage: python scripts/reproduce_papers.py [--json] [--only ntp,amp,pipefill,graphpipe,hagemann]

``--json`` prints ``{"rows": [{"paper", "key", "claim", "setting", "source", "paper_value",
"planner_value", "ratio", "bound", "within_bound", "why_not"}]}``. Same inputs, same output: every
figure comes from the cost model, no timing or randomness.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for _path in (ROOT, ROOT / "scripts"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from _paper_claims import Row, ntp_rows, pipefill_rows  # noqa: E402
from _paper_searches import amp_rows, graphpipe_rows, hagemann_rows  # noqa: E402

PAPERS = ("ntp", "amp", "pipefill", "graphpipe", "hagemann")


SECTIONS: dict[str, Callable[[], list[Row]]] = {
    "ntp": ntp_rows,
    "amp": amp_rows,
    "pipefill": pipefill_rows,
    "graphpipe": graphpipe_rows,
    "hagemann": hagemann_rows,
}


def rows(only: tuple[str, ...] = PAPERS) -> list[Row]:
    out: list[Row] = []
    for name in PAPERS:
        if name in only and name in SECTIONS:
            out += SECTIONS[name]()
    return out


def _fmt(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.4g}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    ap.add_argument("--only", default=",".join(PAPERS), help=f"comma-separated subset of {', '.join(PAPERS)}")
    args = ap.parse_args(argv)
    only = tuple(s.strip() for s in args.only.split(",") if s.strip())
    unknown = [s for s in only if s not in PAPERS]
    if unknown:
        print(f"--only: unknown {', '.join(unknown)}; choose from {', '.join(PAPERS)}", file=sys.stderr)
        return 2
    result = [r.as_dict() for r in rows(only)]
    if args.json:
        print(json.dumps({"rows": result}, indent=2))
        return 0
    for r in result:
        mark = "ok " if r["within_bound"] else "NOT"
        print(
            f"{mark} {r['key']:<24} paper {_fmt(r['paper_value']):>8}  planner {_fmt(r['planner_value']):>8}  "
            f"ratio {_fmt(r['ratio']):>7}  ({r['bound']})  {r['claim']}"
        )
        if r["why_not"]:
            print(f"      why not: {r['why_not']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
