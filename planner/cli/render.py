"""Human-facing output: rich tables and the terminal Gantt chart (the SVG timeline is
:mod:`planner.outputs.timeline_svg`); the search tables are :mod:`planner.cli.render_search`,
those of calibrate, sweep and whatif their own ``render_*.py``.

Nothing else in planner imports rich (STYLE lesson 9). Results go to stdout; the CLI sends
messages to stderr. Colour is used only when stdout is a terminal (rich's own detection).
"""

from __future__ import annotations

import time

from rich.console import Console, RenderableType
from rich.markup import escape
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from cost_models.schedules import KIND_NAMES, Timeline
from planner.inputs.job_spec import QUANTIZED_PRECISIONS
from planner.inputs.jobs import default_grad_dtype
from planner.profiles.uncertainty import UNSEEN_OUTSIDE_COVERAGE

GIB = 1024**3


def console() -> Console:
    """stdout console; wide when not a terminal so that piped tables are not truncated."""
    import sys

    return Console(highlight=False, soft_wrap=False, width=None if sys.stdout.isatty() else 200)


def gib_text(x: float) -> str:
    """Bytes as GiB with one decimal."""
    return f"{x / GIB:.1f}"


def models_table(rows: list[dict]) -> Table:
    t = Table(title="Model presets")
    for col in ("name", "layers", "hidden", "heads", "kv groups", "params (B)", "active (B)"):
        t.add_column(col, justify="left" if col == "name" else "right")
    for r in rows:
        if r.get("kind") == "graph_model":
            blocks = r["blocks"]
            t.add_row(
                f"{r['name']} (graph: {len(blocks)} blocks)",
                str(sum(b.get("num_layers", 1) for b in blocks)),
                "/".join(str(b["hidden_size"]) for b in blocks if "hidden_size" in b),
                "",
                "",
                f"{r['params_total'] / 1e9:.2f}",
                f"{r['params_total'] / 1e9:.2f}",
            )
            continue
        t.add_row(
            r["name"],
            str(r["num_layers"]),
            str(r["hidden_size"]),
            str(r["num_attention_heads"]),
            str(r["num_query_groups"]),
            f"{r['params_total'] / 1e9:.2f}",
            f"{r.get('params_active', r['params_total']) / 1e9:.2f}",
        )
    return t


def kv_table(title: str, data: dict) -> Table:
    t = Table(title=title, show_header=False)
    t.add_column("key")
    t.add_column("value", justify="right")
    for k, v in data.items():
        if isinstance(v, dict):
            v = ", ".join(f"{a}={b}" for a, b in v.items())
        elif isinstance(v, float):
            v = f"{v:.6g}"
        t.add_row(k, str(v))
    return t


def hardware_tables(gpus: list[dict], templates: list[dict]) -> list[Table]:
    g = Table(title="GPU types")
    precisions = ("bf16", "fp16", "fp8", "fp4")
    for col in ("name", "memory GiB", *(f"{p} TFLOP/s" for p in precisions), "HBM GB/s"):
        g.add_column(col, justify="left" if col == "name" else "right")
    for r in gpus:
        peak = r["peak_flop_per_s"]
        g.add_row(
            r["name"],
            gib_text(r["memory_bytes"]),
            # A peak of 0 means the GPU has no such tensor-core path (V100 bf16, A100 fp8): '-'.
            *(f"{peak.get(p, 0) / 1e12:.0f}" if peak.get(p, 0) else "-" for p in precisions),
            f"{r['hbm_bandwidth_bytes_per_s'] / 1e9:.0f}",
        )
    c = Table(title="Node templates")
    cols = (
        "name",
        "gpu",
        "gpus/node",
        "NVLink domain",
        "NVLink GB/s",
        "network GB/s per GPU",
        "host memory GB",
    )
    for col in cols:
        c.add_column(col, justify="left" if col in ("name", "gpu") else "right")
    for r in templates:
        n = r["node"]
        c.add_row(
            r["name"],
            n["gpu"],
            str(n["gpus_per_node"]),
            str(n.get("nvlink_domain_size", n["gpus_per_node"])),
            str(n["intra_node_bandwidth_gb_per_s"]),
            str(n["inter_node_bandwidth_gb_per_s"]),
            str(n.get("host_memory_gb", "-")),  # '-': the template states no system memory
        )
    return [g, c]


SOFTWARE_COLUMNS = (
    ("GEMM eff. max", "gemm_efficiency_max"),
    ("FP8 speedup", "fp8_gemm_speedup"),
    ("kernel overhead us", "kernel_overhead_us"),
    ("overlap slowdown", "comm_overlap_slowdown"),
    ("grouped GEMM eff.", "grouped_gemm_efficiency"),
    ("host launch us", "host_launch_us"),
)
"""The overridden values of a software profile: column title, key of the profile file."""


def software_table(rows: list[dict], title: str = "Software profiles") -> Table:
    """Software profiles (:func:`planner.profiles.software.profile_rows`): one row per profile and
    efficiency family, with the values it overrides and the runs it was fitted on."""
    t = Table(title=title)
    for col in ("name", "framework", "released", "family"):
        t.add_column(col)
    for col in ("runs", *(c for c, _ in SOFTWARE_COLUMNS)):
        t.add_column(col, justify="right")
    for r in rows:
        for f in r["families"]:
            values = ("-" if f.get(k) is None else f"{f[k]:.4g}" for _, k in SOFTWARE_COLUMNS)
            t.add_row(r["name"], r["framework"], r["released"], f["family"], str(f["fitted_runs"]), *values)
    return t


def mfu_basis(d: dict) -> str:
    """What an FP8 or NVFP4 job's MFU is a fraction of, for its labels: MFU and HFU are over the
    dense 16-bit peak for every precision (``cost_models.estimate.Estimate.mfu``, the convention of
    Megatron-LM's and NeMo's throughput logs), so such a run's can pass 100%; '' otherwise."""
    quantized = (d.get("job") or {}).get("precision") in QUANTIZED_PRECISIONS
    return " (of dense BF16 peak)" if quantized else ""


def _plausibility_text(p: dict | None) -> str:
    if not p or p.get("best_published_mfu") is None:
        return f"none published ({p['class']})" if p else "-"
    text = f"{100 * p['best_published_mfu']:.1f}% ({p['best_published_run']})"
    return f"[bold yellow]ABOVE[/] {text}" if p["above_best_published"] else text


def _moe_runtime_rows(d: dict) -> list[tuple[str, str]]:
    """The MoE runtime row of an MoE model's estimate (dispatcher, all-to-all overlap, CUDA graphs)."""
    if not (d.get("model") or {}).get("num_experts"):
        return []
    job = d["job"]
    overlap = "a2a overlapped" if job.get("moe_a2a_overlap") else "a2a exposed"
    graphs = ",".join(job.get("cuda_graph_scope") or []) or "none"
    return [("MoE dispatcher / overlap / CUDA graphs", f"{job.get('moe_dispatcher')} / {overlap} / {graphs}")]


def _grad_rows(d: dict) -> list[tuple[str, str]]:
    """The gradient reduction dtype, shown only when it is not the precision's default (fp16
    gradients for fp16 training, fp32 otherwise: planner.inputs.jobs.default_grad_dtype), the optimizer's
    master weight and moment dtypes, shown only when not fp32 / fp32, and unfused
    gradient accumulation, shown only when set (fused is the default), the FP8 recipe of an FP8
    job, pipeline sends scattered over tp (JobSpec.pipeline_scatter_gather), shown only when set, and
    a distributed optimizer's all-reduced gradients (JobSpec.sharded_grad_reduce), shown only when
    not the reduce-scatter."""
    job = d.get("job") or {}
    grad = job.get("grad_dtype")
    rows = []
    if grad is not None and grad != default_grad_dtype(job.get("precision") or "bf16"):
        rows.append(("gradient reduction dtype", grad))
    master, state = job.get("master_dtype") or "fp32", job.get("optimizer_state_dtype") or "fp32"
    if (master, state) != ("fp32", "fp32"):
        rows.append(("optimizer master weights / Adam moments", f"{master} / {state}"))
    if job.get("gradient_accumulation_fusion") is False:
        rows.append(("gradient accumulation", "unfused (separate add per micro-batch)"))
    if job.get("fp8_recipe"):
        rows.append(("FP8 recipe", job["fp8_recipe"]))
    if job.get("pipeline_scatter_gather"):
        rows.append(("pipeline sends", "scattered over tp, all-gathered by the receiver"))
    if job.get("sharded_grad_reduce") == "all_reduce":
        rows.append(("sharded optimizer's gradients", "all-reduced (not reduce-scattered)"))
    return rows


def widened_note(interval: dict) -> str:
    """What an interval is worth where its class says less than it seems ('' otherwise): a class not
    of the plan's kind (a MoE plan in a pooled class), with how often held-out intervals covered the
    calibration runs of that kind; outside its class's calibration runs, widened, and how often such
    intervals held on unseen runs (:data:`planner.profiles.uncertainty.UNSEEN_OUTSIDE_COVERAGE`)."""
    note = ""
    kind = interval.get("kind_held_out")
    if kind:
        name = "MoE" if kind["kind"] == "moe" else kind["kind"]
        note = (
            f"; not a {name} class (too few sources of {name} runs): held out, intervals covered "
            f"{kind['covered']} of the {kind['runs']} {name} calibration runs"
        )
    if not interval.get("outside_calibration"):
        return note
    held, runs = UNSEEN_OUTSIDE_COVERAGE
    return (
        note
        + f"; widened: outside the class's calibration runs, where such intervals held {held} of {runs} unseen runs"
    )


def _interval_rows(interval: dict | None) -> list[tuple[str, str]]:
    """The prediction's interval, with the class whose held-out errors it comes from."""
    if not interval:
        return []
    lo, hi = interval["tokens_per_s_per_gpu"]
    slo, shi = interval["step_time_s"]
    where = f"{interval['class']}, {interval['runs']} held-out runs" + widened_note(interval)
    return [
        (
            f"{100 * interval['level']:.0f}% interval: tokens/s per GPU, step",
            f"{lo:,.0f}-{hi:,.0f}, {slo:.3f}-{shi:.3f} s ({escape(where)})",
        )
    ]


def estimate_tables(d: dict) -> list[Table]:
    cfg = d["config"]
    head = Table(
        title=f"{d['model']['name']} on {d['cluster']['num_gpus']} GPUs ({d['cluster']['name']})",
        show_header=False,
    )
    head.add_column("k")
    head.add_column("v", justify="right")
    shape = (
        f"graph: {cfg['pipelines']} pipelines of {cfg['num_stages']} stages, tp {cfg['tp']}"
        if "num_stages" in cfg
        else f"tp {cfg['tp']} pp {cfg['pp']} dp {cfg['dp']} cp {cfg['cp']} ep {cfg['ep']} vpp {cfg['vpp']}"
        + (f", ranks {cfg['rank_order']}" if cfg.get("rank_order") else "")
    )
    eager = (d.get("job") or {}).get("eager_ops") or []
    rows = [
        ("configuration", shape),
        ("micro-batch x micro-batches", f"{cfg['micro_batch_size']} x {cfg['num_microbatches']}"),
        (
            "schedule / recompute / sharding",
            f"{cfg['schedule']} / {recompute_text(cfg)} / {sharding_text(cfg)}",
        ),
        *_moe_runtime_rows(d),
        # Shown only when the plan offloads activations to host memory.
        *(
            [("activations offloaded to host", f"first {cfg['offload_layers']} layers")]
            if cfg.get("offload_layers")
            else []
        ),
        # Shown only when some elementwise ops run eager (fused is the default and goes unsaid).
        *([("eager elementwise ops", ", ".join(eager))] if eager else []),
        *_grad_rows(d),
        ("step time", f"{d['step_time_s']:.3f} s"),
        ("tokens/s (per GPU)", f"{d['tokens_per_s']:,.0f} ({d['tokens_per_s_per_gpu']:,.1f})"),
        *_interval_rows(d.get("prediction_interval")),
        ("MFU / HFU" + mfu_basis(d), f"{100 * d['mfu']:.1f}% / {100 * d['hfu']:.1f}%"),
        ("best published MFU of its class" + mfu_basis(d), _plausibility_text(d.get("plausibility"))),
        *[
            ("[bold yellow]outside calibration[/]", escape(reason))
            for reason in (d.get("plausibility") or {}).get("outside_calibration", [])
        ],
        ("bubble fraction", f"{100 * d['bubble_fraction']:.1f}%"),
        ("peak memory", f"{gib_text(d['peak_memory_bytes'])} GiB"),
        ("fits", _fits_text(d)),
    ]
    for k, v in rows:
        head.add_row(k, v)
    tm = d["time"]
    time_t = Table(
        title=f"Time per iteration (busiest stage {tm.get('slowest_stage', 0)}; sums to the step)",
        show_header=False,
    )
    time_t.add_column("k")
    time_t.add_column("s", justify="right")
    for k in (
        "compute_s",
        "recompute_s",
        "tp_cp_ep_comm_s",
        "fsdp_exposed_s",
        "offload_exposed_s",
        "bubble_s",
        "dp_exposed_s",
        "optimizer_s",
        "param_gather_exposed_s",
        "step_time_s",
    ):
        if k in tm:
            time_t.add_row(k.removesuffix("_s").replace("_", " "), f"{tm[k]:.3f}")
    mem_t = Table(title="Memory per stage (GiB)")
    host = d["memory"].get("host")
    for col in (
        "stage",
        "gpu",
        "layers",
        "weights",
        "grads",
        "optimizer",
        "activations",
        "reserve",
        "peak",
        "capacity",
        "in flight",
        *(("offloaded to host", "host share") if host else ()),
    ):
        mem_t.add_column(col, justify="right")
    for i, s in enumerate(d["memory"]["per_stage"]):
        h = host["per_stage"][i] if host else None
        style = None if s["fits"] and (h is None or h["fits"]) else "bold red"
        mem_t.add_row(
            str(s["stage"]),
            s["gpu"],
            "+".join(map(str, s["layers"])),
            gib_text(s["weights_bytes"]),
            gib_text(s["gradients_bytes"]),
            gib_text(s["optimizer_bytes"]),
            gib_text(s["activations_bytes"] + s["transient_bytes"]),
            gib_text(s["reserve_bytes"]),
            gib_text(s["peak_bytes"]),
            gib_text(s["capacity_bytes"]),
            f"{s['peak_inflight_microbatches']:.1f}",
            *(
                (
                    gib_text(h["offloaded_bytes_per_gpu"]),
                    gib_text(h["share_bytes_per_gpu"]) if h["share_bytes_per_gpu"] else "unknown",
                )
                if h
                else ()
            ),
            style=style,
        )
    return [head, time_t, mem_t]


def _fits_text(d: dict) -> str:
    """The estimate's "fits" cell: yes, or which memory overflows (GPU, host) and by how much."""
    mem = d["memory"]
    gpu_ok = all(s["fits"] for s in mem["per_stage"])
    host = mem.get("host")
    parts = [] if gpu_ok else [f"stage {mem['worst_stage']} short by {gib_text(mem['shortfall_bytes'])} GiB"]
    if host and not host["fits"]:
        h = next(h for h in host["per_stage"] if not h["fits"])
        short = h["offloaded_bytes_per_gpu"] - h["share_bytes_per_gpu"]
        parts.append(
            f"stage {h['stage']} offloads {gib_text(short)} GiB per GPU more than its host memory share"
        )
    return "NO: " + "; ".join(parts) if parts else "yes"


def gantt_lines(tl: Timeline, width: int = 100, horizon_s: float | None = None) -> list[str]:
    """One text row per stage: F/B/W where an operation runs, '.' where the stage idles."""
    horizon = horizon_s or tl.makespan_s
    lines = []
    for r in range(tl.num_stages):
        row = ["."] * width
        for i in range(len(tl.kind[r])):
            a = int(tl.start_s[r][i] / horizon * width)
            b = max(a + 1, int(round(tl.end_s[r][i] / horizon * width)))
            ch = KIND_NAMES[int(tl.kind[r][i])]
            for x in range(a, min(b, width)):
                row[x] = ch
        lines.append(f"stage {r:>3} |{''.join(row)}|")
    return lines


def budget_tables(d: dict) -> list[Table]:
    head = Table(title=f"Bubble-fill budget: iteration {d['iteration_time_s']:.3f} s ({d['schedule']})")
    for col in (
        "stage",
        "devices",
        "windows",
        "idle s",
        "usable s",
        "usable %",
        "largest window s",
        "free GiB then",
    ):
        head.add_column(col, justify="right")
    for s in d["per_stage"]:
        big = max(s["intervals"], key=lambda w: w["duration_s"], default=None)
        head.add_row(
            str(s["stage"]),
            str(s["devices_per_stage"]),
            str(len(s["intervals"])),
            f"{s['idle_s']:.3f}",
            f"{s['usable_s']:.3f}",
            f"{100 * s['usable_fraction']:.1f}",
            f"{big['duration_s']:.3f}" if big else "-",
            gib_text(big["free_memory_bytes"]) if big else "-",
        )
    agg = d["aggregate"]
    foot = Table(show_header=False)
    foot.add_column("k")
    foot.add_column("v", justify="right")
    foot.add_row("usable GPU-seconds per iteration", f"{agg['gpu_seconds_per_iteration']:.1f}")
    foot.add_row("equivalent whole GPUs", f"{agg['equivalent_gpus']:.1f}")
    tables = [head, foot]
    if "fill" in d:
        f = d["fill"]
        ft = Table(title=f"Fill job {f['job']}", show_header=False)
        ft.add_column("k")
        ft.add_column("v", justify="right")
        ft.add_row("units per iteration", str(f["units_per_iteration"]))
        ft.add_row("fill throughput (units/s)", f"{f['fill_throughput_units_per_s']:.2f}")
        ft.add_row("bubble time used", f"{100 * f['bubble_time_used_fraction']:.1f}%")
        ft.add_row("main-job slowdown bound", f"{100 * f['slowdown_bound']:.2f}%")
        tables.append(ft)
        if f.get("reason"):
            from rich.text import Text

            tables.append(Text(f"No unit fits: {f['reason']}."))
    return tables


PROGRESS_DELAY_S = 0.5
"""The status line appears once a search or sweep has run this long (shorter runs print nothing),
well within the first second of a long one."""


def progress_callback(label: str = "searching", unit: str = "candidates", console: Console | None = None):
    """A :class:`ProgressDisplay` on stderr (or ``console``), started now (the caller decides whether
    to show one at all: a terminal, no --json, no --quiet)."""
    return ProgressDisplay(label, unit, console)


class ProgressDisplay:
    """A transient status line for a search or sweep, live from its start: a spinner and the phase
    the command is in (:meth:`phase`: loading the model and cluster, enumerating and bounding
    candidates, ...), then, once counts arrive as ``progress(done, total, best_step_time_s)``
    calls (the search's :data:`planner.search.chain.ProgressFn`), a bar of candidates (or points)
    settled of the total and the best step time so far. rich redraws it on its own thread, so the
    spinner turns while the search computes; nothing shows in the first ``delay_s``, and
    :meth:`close` erases it."""

    def __init__(
        self, label: str, unit: str, console: Console | None = None, delay_s: float = PROGRESS_DELAY_S
    ) -> None:
        self.label, self.unit = label, unit
        self._bar = _DelayedProgress(
            delay_s,
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[count]}"),
            TextColumn("{task.fields[best]}"),
            TimeElapsedColumn(),
            console=console or Console(stderr=True),
            transient=True,
        )
        self._task = self._bar.add_task(label, total=None, count="", best="")
        self._bar.start()

    def phase(self, text: str) -> None:
        """Name what the command is doing now (shown beside the spinner until counts arrive; drawn
        at once)."""
        self._bar.update(self._task, description=f"{self.label}: {text}", refresh=True)

    def __call__(self, done: int, total: int, best_s: float | None = None) -> None:
        best = f"best {best_s:.3f} s/step" if best_s is not None else "no plan yet"
        self._bar.update(
            self._task,
            description=self.label,
            completed=done,
            total=max(total, 1),
            count=f"{done}/{total} {self.unit}",
            best=best,
        )

    def close(self) -> None:
        """Stop and erase the display."""
        self._bar.stop()


class _DelayedProgress(Progress):
    """rich's Progress, drawing nothing until ``delay_s`` after it was made."""

    def __init__(self, delay_s: float, *columns, **kwargs) -> None:
        self._shown_from = time.monotonic() + delay_s
        super().__init__(*columns, **kwargs)

    def get_renderable(self) -> RenderableType:
        if time.monotonic() < self._shown_from:
            return Text("")
        return super().get_renderable()


# ------------------------------------------------------------------------------------------------
# Graph models


def graph_model_tables(d: dict) -> list[Table]:
    t = Table(title=f"Graph model {d['name']} ({d['params_total'] / 1e9:.2f}B parameters)")
    for col in ("block", "type", "units", "hidden", "tokens", "attention", "params (B)"):
        t.add_column(col, justify="left" if col in ("block", "type", "attention") else "right")
    for b in d["blocks"]:
        attention = ""
        if b["type"] == "transformer":
            attention = "causal" if b["causal"] else "bidirectional"
            if b["cross_attention_from"]:
                attention += f" + cross({b['cross_attention_from']})"
        t.add_row(
            b["name"],
            b["type"],
            str(b["units"]),
            str(b.get("hidden_size", "")),
            str(b["seq_length"] or "job"),
            attention,
            f"{b['params'] / 1e9:.3f}",
        )
    e = Table(title="Edges")
    e.add_column("from")
    e.add_column("to")
    e.add_column("MiB/sample", justify="right")
    for edge in d["edges"]:
        e.add_row(
            edge["from"],
            edge["to"],
            f"{edge['bytes_per_sample'] / 2**20:.2f}" if edge["bytes_per_sample"] else "output",
        )
    return [t, e]


def sharding_text(cfg: dict) -> str:
    """The optimizer sharding, with the distributed optimizer's instance count when above one."""
    n = cfg.get("optimizer_instances", 1)
    return f"{cfg['optimizer_sharding']}, {n} instances" if n > 1 else cfg["optimizer_sharding"]


def recompute_text(cfg: dict) -> str:
    """The recompute form, with its selective modules when they are not the default."""
    modules = cfg.get("recompute_modules")
    return f"{cfg['recompute']} ({', '.join(modules)})" if modules else cfg["recompute"]


# ------------------------------------------------------------------------------------------------
# Trials


def trial_table(d: dict) -> Table:
    """``planner trial collect``: the plans fastest measured first, with the predictions before
    and after the fit to the trial's logs."""
    t = Table(title=f"Trial: {d['winner']} measured fastest")
    for col in ("plan", "layout", "measured s/step", "predicted", "error", "fitted", "error", "log"):
        t.add_column(col, justify="left" if col in ("plan", "layout", "log") else "right")

    def secs(v):
        return "-" if v is None else f"{v:.3f}"

    def pct(v):
        return "-" if v is None else f"{100 * v:+.1f}%"

    for p in d["plans"]:
        name = p["name"] + (" (tied)" if p["tied_with_best"] else "")
        t.add_row(
            escape(name),
            escape(p["layout"]),
            secs(p["measured_step_time_s"]),
            secs(p["predicted_step_time_s"]),
            pct(p["predicted_error"]),
            secs(p["fitted_step_time_s"]),
            pct(p["fitted_error"]),
            escape(p.get("log") or p.get("note", "")),
        )
    return t
