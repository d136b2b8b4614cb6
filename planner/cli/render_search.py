"""Rendering of ``planner search``: the table of the best plans with their variants, its footer
(what was enumerated and pruned, ties, the interval and plausibility of plan 1) and the
explanation of why alternatives lost; for graph models, the plans, plan 1's stage graph and the
per-choice explanation."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from planner.cli.render import gib_text, mfu_basis, recompute_text, sharding_text, widened_note

TRAINING_COLUMNS = {
    "days_to_train": ("days", lambda v: f"{v:,.1f}"),
    "gpu_hours": ("GPU-h", lambda v: f"{v:,.0f}"),
    "cost_usd": ("cost $", lambda v: f"{v:,.0f}"),
    "energy_kwh": ("MWh", lambda v: f"{v / 1e3:,.0f}"),
}
"""Columns shown when ``--tokens`` (and a price) were given: header and format."""


def _letter(j: int) -> str:
    return "abcdefghijklmnopqrstuvwxyz"[j] if j < 26 else f"+{j}"


def _plan_cells(p: dict, alternative: bool = False) -> list[str]:
    """The cells of one plan (or one of its equivalent alternatives) in the search table."""
    layers = p["layers_per_stage"]
    lay = (
        "even"
        if len(set(layers)) <= 1
        else ",".join(map(str, layers[:6])) + ("..." if len(layers) > 6 else "")
    )
    rec = recompute_text(p) + (f"({p['recompute_num_layers']})" if p["recompute_num_layers"] else "")
    if p.get("offload_layers"):
        rec += f", offload {p['offload_layers']}"
    cells = [
        str(p["tp"]),
        str(p["pp"]),
        str(p["dp"]),
        str(p["cp"]),
        str(p["ep"]),
        str(p["vpp"]),
        str(p["micro_batch_size"]),
        p["schedule"] + (f", ranks {p['rank_order']}" if p.get("rank_order") else ""),
        rec,
        sharding_text(p),
        lay,
        f"{p['step_time_s']:.3f}",
        f"{p['tokens_per_s_per_gpu']:,.0f}",
    ]
    if alternative:
        return cells + ["", gib_text(p["peak_memory_bytes"]), ""]
    above = p.get("plausibility", {}).get("above_best_published")
    return cells + [
        f"{100 * p['mfu']:.1f}%" + ("[bold yellow]![/]" if above else ""),
        gib_text(p["peak_memory_bytes"]),
        f"{100 * p['bubble_fraction']:.1f}%",
    ]


def search_tables(d: dict) -> list[Table]:
    t = Table(title=f"Best plans for {d['model']['name']} on {d['cluster']['num_gpus']} GPUs")
    for col in (
        "#",
        "tp",
        "pp",
        "dp",
        "cp",
        "ep",
        "vpp",
        "mbs",
        "schedule",
        "recompute",
        "sharding",
        "layers/stage",
        "step s",
        "tok/s/GPU",
        "MFU",
        "peak GiB",
        "bubble",
    ):
        t.add_column(col, justify="right")
    training = [k for k in TRAINING_COLUMNS if any(k in p for p in d["plans"])]
    for k in training:
        t.add_column(TRAINING_COLUMNS[k][0], justify="right")
    for i, p in enumerate(d["plans"], 1):
        t.add_row(str(i), *_plan_cells(p), *(TRAINING_COLUMNS[k][1](p[k]) for k in training))
        for j, a in enumerate(p.get("alternatives", [])):
            # a variant: the same layout with other vpp, micro-batch size, schedule, split or rank order
            t.add_row(
                f"{i}{_letter(j)}", *_plan_cells(a, alternative=True), *("" for _ in training), style="dim"
            )
    s = d["search"]
    foot = Table(show_header=False)
    foot.add_column("k")
    foot.add_column("v", justify="right")
    foot.add_row("shapes enumerated / simulated", f"{s['shapes_enumerated']} / {s['shapes_simulated']}")
    foot.add_row("pruned: memory / bound", f"{s['pruned_by_memory']} / {s['pruned_by_bound']}")
    if any(p.get("alternatives") for p in d["plans"]):
        foot.add_row(
            "1a, 1b, ...", "variants: the same layout with other vpp, micro-batch size, schedule or split"
        )
    if mfu_basis(d):
        foot.add_row("MFU", "of the dense BF16 peak, FP8 jobs included (Megatron's convention)")
    ties = d.get("ties")
    if ties and ties["tied_plans"] > 1:
        shown = sum(1 for p in d["plans"] if p.get("tied_with_best"))
        foot.add_row(
            f"[bold]tied: plans 1-{shown}[/]" if shown > 1 else "[bold]tied[/]",
            f"predicted within {100 * ties['gap_fraction']:.1f}% of the fastest: closer than the model can "
            "resolve; listed most robust first (fewer special features, then memory headroom)",
        )
    interval = d["plans"][0].get("prediction_interval") if d["plans"] else None
    if interval:
        lo, hi = interval["tokens_per_s_per_gpu"]
        slo, shi = interval["step_time_s"]
        foot.add_row(
            f"plan 1, {100 * interval['level']:.0f}% interval",
            f"{lo:,.0f}-{hi:,.0f} tok/s/GPU, {slo:.3g}-{shi:.3g} s/step (held-out errors of "
            f"{escape(interval['class'])}, {interval['runs']} runs{widened_note(interval)})",
        )
    flagged = [p["plausibility"] for p in d["plans"] if p.get("plausibility", {}).get("above_best_published")]
    if flagged:
        f = flagged[0]
        foot.add_row(
            "MFU!",
            f"above the best published MFU of its class ({f['class']}: {100 * f['best_published_mfu']:.1f}%, "
            f"{f['best_published_run']})",
        )
    for reason in (
        (d["plans"][0].get("plausibility") or {}).get("outside_calibration", []) if d["plans"] else []
    ):
        foot.add_row("[bold yellow]plan 1 outside calibration[/]", escape(reason))
    tables = [t, foot]
    if "explain" in d:
        e = Table(title="Why the alternatives lost")
        for col in ("dimension", "value", "slower", "reason"):
            e.add_column(col)
        for row in d["explain"]:
            slower = "-" if row["slower_fraction"] is None else f"{100 * row['slower_fraction']:.1f}%"
            e.add_row(row["dimension"], str(row["value"]), slower, row["reason"])
        tables.append(e)
    return tables


# ------------------------------------------------------------------------------------------------
# Graph models


def _graph_plan_row(t: Table, label: str, p: dict) -> None:
    t.add_row(
        label,
        "sequential" if p["sequential"] else "graph",
        str(p["tp"]),
        str(p["pipelines"]),
        str(p["num_stages"]),
        str(p["micro_batch_size"]),
        p["recompute"],
        f"{p['step_time_s']:.3f}",
        f"{p['tokens_per_s_per_gpu']:,.0f}",
        f"{100 * p['mfu']:.1f}%",
        gib_text(p["peak_memory_bytes"]),
        f"{100 * p['bubble_fraction']:.1f}%",
    )


def graph_search_tables(d: dict) -> list[Table]:
    t = Table(title=f"Best graph-pipeline plans for {d['model']['name']} on {d['cluster']['num_gpus']} GPUs")
    for col in (
        "#",
        "kind",
        "tp",
        "pipelines",
        "stages",
        "mbs",
        "recompute",
        "step s",
        "tok/s/GPU",
        "MFU",
        "peak GiB",
        "bubble",
    ):
        t.add_column(col, justify="right")
    for i, p in enumerate(d["plans"], 1):
        _graph_plan_row(t, str(i), p)
    if d["sequential_plan"] is not None:
        _graph_plan_row(t, "seq", d["sequential_plan"])
    tables = [t]
    best = d["plans"][0]
    st = Table(title="Stage graph of plan 1 (GPUs over all pipelines)")
    for col in ("stage", "layers", "GPUs", "tp", "replicas", "depth", "ms/micro-batch", "peak GiB", "feeds"):
        st.add_column(col, justify="left" if col in ("layers", "feeds") else "right")
    edges = best["stage_graph"]["edges"]
    for s in best["stage_graph"]["stages"]:
        feeds = ",".join(str(b) for a, b in edges if a == s["stage"]) or "-"
        st.add_row(
            str(s["stage"]),
            s["label"],
            str(s["gpus"]),
            str(s["tp"]),
            str(s["replicas"]),
            str(s["depth"]),
            f"{1e3 * s['time_per_microbatch_s']:.1f}",
            gib_text(s["peak_memory_bytes"]),
            feeds,
        )
    tables.append(st)
    foot = Table(show_header=False)
    foot.add_column("k")
    foot.add_column("v", justify="right")
    foot.add_row("decomposition", d["decomposition"])
    speed = d["speedup_vs_sequential"]
    foot.add_row("speedup vs sequential", f"{speed:.3f}x" if speed else "n/a")
    s = d["search"]
    foot.add_row("candidates / partitioned", f"{s['candidates']} / {s['partitioned']}")
    foot.add_row("no fit / pruned by bound", f"{s['no_fit']} / {s['pruned_by_bound']}")
    tables.append(foot)
    if "explain" in d:
        e = Table(title="Best plan per branched/serialised choice (parallel nodes in decomposition order)")
        for col in ("branched", "tp", "pipelines", "stages", "mbs", "recompute", "step s", "slower"):
            e.add_column(col, justify="left" if col == "branched" else "right")
        for row in d["explain"]:
            sh = row["shape"]
            e.add_row(
                ",".join("yes" if b else "no" for b in row["branched"]) or "-",
                str(sh["tp"]),
                str(sh["pipelines"]),
                str(sh["num_stages"]),
                str(sh["micro_batch_size"]),
                sh["recompute"],
                f"{row['step_time_s']:.3f}",
                f"{100 * row['slower_than_best']:.1f}%",
            )
        tables.append(e)
    return tables
