"""One plan as a self-contained HTML page: what ``planner report PLAN --html FILE`` writes.

The page holds everything inline (CSS, SVG; no script, font, image or style sheet from elsewhere),
so it can be mailed, attached to a ticket or opened offline. Sections, each an element with an id
the tests look for: ``summary`` (predictions), ``timeline`` (:func:`planner.outputs.timeline_svg.timeline_svg`),
``time`` (the estimate's ``time`` section, which sums to the step time, as a table and a stacked
bar), ``memory`` (memory per stage as a stacked bar chart against each GPU's capacity),
``configuration``, ``plausibility`` (the best published MFU of the plan's class),
``alternatives`` (equivalent variants, when the plan file lists them, checked as an input) and
``budget`` (the compact bubble-fill budget a plan file records, re-computed from the re-estimate,
never read from the file). Every other number comes from :func:`planner.outputs.views.estimate_dict`
of the re-estimated plan.
"""

from __future__ import annotations

from html import escape

from planner.outputs.timeline_svg import timeline_svg

GIB = 1024**3

TIME_PARTS = (
    ("compute_s", "compute", "#4e79a7"),
    ("recompute_s", "recompute", "#76b7b2"),
    ("tp_cp_ep_comm_s", "tensor/context/expert-parallel communication", "#edc948"),
    ("fsdp_exposed_s", "exposed FSDP / ZeRO-2 communication", "#ff9da7"),
    ("offload_exposed_s", "exposed activation offload", "#d4a6c8"),
    ("bubble_s", "pipeline bubble and point-to-point waits", "#bab0ac"),
    ("dp_exposed_s", "exposed data-parallel communication", "#e15759"),
    ("optimizer_s", "optimizer step", "#b07aa1"),
    ("param_gather_exposed_s", "exposed parameter gather", "#9c755f"),
)
"""Keys of the estimate's ``time`` section that add up to ``step_time_s``, in iteration order."""

MEMORY_PARTS = (
    ("weights_bytes", "weights", "#4e79a7"),
    ("gradients_bytes", "gradients", "#f28e2b"),
    ("optimizer_bytes", "optimizer states", "#59a14f"),
    ("activations_bytes", "activations", "#e15759"),
    ("transient_bytes", "transient (recompute, loss, offload copy)", "#ff9da7"),
    ("reserve_bytes", "framework reserve", "#bab0ac"),
)
"""Keys of a stage's memory row that add up to its ``peak_bytes``."""

CSS = """
body { font-family: sans-serif; margin: 24px; color: #222; max-width: 1500px; }
h1 { font-size: 22px; margin-bottom: 4px; } h2 { font-size: 17px; margin-top: 28px; }
.sub { color: #555; margin-top: 0; }
.cards { display: flex; flex-wrap: wrap; gap: 10px; }
.card { border: 1px solid #ddd; border-radius: 6px; padding: 8px 14px; min-width: 120px; }
.card .v { font-size: 20px; font-weight: bold; } .card .k { color: #555; font-size: 12px; }
table { border-collapse: collapse; font-size: 13px; }
th, td { border-bottom: 1px solid #e3e3e3; padding: 3px 10px; text-align: right; }
th:first-child, td:first-child { text-align: left; }
.scroll { overflow-x: auto; border: 1px solid #eee; }
.scroll svg, #memory-chart, #time-bar { max-width: 100%; height: auto; }
.warn { color: #b00020; font-weight: bold; } .ok { color: #1b7a1b; font-weight: bold; }
.swatch { display: inline-block; width: 11px; height: 11px; margin-right: 5px; vertical-align: middle; }
"""


def _num(x, digits: int = 4) -> str:
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        return f"{x:,.{digits}g}" if abs(x) < 1e6 else f"{x:,.0f}"
    return escape(str(x))


def _table(headers: list[str], rows: list[list[str]], cls: str = "") -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _section(sid: str, title: str, body: str) -> str:
    return f'<section id="{sid}"><h2>{escape(title)}</h2>{body}</section>'


def _summary(d: dict) -> str:
    cards = [
        ("step time", f"{d['step_time_s']:.3f} s"),
        ("tokens/s", f"{d['tokens_per_s']:,.0f}"),
        ("tokens/s per GPU", f"{d['tokens_per_s_per_gpu']:,.0f}"),
        ("MFU", f"{100 * d['mfu']:.1f}%"),
        ("HFU", f"{100 * d['hfu']:.1f}%"),
        ("pipeline bubble", f"{100 * d['bubble_fraction']:.1f}%"),
        ("peak memory", f"{d['peak_memory_bytes'] / GIB:.1f} GiB"),
        ("fits", "yes" if d["fits"] else "NO"),
    ]
    for key, label, fmt in (
        ("days_to_train", "days to train", "{:,.1f}"),
        ("gpu_hours", "GPU-hours", "{:,.0f}"),
        ("cost_usd", "cost (USD)", "{:,.0f}"),
        ("energy_kwh", "energy (kWh)", "{:,.0f}"),
    ):
        if d.get(key) is not None:
            cards.append((label, fmt.format(d[key])))
    return (
        '<div class="cards">'
        + "".join(
            f'<div class="card"><div class="v">{escape(v)}</div><div class="k">{escape(k)}</div></div>'
            for k, v in cards
        )
        + "</div>"
    )


def _time(d: dict) -> str:
    t = d["time"]
    step = t["step_time_s"]
    parts = [(label, colour, float(t.get(key, 0.0))) for key, label, colour in TIME_PARTS]
    width, x, bar = 1100.0, 0.0, []
    total = sum(v for _, _, v in parts) or 1.0
    for label, colour, v in parts:
        w = v / total * width
        if w > 0:
            bar.append(
                f'<rect x="{x:.2f}" y="0" width="{w:.2f}" height="26" fill="{colour}">'
                f"<title>{escape(label)}: {v:.4g} s</title></rect>"
            )
        x += w
    svg = f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="26" id="time-bar">{"".join(bar)}</svg>'
    rows = [
        [
            f'<span class="swatch" style="background:{c}"></span>{escape(label)}',
            f"{v:.4g}",
            f"{100 * v / step:.1f}%",
        ]
        for label, c, v in parts
    ]
    rows.append(["<b>sum (step time)</b>", f"<b>{sum(v for _, _, v in parts):.4g}</b>", "<b>100%</b>"])
    note = (
        f"<p>Terms of the busiest stage, {t['slowest_stage']} (the most busy time); the critical stage, "
        f"whose pipeline phase plus exposed reduction ends last, is {t['critical_stage']}; pipeline phase "
        f"{t['pipeline_s']:.4g} s.</p>"
    )
    return svg + _table(["component", "seconds", "share"], rows, "time-table") + note


def _memory(d: dict) -> str:
    stages = d["memory"]["per_stage"]
    lane, left, width = 24, 170, 900.0
    top_cap = max(max(s["capacity_bytes"], s["peak_bytes"]) for s in stages) or 1.0
    height = len(stages) * (lane + 6) + 40
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 150:.0f}" height="{height}" id="memory-chart" font-family="sans-serif" font-size="11">'
    ]
    for i, s in enumerate(stages):
        y = 6 + i * (lane + 6)
        out.append(f'<text x="4" y="{y + 16}">stage {s["stage"]} \u00b7 {escape(s["gpu"])}</text>')
        x = float(left)
        for key, label, colour in MEMORY_PARTS:
            w = s[key] / top_cap * width
            if w > 0:
                out.append(
                    f'<rect x="{x:.2f}" y="{y}" width="{w:.2f}" height="{lane}" fill="{colour}">'
                    f"<title>{label}: {s[key] / GIB:.2f} GiB</title></rect>"
                )
            x += w
        cap_x = left + s["capacity_bytes"] / top_cap * width
        out.append(
            f'<line x1="{cap_x:.2f}" y1="{y - 2}" x2="{cap_x:.2f}" y2="{y + lane + 2}" stroke="#000" stroke-width="2"/>'
        )
        colour = "#1b7a1b" if s["fits"] else "#b00020"
        out.append(
            f'<text x="{left + width + 8:.0f}" y="{y + 16}" fill="{colour}">'
            f"{s['peak_bytes'] / GIB:.1f} / {s['capacity_bytes'] / GIB:.0f} GiB</text>"
        )
    y = 6 + len(stages) * (lane + 6) + 14
    x = float(left)
    for _, label, colour in MEMORY_PARTS:
        out.append(
            f'<rect x="{x:.0f}" y="{y - 10}" width="11" height="11" fill="{colour}"/><text x="{x + 15:.0f}" y="{y}">{label}</text>'
        )
        x += 22 + 6.2 * len(label)
    out.append(
        f'<line x1="{x:.0f}" y1="{y - 11}" x2="{x:.0f}" y2="{y + 2}" stroke="#000" stroke-width="2"/><text x="{x + 6:.0f}" y="{y}">GPU capacity</text>'
    )
    out.append("</svg>")
    rows = [
        [
            str(s["stage"]),
            escape(s["gpu"]),
            escape("+".join(map(str, s["layers"]))),
            *(f"{s[k] / GIB:.1f}" for k, _, _ in MEMORY_PARTS),
            f"{s['peak_bytes'] / GIB:.1f}",
            f"{s['capacity_bytes'] / GIB:.1f}",
            f"{s['peak_inflight_microbatches']:.1f}",
            '<span class="ok">yes</span>' if s["fits"] else '<span class="warn">no</span>',
        ]
        for s in stages
    ]
    headers = [
        "stage",
        "GPU",
        "layers",
        *(label for _, label, _ in MEMORY_PARTS),
        "peak",
        "capacity",
        "in flight",
        "fits",
    ]
    return "".join(out) + "<p>GiB per GPU.</p>" + _table(headers, rows, "memory-table")


def _kv(data: dict) -> str:
    rows = []
    for k in sorted(data):
        v = data[k]
        if isinstance(v, (dict, list)):
            v = (
                ", ".join(map(str, v))
                if isinstance(v, list)
                else ", ".join(f"{a}={b}" for a, b in sorted(v.items()))
            )
            rows.append([escape(k), escape(v) or "(none)"])
        else:
            rows.append([escape(k), _num(v)])
    return _table(["field", "value"], rows)


def _plausibility(p: dict) -> str:
    verdict = (
        '<p class="warn">The predicted MFU is above the best published run of this class: treat it with care.</p>'
        if p.get("above_best_published")
        else '<p class="ok">The predicted MFU is within what published runs of this class reached.</p>'
    )
    return verdict + _kv(p)


def _alternatives(alts: list[dict]) -> str:
    if not alts:
        return "<p>The plan file lists no equivalent alternatives (<code>planner search --json</code> lists each plan's).</p>"
    keys = [
        k
        for k in (
            "tp",
            "pp",
            "dp",
            "cp",
            "ep",
            "vpp",
            "micro_batch_size",
            "recompute",
            "optimizer_sharding",
            "schedule",
        )
        if any(k in a for a in alts)
    ]
    keys += [
        k for k in ("step_time_s", "tokens_per_s_per_gpu", "peak_memory_bytes") if any(k in a for a in alts)
    ]
    rows = [[_num(a.get(k, "")) for k in keys] for a in alts]
    return _table(keys, rows, "alternatives-table")


def _budget(b: dict) -> str:
    rows = [
        [
            str(s["stage"]),
            escape(str(s["gpu"])),
            str(s["windows"]),
            f"{s['idle_s']:.4g}",
            f"{s['usable_s']:.4g}",
            f"{s['largest_window_s']:.4g}",
            f"{s['min_free_memory_gib']:.1f}",
        ]
        for s in b.get("per_stage", [])
        if "windows" in s
    ]
    agg = b.get("aggregate", {})
    note = (
        f"<p>{agg.get('gpu_seconds_per_iteration', 0):.4g} usable GPU-seconds per iteration "
        f"({agg.get('equivalent_gpus', 0):.3g} whole GPUs); every window: <code>planner bubbles --plan FILE</code>.</p>"
    )
    headers = ["stage", "GPU", "windows", "idle s", "usable s", "largest window s", "least free GiB"]
    return _table(headers, rows, "budget-table") + note


def report_html(est, data: dict, title: str, plan_doc: dict | None = None, source: str = "") -> str:
    """The page for estimate ``est`` (its timeline) and ``data`` (:func:`planner.outputs.views.estimate_dict` of
    it); ``plan_doc`` holds the plan's ``alternatives`` (:func:`recorded_alternatives`) and
    ``bubble_fill_budget`` (:func:`regenerated_budget`), ``source`` the plan file's name."""
    plan_doc = plan_doc or {}
    model, cluster, job = data["model"], data["cluster"], data["job"]
    gpus = ", ".join(f"{g['num_nodes']} x {g['gpus_per_node']} {g['gpu']}" for g in cluster.get("groups", []))
    sub = (
        f"{escape(str(model.get('name', '')))} on {escape(str(cluster.get('name', '')))} ({escape(gpus)}); "
        f"global batch {job['global_batch_size']:,} x {job['seq_length']:,} tokens, {escape(job['precision'])}; "
        f"planner {escape(str(data.get('planner_version', '')))}"
        + (f"; plan file {escape(source)}" if source else "")
    )
    alts = plan_doc.get("alternatives") or []
    sections = [
        _section("summary", "Predictions", _summary(data)),
        _section(
            "timeline",
            "Pipeline timeline (one iteration)",
            f'<div class="scroll">{timeline_svg(est, title)}</div>',
        ),
        _section("time", "Where the step time goes", _time(data)),
        _section("memory", "Memory per stage", _memory(data)),
        _section("configuration", "Configuration", _kv(data["config"])),
        _section("plausibility", "Plausibility", _plausibility(data.get("plausibility", {}))),
        _section("alternatives", "Equivalent alternatives", _alternatives(alts)),
    ]
    if isinstance(plan_doc.get("bubble_fill_budget"), dict):
        sections.append(
            _section("budget", "Bubble-fill budget (per stage)", _budget(plan_doc["bubble_fill_budget"]))
        )
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body>"
        f'<h1>{escape(title)}</h1><p class="sub">{sub}</p>' + "".join(sections) + "</body></html>\n"
    )


def regenerated_budget(est, graph: bool) -> dict:
    """The plan file's ``bubble_fill_budget`` section as the search writes it, from the
    re-estimate: a plan's recorded predictions and budget are outputs, re-computed on read and
    never trusted (a hand-edited ``idle_s: x`` once raised a TypeError here)."""
    from planner.outputs import bubbles as bub
    from planner.outputs import views

    b = bub.budget(est)
    if graph:
        return {**bub.budget_dict(b), "schedule": "graph-1f1b"}
    return views.rounded(bub.budget_summary_dict(b))


_ALT_DEGREES = ("tp", "pp", "dp", "cp", "ep", "etp", "vpp", "micro_batch_size", "num_microbatches")
_ALT_COUNTS = ("recompute_num_layers", "fsdp_shard", "offload_layers", "optimizer_instances")
_ALT_NUMBERS = ("step_time_s", "tokens_per_s_per_gpu", "peak_memory_bytes")


def recorded_alternatives(doc: dict, where: str) -> list[dict]:
    """The equivalent alternatives a plan file lists under ``predictions.alternatives`` (``planner
    search --json`` lists them; a plan file the search writes does not), read as strictly as an
    input: each a mapping of configuration fields (:func:`planner.outputs.views.config_dict`'s
    keys, each of its type, bounds and allowed values) and the three predictions shown (finite,
    non-negative); unknown keys are errors. They cannot be re-computed without a search, so they
    are checked instead."""
    from cost_models.parallel import OPTIMIZER_SHARDING, RANK_ORDERS, RECOMPUTE, RECOMPUTE_MODULES, SCHEDULES
    from planner.inputs.documents import Reader
    from planner.inputs.errors import SpecError
    from planner.inputs.validation import check_number

    predictions = doc.get("predictions")
    raw = predictions.get("alternatives", []) if isinstance(predictions, dict) else []
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise SpecError(f"{where}: key 'predictions.alternatives': expected a list, got {type(raw).__name__}")
    words = {
        "recompute": RECOMPUTE,
        "optimizer_sharding": OPTIMIZER_SHARDING,
        "schedule": SCHEDULES,
        "rank_order": RANK_ORDERS,
    }
    out = []
    for i, item in enumerate(raw):
        r = Reader(item, where, f"predictions.alternatives[{i}]")
        alt: dict = {}
        for key in _ALT_DEGREES:
            alt[key] = r.get(key, int, None, positive=True)
        for key in _ALT_COUNTS:
            alt[key] = r.get(key, int, None)
        for key, allowed in words.items():
            alt[key] = r.get(key, str, None, choices=allowed)
        alt["sequence_parallel"] = r.get("sequence_parallel", bool, None)
        modules = r.get("recompute_modules", list, None)
        if modules is not None and any(m not in RECOMPUTE_MODULES for m in modules):
            raise SpecError(
                f"{where}: key 'predictions.alternatives[{i}].recompute_modules': allowed values: "
                + ", ".join(RECOMPUTE_MODULES)
            )
        alt["recompute_modules"] = modules
        layers = r.get("layers_per_stage", list, None)
        for j, n in enumerate(layers or []):
            check_number(n, where, f"predictions.alternatives[{i}].layers_per_stage[{j}]", integer=True)
        alt["layers_per_stage"] = layers
        for key in _ALT_NUMBERS:
            alt[key] = r.get(key, float, None)
        r.done()
        out.append({k: v for k, v in alt.items() if v is not None})
    return out


SECTIONS = (
    "summary",
    "timeline",
    "time",
    "memory",
    "configuration",
    "plausibility",
    "alternatives",
    "budget",
)


def plan_report(path: str) -> tuple[str, dict]:
    """Re-estimate the plan file at ``path`` (chain or graph plan) and build its page: (HTML text,
    a JSON-ready summary of what the page shows)."""
    from pathlib import Path

    from planner.inputs.documents import read_document
    from planner.outputs import views
    from planner.plans.problem import estimate_plan_file

    problem, est = estimate_plan_file(path)
    data = views.estimate_dict(problem, est)
    schedule = "graph-1f1b" if problem.stage_graph is not None else est.config.schedule
    title = f"{problem.model.name} {schedule} p={est.config.pp} m={est.num_microbatches}"
    doc = read_document(Path(path))
    recorded = {
        "alternatives": recorded_alternatives(doc, str(path)),
        "bubble_fill_budget": regenerated_budget(est, problem.stage_graph is not None),
    }
    html = report_html(est, data, title, recorded, Path(path).name)
    shown = [s for s in SECTIONS if f'<section id="{s}">' in html]
    summary = {
        "schema_version": views.SCHEMA_VERSION,
        "plan": path,
        "title": title,
        "sections": shown,
        "step_time_s": data["step_time_s"],
        "time_sum_s": sum(float(data["time"].get(k, 0.0)) for k, _, _ in TIME_PARTS),
        "bytes": len(html.encode()),
    }
    return html, summary
