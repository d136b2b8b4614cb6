"""Rendering of ``planner sweep``: the rich table and a hand-written SVG chart (no plotting
dependency): tokens/s per GPU against the number of GPUs, one line per cluster (per cluster and
question in a study: model, global batch, sequence length, where they vary)."""

from __future__ import annotations

from xml.sax.saxutils import escape

from rich.table import Table

from planner.cli.render import recompute_text

COLOURS = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7")


STUDY_HEADS = {"model": "model", "global_batch_size": "batch", "seq_length": "seq"}
"""A study's leading columns (each point's question) and their heads."""


def sweep_table(d: dict) -> Table:
    rows = d["points"]
    study = "study" in d
    training = [
        k for k in ("days_to_train", "gpu_hours", "cost_usd", "energy_kwh") if any(k in r for r in rows)
    ]
    if study:
        t = Table(title=f"Sweep: {d['study']['path']} ({len(rows)} point{'s' * (len(rows) > 1)})")
        for head in STUDY_HEADS.values():
            t.add_column(head, justify="left" if head == "model" else "right")
    else:
        t = Table(title=f"Sweep: {d['model']} (global batch {d['global_batch_size']}, seq {d['seq_length']})")
    for col in ("cluster", "nodes", "GPUs", "plan", "step s", "tok/s", "tok/s/GPU", "MFU", "scaling"):
        t.add_column(col, justify="left" if col in ("cluster", "plan") else "right")
    heads = {"days_to_train": "days", "gpu_hours": "GPU-h", "cost_usd": "cost $", "energy_kwh": "MWh"}
    for k in training:
        t.add_column(heads[k], justify="right")
    best = set(d["best_points"]) if study else {d.get("best_point")}
    for i, r in enumerate(rows):
        mark = " *" if i in best else ""
        lead = [str(r[k]) for k in STUDY_HEADS] if study else []
        if not r["feasible"]:
            why = f"failed: {r['error'][:60]}" if "error" in r else f"nothing fits: {r['reason'][:60]}"
            t.add_row(*lead, r["cluster"], str(r["nodes"]), str(r["num_gpus"]), why)
            continue
        plan = (
            f"tp{r['tp']} pp{r['pp']} dp{r['dp']} cp{r['cp']}"
            + (f" vpp{r['vpp']}" if r["vpp"] > 1 else "")
            + f" mbs{r['micro_batch_size']} {recompute_text(r)}"
        )
        cells = [
            *lead,
            r["cluster"] + mark,
            str(r["nodes"]),
            str(r["num_gpus"]),
            plan,
            f"{r['step_time_s']:.3f}",
            f"{r['tokens_per_s']:,.0f}",
            f"{r['tokens_per_s_per_gpu']:,.0f}",
            f"{100 * r['mfu']:.1f}%",
            f"{100 * r['scaling_efficiency']:.1f}%",
        ]
        fmt = {
            "days_to_train": lambda v: f"{v:,.1f}",
            "gpu_hours": lambda v: f"{v:,.0f}",
            "cost_usd": lambda v: f"{v:,.0f}",
            "energy_kwh": lambda v: f"{v / 1e3:,.0f}",
        }
        cells += [fmt[k](r[k]) if k in r else "" for k in training]
        t.add_row(*cells)
    if best - {None}:
        t.caption = f"* best by {d['objective']}" + (" per model, batch and sequence length" if study else "")
    return t


def sweep_svg(d: dict) -> str:
    """Tokens/s per GPU (y) against GPUs (x, one slot per distinct GPU count), one polyline and
    legend entry per cluster (per :func:`series_name` in a study); each point labelled with its
    days to train when known."""
    rows = [r for r in d["points"] if r["feasible"]]
    name_of = series_name(rows)
    title = d["study"]["path"] if "study" in d else d["model"]
    counts = sorted({r["num_gpus"] for r in rows})
    left, top, width, height = 80, 40, 640, 300
    total_w, total_h = left + width + 200, top + height + 60
    ymax = max((r["tokens_per_s_per_gpu"] for r in rows), default=1.0) * 1.15 or 1.0
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{total_w}" height="{total_h}" '
        f'viewBox="0 0 {total_w} {total_h}" font-family="sans-serif" font-size="11">',
        f"<title>{escape(title)} sweep</title>",
        f'<text x="{left}" y="20" font-size="13">{escape(title)}: best plan per point, '
        "tokens/s per GPU</text>",
        f'<line x1="{left}" y1="{top + height}" x2="{left + width}" y2="{top + height}" stroke="#333"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + height}" stroke="#333"/>',
    ]

    def x_of(n: int) -> float:
        return left + (counts.index(n) + 0.5) * width / max(len(counts), 1)

    def y_of(v: float) -> float:
        return top + height - v / ymax * height

    for k in range(5):
        v = ymax * k / 4
        y = y_of(v)
        parts.append(f'<line x1="{left - 4}" y1="{y:.1f}" x2="{left}" y2="{y:.1f}" stroke="#333"/>')
        parts.append(f'<text x="{left - 8}" y="{y + 4:.1f}" text-anchor="end">{v:,.0f}</text>')
    for n in counts:
        parts.append(f'<text x="{x_of(n):.1f}" y="{top + height + 16}" text-anchor="middle">{n}</text>')
    parts.append(f'<text x="{left + width / 2}" y="{top + height + 36}" text-anchor="middle">GPUs</text>')
    clusters = list(dict.fromkeys(name_of(r) for r in rows))
    for ci, name in enumerate(clusters):
        colour = COLOURS[ci % len(COLOURS)]
        pts = sorted((r for r in rows if name_of(r) == name), key=lambda r: r["num_gpus"])
        path = " ".join(f"{x_of(r['num_gpus']):.1f},{y_of(r['tokens_per_s_per_gpu']):.1f}" for r in pts)
        parts.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for r in pts:
            x, y = x_of(r["num_gpus"]), y_of(r["tokens_per_s_per_gpu"])
            label = f"{r['tokens_per_s_per_gpu']:,.0f}" + (
                f" ({r['days_to_train']:,.1f} d)" if "days_to_train" in r else ""
            )
            parts.append(
                f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{colour}"><title>{escape(name)} '
                f"{r['num_gpus']} GPUs: {escape(label)}</title></circle>"
            )
            parts.append(f'<text x="{x + 6:.1f}" y="{y - 6:.1f}" fill="{colour}">{escape(label)}</text>')
        ly = top + 14 + ci * 18
        parts.append(f'<rect x="{left + width + 20}" y="{ly - 9}" width="12" height="12" fill="{colour}"/>')
        parts.append(f'<text x="{left + width + 38}" y="{ly + 1}">{escape(name)}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def series_name(rows: list[dict]):
    """A row's line in the chart: its cluster, preceded by its model, global batch (``b``) and
    sequence length (``s``) where the rows hold more than one of them (a study)."""
    varying = [k for k in STUDY_HEADS if len({r.get(k) for r in rows}) > 1]
    prefix = {"model": "", "global_batch_size": "b", "seq_length": "s"}

    def name(r: dict) -> str:
        return " ".join([*(f"{prefix[k]}{r[k]}" for k in varying), r["cluster"]])

    return name
