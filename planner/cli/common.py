"""Helpers the command modules share: the output edges (JSON on stdout, rich tables, notes and the
progress display on stderr, an export's files), parsing of list and number options, and the inputs every
problem-loading command hands :func:`planner.plans.problem.load_problem` (profile, eager ops, runtime options).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from planner.cli import render
from planner.inputs.errors import SpecError, UsageError
from planner.inputs.job_spec import (
    ATTENTION_IMPLS,
    DTYPES,
    EAGER_OPS,
    FINETUNES,
    FP8_RECIPES,
    FROZEN_WEIGHT_DTYPES,
)
from planner.inputs.jobs import lora_targets_tuple
from planner.inputs.validation import check_flag, json_text, printable


@contextmanager
def progress_display(
    quiet: bool, as_json: bool, label: str = "searching", unit: str = "candidates"
) -> Iterator[render.ProgressDisplay | None]:
    """A stderr progress display for a long run, shown from its start
    (:func:`planner.cli.render.progress_callback`: a spinner naming the phase, then a bar), and
    erased when the block ends, however it ends; None with --quiet, --json, or stderr not a
    terminal. The display is the run's ``progress(done, total, best_s)`` callback."""
    if quiet or as_json or not stderr_is_terminal():
        yield None
        return
    display = render.progress_callback(label, unit)
    try:
        yield display
    finally:
        display.close()


def say_phase(progress, text: str) -> None:
    """Say on the progress display (if any) what the command is doing now."""
    if progress is not None:
        progress.phase(text)


def stderr_is_terminal() -> bool:
    return sys.stderr.isatty()


def emit_note(message: str, quiet: bool = False) -> None:
    """A note on stderr (``wrote FILE``), silenced by --quiet. Written to ``sys.stderr`` itself, so
    that while a progress display is up rich prints the note above it (click's echo would write
    past rich's redirection, onto the display's line)."""
    if not quiet:
        print(printable(message), file=sys.stderr, flush=True)  # a path with a newline stays one line


def emit_json(data: dict) -> None:
    """The one JSON edge: strict JSON (no NaN/inf), round-off negatives as 0.0 (planner.inputs.validation)."""
    sys.stdout.write(json_text(data, indent=2, sort_keys=True) + "\n")


def require_finite(**options: float) -> None:
    """Number options must be finite (click parses ``nan`` and ``inf`` as floats)."""
    for name, value in options.items():
        if not math.isfinite(value):
            raise UsageError(f"--{name.replace('_', '-')} must be a finite number, got {value}")


def print_rich(*renderables) -> None:
    """Rich renderables on stdout (:func:`planner.cli.render.console`)."""
    con = render.console()
    for r in renderables:
        con.print(r)


def int_list(text: str | None, flag: str, minimum: int = 1) -> tuple[int, ...] | None:
    """A comma-separated list of integers of at least ``minimum`` (None when not given)."""
    if text is None:
        return None
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise UsageError(f"{flag} takes integers separated by commas, got {text!r}") from None
    if not values or min(values) < minimum:
        kind = "positive" if minimum == 1 else "non-negative"
        raise UsageError(f"{flag} takes {kind} integers, got {text!r}")
    return values


def word_list(text: str | None, flag: str, allowed: tuple[str, ...]) -> tuple[str, ...] | None:
    """A comma-separated list of ``allowed`` words (None when not given)."""
    if text is None:
        return None
    values = tuple(x.strip() for x in text.split(",") if x.strip())
    bad = [v for v in values if v not in allowed]
    if bad or not values:
        raise UsageError(f"{flag} {text!r}: allowed values: {', '.join(allowed)}")
    return values


def recompute_modules_option(text: str | None) -> tuple[str, ...] | None:
    """``--recompute-modules a,b`` as ``ParallelConfig.recompute_modules``, checked as a plan file's
    list is (:func:`planner.plans.plan_file.recompute_modules_tuple`); None when not given."""
    from planner.plans.plan_file import recompute_modules_tuple

    if text is None:
        return None
    names = [w.strip() for w in text.replace(" ", ",").split(",") if w.strip()]
    if not names:
        raise UsageError("--recompute-modules: give at least one module")
    try:
        return recompute_modules_tuple(names, "--recompute-modules", "value")
    except SpecError as exc:
        raise UsageError(str(exc)) from None


def eager_ops_option(text: str | None) -> tuple[str, ...]:
    """``--eager-ops`` as :attr:`JobSpec.eager_ops` (canonical order; none given: all fused)."""
    values = word_list(text, "--eager-ops", EAGER_OPS) or ()
    if len(set(values)) != len(values):
        raise UsageError(f"--eager-ops {text!r}: an op group is listed twice")
    return tuple(op for op in EAGER_OPS if op in values)


def check_fp8_recipe(recipe: str | None, precision: str | None) -> None:
    """``--fp8-recipe`` names a recipe of :data:`planner.inputs.job_spec.FP8_RECIPES` and comes with
    ``--precision fp8`` (a usage error otherwise)."""
    if recipe is None:
        return
    if recipe not in FP8_RECIPES:
        raise UsageError(f"--fp8-recipe {recipe!r} is not allowed; allowed values: {', '.join(FP8_RECIPES)}")
    if precision != "fp8":
        raise UsageError(f"--fp8-recipe {recipe} needs --precision fp8 (got {precision})")


def _optimizer_state_dtype(value: str | None) -> str:
    """``--optimizer-state-dtype`` checked (absent: fp32)."""
    if value is None:
        return "fp32"
    if value not in DTYPES:
        raise UsageError(
            f"--optimizer-state-dtype {value!r} is not allowed; allowed values: {', '.join(DTYPES)}"
        )
    return value


def runtime_options(opts: dict) -> dict:
    """The gradient dtype and accumulation, FP8 recipe, core attention, MoE dispatcher and CUDA graph options as
    :func:`planner.plans.problem.load_problem` keywords."""
    scope = opts.get("cuda_graph_scope")
    impl = opts.get("attention_impl") or "fused"
    if impl not in ATTENTION_IMPLS:
        raise UsageError(
            f"--attention-impl {impl!r} is not allowed; allowed values: {', '.join(ATTENTION_IMPLS)}"
        )
    check_fp8_recipe(opts.get("fp8_recipe"), opts.get("precision"))
    return {
        **_finetune(opts),
        "moe_dispatcher": opts.get("moe_dispatcher") or "alltoall",
        "grad_dtype": opts.get("grad_dtype"),
        "optimizer_state_dtype": _optimizer_state_dtype(opts.get("optimizer_state_dtype")),
        "gradient_accumulation_fusion": not opts.get("no_gradient_accumulation_fusion"),
        "fp8_recipe": opts.get("fp8_recipe"),
        "attention_impl": impl,
        "moe_a2a_overlap": bool(opts.get("moe_a2a_overlap")),
        "cuda_graph_scope": tuple(w.strip() for w in scope.split(",")) if scope else (),
    }


def _finetune(opts: dict) -> dict:
    """``--finetune``, ``--lora-rank``, ``--lora-targets``, ``--frozen-weight-dtype`` and
    ``--packed-avg-doc-len`` as :func:`planner.plans.problem.load_problem` keywords (only those given,
    so a pre-training job is built as before); LoRA flags without ``--finetune lora`` are usage errors."""
    out: dict = {}
    finetune = opts.get("finetune")
    if finetune is not None:
        if finetune not in FINETUNES:
            raise UsageError(
                f"--finetune {finetune!r} is not allowed; allowed values: {', '.join(FINETUNES)}"
            )
        out["finetune"] = finetune
    for flag, key in (
        ("--lora-rank", "lora_rank"),
        ("--lora-targets", "lora_targets"),
        ("--frozen-weight-dtype", "frozen_weight_dtype"),
    ):
        if opts.get(key) is not None and finetune != "lora":
            raise UsageError(f"{flag} needs --finetune lora")
    if opts.get("lora_rank") is not None:
        out["lora_rank"] = check_flag(opts["lora_rank"], "--lora-rank", "lora_rank", integer=True)
    if opts.get("lora_targets") is not None:
        try:
            out["lora_targets"] = lora_targets_tuple(opts["lora_targets"], "--lora-targets")
        except SpecError as exc:
            raise UsageError(str(exc)) from None
    dtype = opts.get("frozen_weight_dtype")
    if dtype is not None:
        if dtype not in FROZEN_WEIGHT_DTYPES:
            raise UsageError(
                f"--frozen-weight-dtype {dtype!r} is not allowed; allowed values: {', '.join(FROZEN_WEIGHT_DTYPES)}"
            )
        if dtype == "fp8" and opts.get("precision") != "fp8":
            raise UsageError(f"--frozen-weight-dtype fp8 needs --precision fp8 (got {opts.get('precision')})")
        out["frozen_weight_dtype"] = dtype
    if opts.get("packed_avg_doc_len") is not None:
        out["packed_avg_doc_len"] = check_flag(
            opts["packed_avg_doc_len"], "--packed-avg-doc-len", "seq_length", integer=True
        )
    return out


def software_note(problem, quiet: bool = False) -> None:
    """Say on stderr which GPU types a software profile prices with an earlier release's values or
    leaves at base values (one ``note:`` line each; none: no note)."""
    note = problem.software.note() if problem.software is not None else ""
    for line in note.splitlines():
        emit_note(f"note: {line}", quiet)


def profile_path(opts: dict) -> str | None:
    """The ``--profile`` file of a command, as a path string (None when not given)."""
    profile = opts.get("profile")
    return str(profile) if profile is not None else None


def finish_export(
    out: Path,
    texts: dict[str, str],
    force: bool,
    launcher: str,
    as_json: bool,
    payload: dict,
    quiet: bool = False,
) -> None:
    """Write an export (:func:`planner.api.write_export`: atomically, its ``launch_<launcher>.sh``
    made executable like every ``.sh`` file, nothing replaced without ``force``) and report: ``{"files": [...], **payload}`` with
    ``--json``, else one ``wrote FILE`` line per file on stderr (none with ``--quiet``)."""
    from planner import api

    files = api.write_export(out, texts, force)
    if as_json:
        emit_json({"files": sorted(str(f) for f in files), **payload})
    else:
        for f in sorted(files):
            emit_note(f"wrote {f}", quiet)
