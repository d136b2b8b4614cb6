"""Rendering of ``planner calibrate``: the fitted parameters, the error summary, every run and
every nccl-tests file before and after (rich tables, from :func:`planner.calibration.user.fit.report_dict`)."""

from __future__ import annotations

from rich.table import Table


def _num(x: float, unit: str) -> str:
    if unit == "":
        return f"{x:.4g}"
    return f"{x:.4g} {unit}"


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def calibrate_tables(d: dict) -> list:
    """The tables of a calibration report."""
    params = Table(title=f"Calibrated parameters: {d['gpu']} on {d['cluster']}")
    for col in ("parameter", "prior", "fitted", "±1σ", "status"):
        params.add_column(col, justify="left" if col in ("parameter", "status") else "right")
    for p in d["parameters"]:
        status = ("fitted" if p["fitted"] else "prior kept") + (f": {p['note']}" if p["note"] else "")
        params.add_row(
            p["name"],
            _num(p["prior"], p["unit"]),
            _num(p["value"], p["unit"]),
            _num(p["uncertainty"], p["unit"]),
            status,
        )
    errors = Table(title="Error of tokens/s per GPU on these runs")
    for col in ("", "runs", "median", "mean"):
        errors.add_column(col, justify="left" if not col else "right")
    for key, label in (
        ("before", "before (shipped values)"),
        ("after", "after (fitted)"),
        ("leave_one_run_out", "leave-one-run-out"),
    ):
        e = d["errors"][key]
        if e["count"]:
            errors.add_row(label, str(e["count"]), _pct(e["median"]), _pct(e["mean"]))
    out = [params, errors]
    if d["runs"]:
        runs = Table(title="Runs (tokens/s per GPU)")
        for col in ("run", "from", "measured", "before", "after", "left out", "memory meas./pred. GiB"):
            runs.add_column(col, justify="left" if col in ("run", "from") else "right")
        for r in d["runs"]:
            mem = ""
            if "measured_peak_memory_bytes" in r:
                mem = f"{r['measured_peak_memory_bytes'] / 2**30:.1f} / {r['predicted_peak_memory_bytes'] / 2**30:.1f}"
            runs.add_row(
                r["run_id"],
                r["origin"],
                f"{r['measured_tokens_per_s_per_gpu']:,.0f}",
                f"{r['before_tokens_per_s_per_gpu']:,.0f} ({_pct(r['before_error'])})",
                f"{r['after_tokens_per_s_per_gpu']:,.0f} ({_pct(r['after_error'])})",
                f"{r['leave_one_out_tokens_per_s_per_gpu']:,.0f} ({_pct(r['leave_one_out_error'])})",
                mem,
            )
        out.append(runs)
    if d["nccl_tests"]:
        nccl = Table(title="nccl-tests (median |time error| over the rows)")
        for col in ("file", "collective", "GPUs", "rows", "before", "after"):
            nccl.add_column(col, justify="left" if col in ("file", "collective") else "right")
        for n in d["nccl_tests"]:
            nccl.add_row(
                n["origin"],
                n["collective"],
                str(n["num_ranks"]),
                str(n["rows"]),
                _pct(n["before_median_error"]),
                _pct(n["after_median_error"]),
            )
        out.append(nccl)
    return out
