"""Rich output of ``planner whatif``, ``planner goodput`` and ``search --failure-aware`` (from their
JSON views, so the tables show exactly what ``--json`` prints)."""

from __future__ import annotations

from rich.table import Table


def _plan_title(p: dict) -> str:
    return (
        f"{p['model']} on {p['num_gpus']} {p['gpu']} ({p['num_nodes']} x {p['gpus_per_node']}, NVLink domain "
        f"{p['nvlink_domain_size']}): tp {p['tp']} pp {p['pp']} cp {p['cp']} dp {p['dp']}"
    )


def _replicas(rows: list[dict]) -> str:
    return ", ".join(f"{r['count']} x tp{r['tp']} @ {r['microbatches']} mb" for r in rows)


def whatif_tables(d: dict) -> list[Table]:
    """The failure and one row per strategy."""
    f = d["failure"]
    what = f"{f['gpus']} GPU(s)" if f["gpus"] else f"{f['nodes']} node(s)"
    hit = ", ".join(
        f"replica {h['replica']} keeps {h['surviving_tp_gpus']}/tp" for h in f["hit_replicas"][:4]
    )
    more = f" (+{len(f['hit_replicas']) - 4} more)" if len(f["hit_replicas"]) > 4 else ""
    t = Table(
        title=f"What if {what} fail: {_plan_title(d['plan'])}",
        caption=f"failed nodes {f['failed_nodes'][:8]}; {hit}{more}",
    )
    for col in (
        "strategy",
        "variant",
        "step s",
        "tokens/s",
        "relative",
        "GPUs",
        "batch",
        "fits",
        "replicas",
        "note",
    ):
        t.add_column(col, justify="left" if col in ("strategy", "variant", "replicas", "note") else "right")
    h = d["healthy"]
    t.add_row(
        "healthy", "", f"{h['step_time_s']:.3f}", f"{h['tokens_per_s']:,.0f}", "1.000", str(h["gpus"]),
        str(d["plan"]["global_batch_size"]), "", "", "",
    )  # fmt: skip
    for s in d["strategies"]:
        if not s["feasible"]:
            t.add_row(s["name"], s["variant"], "-", "-", "0.000", "-", "-", "-", "", s["note"])
            continue
        t.add_row(
            s["name"],
            s["variant"],
            f"{s['step_time_s']:.3f}",
            f"{s['tokens_per_s']:,.0f}",
            f"{s['relative']:.3f}",
            str(s["gpus_used"]),
            str(s["global_batch_size"]),
            "yes" if s["fits"] else "NO",
            _replicas(s["replicas"]),
            s["note"],
        )
    return [t]


def _gigabytes(n: float) -> str:
    """Bytes as GB: whole GB from 10 GB up, two decimals below (a LoRA job's adapters)."""
    gb = n / 1e9
    return f"{gb:,.0f}" if gb >= 10 else f"{gb:.2f}"


def goodput_tables(d: dict) -> list[Table]:
    """Checkpointing figures and the spare-node scan."""
    ck, fm = d["checkpoint"], d["failure_model"]
    a = Table(title=f"Goodput over {fm['run_days']:g} days: {_plan_title(d['plan'])}")
    a.add_column("quantity")
    a.add_column("value", justify="right")
    for name, value in (
        ("failures per day", f"{d['failures_per_day']:.2f}"),
        ("job MTBF (h)", f"{ck['mtbf_s'] / 3600:.2f}"),
        ("checkpoint (GB)", _gigabytes(ck["bytes"])),
        *(
            [("restore reads (GB)", _gigabytes(ck["restore_bytes"]))]
            if ck["restore_bytes"] != ck["bytes"]
            else []
        ),
        ("save / restore (s)", f"{ck['save_s']:.1f} / {ck['restore_s']:.1f}"),
        ("restart incl. restore (s)", f"{ck['restart_s']:.0f}"),
        ("Young interval (min)", f"{ck['young_interval_s'] / 60:.1f}"),
        ("Daly interval (min)", f"{ck['daly_interval_s'] / 60:.1f}"),
        ("useful fraction", f"{ck['useful_fraction']:.4f}"),
        ("best spare nodes", str(d["best"]["spare_nodes"])),
        ("goodput / healthy", f"{d['summary']['goodput_fraction']:.4f}"),
    ):
        a.add_row(name, value)
    b = Table(title="Hot spares")
    for col in ("spare nodes", "replicas", "tokens/s", "useful", "available", "goodput tokens/s"):
        b.add_column(col, justify="right")
    for o in d["spares"]:
        mark = " *" if o == d["best"] else ""
        b.add_row(
            f"{o['spare_nodes']}{mark}",
            str(o["replicas"]),
            f"{o['tokens_per_s']:,.0f}",
            f"{o['useful_fraction']:.4f}",
            f"{o['availability']:.4f}",
            f"{o['goodput_tokens_per_s']:,.0f}",
        )
    return [a, b]


def failure_aware_table(plans: list[dict]) -> Table:
    """Goodput of the plans ``search --failure-aware`` ranked."""
    t = Table(title="Ranked by expected goodput (planner search --failure-aware)")
    for col in ("#", "tp", "pp", "dp", "cp", "step s", "tokens/s", "goodput tokens/s", "goodput", "spares"):
        t.add_column(col, justify="right")
    for i, p in enumerate(plans, 1):
        g = p["goodput"]
        t.add_row(
            str(i), str(p["tp"]), str(p["pp"]), str(p["dp"]), str(p["cp"]), f"{p['step_time_s']:.3f}",
            f"{g['healthy_tokens_per_s']:,.0f}", f"{g['goodput_tokens_per_s']:,.0f}",
            f"{g['goodput_fraction']:.4f}", str(g["best_spare_nodes"]),
        )  # fmt: skip
    return t
