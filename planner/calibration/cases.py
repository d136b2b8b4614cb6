"""Published training runs as prediction cases: turn each run of ``published_runs.yaml`` into
(model, cluster, job, configuration, measured tokens/s per GPU), with every assumption recorded.

The data file is a copy of ../shared/calibration/published_runs.yaml (each run carries its
citation). Sources count FLOPs differently, so the measured figure compared is tokens/s per GPU,
derived in this order: the source's tokens/s; else global batch x sequence / (step time x GPUs);
else the source's TFLOP/s divided by the FLOPs per token *by the source's own counting* (Narayanan
et al. 2021 eq. 3 with recompute; Korthikanti et al. 2022 eq. 7; BigScience's 8 x params; Megatron-LM's
model-FLOP counter).
"""

from __future__ import annotations

import hashlib
import re
import statistics
from dataclasses import dataclass, replace
from pathlib import Path

from cost_models.constraints import resolve
from cost_models.estimate import Estimate, estimate
from cost_models.parallel import RANK_ORDERS, ParallelConfig, account_for_split, canonical_modules
from planner.calibration.record_checks import check_run_records
from planner.calibration.run_clusters import cluster_of, gpu_family
from planner.calibration.run_records import (
    MEGATRON_RECOMPUTE_MODULES,
    attention_impl_of,
    eager_ops_of,
    embedding_slots,
    fp8_recipe_of,
    measured_of,
    model_of,
    moe_runtime_of,
    overlapped_reduction,
    pipeline_scatter_gather,
    sharded_grad_reduce_of,
    source_of,
    unfused_accumulation,
    zero_stage_of,
)
from planner.frameworks.torchtitan import layer_sac_recomputed_layers
from planner.inputs.cluster_spec import ClusterSpec
from planner.inputs.documents import read_document
from planner.inputs.errors import PlannerError, SpecError
from planner.inputs.job_spec import JobSpec
from planner.inputs.jobs import make_job
from planner.inputs.model_spec import ModelSpec
from planner.inputs.validation import MAX_FILE_BYTES, short_path
from planner.launch.megatron.importer import parse_layout
from planner.profiles.software import BASE, efficiency_family, software_class
from planner.profiles.software import apply as apply_software

DEFAULT_RUNS = Path(__file__).resolve().parents[2] / "tests" / "data" / "published_runs.yaml"
DEFAULT_MEMORY = Path(__file__).resolve().parents[2] / "tests" / "data" / "published_memory.yaml"


def measured_memory(path: Path = DEFAULT_MEMORY) -> dict[str, float]:
    """Measured peak memory per GPU (bytes) by run id, from published_memory.yaml's
    ``measured_memory`` (torchtitan's logged peaks; see each entry's ``memory_metric``)."""
    data = read_document(Path(path))
    return {
        m["run_id"]: m["peak_memory_gib"] * 2**30
        for m in data.get("measured_memory", [])
        if m.get("run_id") and m.get("peak_memory_gib")
    }


EXCLUDED = {
    "narayanan2021_t2_zero3_": (
        "DeepSpeed ZeRO-3 (2021): its parameter gathers ran far below NCCL ring bandwidth (step time "
        "flat from 384 to 1536 GPUs); planner's 'full' sharding models FSDP2 / Megatron-FSDP"
    ),
    "ultrascale_h100_": (
        "Ultra-Scale Playbook sweep (2-minute nanotron benchmark jobs): single measurements disagree "
        "within the source (a layout repeated in its figure gives 737 and 3,449 tok/s/GPU; ZeRO-0 and "
        "ZeRO-1 of one 8B layout 2,275 and 687); their layout groups are ranked on a line of their own"
    ),
    "megatronlm_ci_moe_": (
        "Megatron-LM's MoE memory test (CI, 2026-01): a correctness test in deterministic mode with unfused "
        "attention on a 1,024-wide model, kept for its logged memory (docs/calibration.md, 'Memory'), not "
        "its speed"
    ),
    "hagemann2023_a100_": (
        "Aleph Alpha's own training codebase (Hagemann et al. 2023's sweep), which planner neither plans "
        "for nor has a software profile of: its pipeline loses 39% of throughput from micro-batch 1 to 8 "
        "at pp 2 (13B, tp 1, 64 A100, full recompute) where 1F1B's bubble grows by 11%; its layout "
        "groups are ranked on a line of their own"
    ),
}
"""Runs shown in the validation table but left out of the error statistics and the fit, with why."""

RANKED_WHEN_EXCLUDED = ("ultrascale_h100_", "hagemann2023_a100_")
"""Prefixes of :data:`EXCLUDED` whose layout groups are still ranked, on a line of their own
(scripts/validate_published.py), never in the ranking figures."""


NOT_SPEED_RUNS = ("megatronlm_ci_moe_",)
"""Prefixes of :data:`EXCLUDED` whose runs were no attempt at speed (a correctness test in
deterministic mode, kept for its logged memory): nor do they stand as a class's published MFU
(scripts/published_mfu.py), where the other excluded runs, which ran as their sources meant, do."""


def measures_speed(run_id: str) -> bool:
    """Whether a run's throughput is a measurement of speed (:data:`NOT_SPEED_RUNS`)."""
    return not run_id.startswith(NOT_SPEED_RUNS)


def excluded_reason(run_id: str) -> str:
    """Why ``run_id`` is left out of the statistics ('' when it is not)."""
    return next((why for prefix, why in EXCLUDED.items() if run_id.startswith(prefix)), "")


def ranked(run_id: str) -> bool:
    """Whether ``run_id``'s layout group is ranked: not excluded, or excluded with a prefix of
    :data:`RANKED_WHEN_EXCLUDED` (reported apart from the figures)."""
    return not excluded_reason(run_id) or run_id.startswith(RANKED_WHEN_EXCLUDED)


@dataclass(frozen=True)
class Case:
    """One published run ready to predict, or the reason it cannot be."""

    run_id: str
    gpu: str
    """GPU type name (the calibration group)."""
    model: ModelSpec | None = None
    cluster: ClusterSpec | None = None
    job: JobSpec | None = None
    config: ParallelConfig | None = None
    measured_tokens_per_s_per_gpu: float = 0.0
    measured_from: str = ""
    assumptions: tuple[str, ...] = ()
    skip_reason: str = ""
    source: str = ""
    """The publication or page the run comes from (leave-one-source-out folds)."""
    group: str = ""
    """Layout group: runs of one model, cluster and batch differing only in layout ('' = none)."""
    software: str = ""
    """Software release class (planner.profiles.software.software_class; '' = the GPU's base values)."""


_CASES: dict[tuple, tuple[Case, ...]] = {}
"""Cases already built in this process, by :func:`_cache_key`. A case is a function of its run's
mapping and of the package's data files (model presets, GPU, cluster and software profiles), and every
value in it is frozen, so callers share them. Building the 700 runs takes seconds (each run's cluster
is loaded from its GPU file); the validation scripts and the tests read the set many times."""

DATA_FILES = (
    Path(__file__).resolve().parents[2] / "hardware_profiles",
    Path(__file__).resolve().parents[2] / "planner" / "presets",
)
"""Where the data files a case is built from live (:func:`_cache_key` fingerprints them)."""

CACHED_FILES = 8
"""At most this many runs files' cases are kept (the oldest read goes first): a long-lived process
reading many users' files does not grow without bound."""


def _cache_key(path: Path) -> tuple | None:
    """:data:`_CASES`'s key of ``path``: its resolved name, the SHA-256 of its bytes and the size and
    modification time of every data file under :data:`DATA_FILES` (a profile rewritten in the
    process, as ``scripts/calibrate.py --write`` does, builds the cases anew). None (not cached) where
    the file cannot be read or is over :data:`planner.inputs.validation.MAX_FILE_BYTES`
    (:func:`read_document` then says why)."""
    try:
        resolved = path.resolve()
        if resolved.stat().st_size > MAX_FILE_BYTES:
            return None
        digest = hashlib.sha256(resolved.read_bytes()).digest()
        data = tuple(
            (str(f), st.st_size, st.st_mtime_ns)
            for d in DATA_FILES
            for f in sorted(d.rglob("*.yaml"))
            for st in (f.stat(),)
        )
    except (OSError, ValueError):
        return None
    return str(resolved), digest, data


def cases(path: Path = DEFAULT_RUNS) -> list[Case]:
    """All runs of the calibration file as :class:`Case` values, in file order. A file that is not
    one (missing, not YAML, no ``runs`` list, a run without the keys a case is built from) is a
    :class:`SpecError` naming the file, the run and the key. A file read before in this process, with
    the same bytes, gives the same (frozen) cases again without rebuilding them (:data:`_CASES`), in a
    new list."""
    key = _cache_key(Path(path))
    if key in _CASES:
        return list(_CASES[key])
    out = _build_cases(path)
    if key is not None:
        while len(_CASES) >= CACHED_FILES:
            del _CASES[next(iter(_CASES))]
        _CASES[key] = tuple(out)
    return out


def _build_cases(path: Path) -> list[Case]:
    """:func:`cases` without the cache."""
    runs = read_document(Path(path)).get("runs")
    if not isinstance(runs, list) or not all(isinstance(r, dict) for r in runs):
        raise SpecError(f"{short_path(path)}: key 'runs': expected a list of runs, each a mapping")
    check_run_records({"runs": runs}, short_path(path))
    out = []
    for i, run in enumerate(runs):
        try:
            out.append(_case(run))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            detail = f"missing key {exc}" if isinstance(exc, KeyError) else f"{type(exc).__name__}: {exc}"
            raise SpecError(f"{short_path(path)}: runs[{i}] (id {run.get('id', '?')!r}): {detail}") from None
    return out


def _case(run: dict) -> Case:
    """One run mapping of the calibration file as a :class:`Case` (:func:`cases`): the model, the
    job, the cluster, the parallel configuration and its layer split, then the measured figure, each
    read by its own function below. Every assumption made on the way is appended to the case's notes,
    in that order."""
    rid, hw, par = run["id"], run["hardware"], run["parallel"]
    fam = gpu_family(hw["gpu"])
    origin = {
        "source": source_of(run),
        "group": str(run.get("group") or ""),
        "software": software_class(par.get("framework"), par.get("software")),
    }
    notes: list[str] = []
    try:
        if par.get("tp") is None or par.get("pp") is None:
            raise PlannerError("parallel degrees not published")
        model = model_of(rid, run["model"], notes)
        job = _job_of(run, model, notes)
        cluster = cluster_of(hw, hw["total_gpus"], notes)
        config = _layer_split(run, model, _config_of(run, model, fam, notes), notes)
        measured, how = measured_of(run, model, job, cluster.num_gpus)
        if not measured:
            counting = (run["measured"].get("flops_counting") or "not stated").lower()
            raise PlannerError(f"no throughput figure comparable in tokens/s (FLOP counting {counting})")
        config = resolve(model, cluster, job, config)
        cluster = with_software(cluster, origin["software"])
        return Case(
            rid,
            cluster.groups[0].gpu.name,
            model,
            cluster,
            job,
            config,
            measured,
            how,
            tuple(notes),
            **origin,
        )
    except PlannerError as exc:
        return Case(rid, fam, skip_reason=str(exc), **origin)


def _precision_of(prec_text: str) -> str:
    """The training precision named by a run's ``parallel.precision`` text (lower case): nvfp4 where
    it names nvfp4, mxfp4 where it names mxfp4, fp8 where it names fp8 / float8, fp16 where it names
    fp16 and not bf16, else bf16."""
    if "nvfp4" in prec_text:
        return "nvfp4"
    if "mxfp4" in prec_text:
        return "mxfp4"
    if "fp8" in prec_text or "float8" in prec_text:
        return "fp8"
    return "fp16" if "fp16" in prec_text and "bf16" not in prec_text else "bf16"


def _job_of(run: dict, model: ModelSpec, notes: list[str]) -> JobSpec:
    """The run's job: batch, sequence, precision and the runtime options its source or recipe
    records (overlaps, reduction and optimizer dtypes, fused kernels, MoE dispatch)."""
    rid, par = run["id"], run["parallel"]
    seq = run["model"].get("seq_length")
    if seq is None:
        seq = 8192
        notes.append("seq 8192 assumed (torchtitan default)")
    prec_text = str(par.get("precision") or "bf16").lower()
    precision = _precision_of(prec_text)
    # Overlapped tensor-parallel collectives where the source or its recipe says so
    # (`parallel.tp_comm_overlap`, cited under `source.recipe`; else the notes): Megatron-LM's
    # --tp-comm-overlap, NeMo's ub_tp_comm_overlap, torchtitan's async TP (JobSpec.tp_comm_overlap).
    par_notes = str(par.get("notes") or "")
    tp_overlap = par.get("tp_comm_overlap")
    if tp_overlap is None:
        tp_overlap = "--tp-comm-overlap" in par_notes or "with async TP" in par_notes
    if tp_overlap:
        notes.append("tensor-parallel communication overlapped (source or recipe)")
    overlap_reduce = overlapped_reduction(run)
    # Gradients reduced in bf16 where the recipe says so (`parallel.grad_reduce_in_fp32: false`,
    # cited under `source.recipe.grad_reduce`: Megatron-LM's --grad-reduce-in-bf16, NeMo's and
    # Megatron-Bridge's grad_reduce_in_fp32=False); else the precision's default
    # (planner.inputs.jobs.default_grad_dtype: fp32 gradients for bf16 and fp8 training).
    grad_dtype = "bf16" if par.get("grad_reduce_in_fp32") is False else None
    if grad_dtype:
        notes.append("gradients reduced in bf16 (recipe)")
    # Adam's moments in a lower dtype where the recipe says so (`parallel.optimizer_state_dtype`,
    # cited under `source.recipe.optimizer`: Megatron's precision-aware optimizer with
    # exp_avg_dtype / exp_avg_sq_dtype bf16); else fp32.
    state_dtype = str(par.get("optimizer_state_dtype") or "fp32")
    if state_dtype != "fp32":
        notes.append(f"Adam moments in {state_dtype} (recipe)")
    unfused = unfused_accumulation(run, precision, notes)
    if par.get("overlap_param_gather") is False:
        notes.append("parameter all-gather not overlapped (recipe)")
    if not overlap_reduce:
        notes.append("gradient reduction after the last backward (not overlapped)")
    return make_job(
        global_batch_size=par["global_batch_size"],
        seq_length=seq,
        precision=precision,
        fp8_recipe=fp8_recipe_of(run, prec_text, notes),
        tp_comm_overlap=tp_overlap,
        overlap_grad_reduce=overlap_reduce,
        overlap_param_gather=overlap_reduce and par.get("overlap_param_gather") is not False,
        grad_dtype=grad_dtype,
        optimizer_state_dtype=state_dtype,
        gradient_accumulation_fusion=not unfused,
        eager_ops=eager_ops_of(run, notes),
        attention_impl=attention_impl_of(run, notes),
        pipeline_scatter_gather=pipeline_scatter_gather(run, notes),
        sharded_grad_reduce=sharded_grad_reduce_of(run, precision, notes),
        **(moe_runtime_of(rid, par, notes) if model.is_moe else {}),
        where=f"run {rid}",
    )


@dataclass(frozen=True)
class _Recompute:
    """A run's activation recompute as planner prices it (ParallelConfig's recompute fields)."""

    mode: str
    """'full', 'selective', 'op' or 'none' (ParallelConfig.recompute)."""
    num_layers: int
    """Layers per stage fully recomputed under 'full' (0 = all; ParallelConfig.recompute_num_layers)."""
    modules: tuple[str, ...]
    """Megatron recompute modules under 'selective' (ParallelConfig.recompute_modules)."""
    text: str
    """The run's ``parallel.recompute`` text, lower case, with recipe modules resolved to
    'selective' or 'none' (read again for the sharding)."""


def _recompute_of(par: dict, model: ModelSpec, notes: list[str]) -> _Recompute:
    """The run's recompute from ``parallel.recompute`` (the source's words) and
    ``parallel.recompute_modules`` (the recipe's)."""
    rec_text = str(par.get("recompute") or "none").lower()
    modules = par.get("recompute_modules")
    if modules is None and rec_text.startswith("selective"):
        # Megatron module names in the source's words ("selective (layernorm, moe_act)")
        named = [w for w in re.findall(r"[a-z_]+", rec_text) if w in MEGATRON_RECOMPUTE_MODULES]
        modules = named or None
    recompute_modules: tuple[str, ...] = ()
    if modules is not None and "full" not in rec_text:
        # Megatron's --recompute-modules (the recipes record them), active only under
        # --recompute-granularity selective (a recipe that sets modules without it recomputes
        # nothing: its record says "none").
        active = rec_text.startswith("selective") and bool(modules)
        rec_text = "selective" if active else "none"
        if active:
            notes.append(f"recompute modules {', '.join(modules)} (recipe)")
            recompute_modules = canonical_modules(modules)
    recompute_layers = 0
    if "full" in rec_text or "unknown" in rec_text:
        recompute = "full"
    elif "selective op" in rec_text or "per-op" in rec_text:
        # torchtitan selective_ac_option = "op" (cost_models.recompute)
        recompute = "op"
    elif "selective layer" in rec_text:
        # torchtitan selective_ac_option = "2" (the default, config_manager.py): every second
        # block fully checkpointed
        stage_layers = model.num_layers // (par["pp"] * (par.get("vpp") or 1))
        recompute, recompute_layers = "full", layer_sac_recomputed_layers(stage_layers, 2)
        notes.append("selective layer read as full recompute of every second block")
    else:
        recompute = "selective" if "selective" in rec_text else "none"
    if "unknown" in rec_text:
        notes.append("full recompute assumed")
    if "microbatch-level" in rec_text:
        # Korthikanti et al. 2022 App. C skips checkpointing for some in-flight micro-batches;
        # planner chooses recompute per layer, not per micro-batch.
        notes.append("micro-batch-level recompute priced as selective (recompute for every micro-batch)")
    return _Recompute(recompute, recompute_layers, recompute_modules, rec_text)


def _sharding_of(run: dict, rec_text: str, fam: str, notes: list[str]) -> str:
    """The run's optimizer sharding (ParallelConfig.optimizer_sharding): 'full' for ZeRO-3 / FSDP,
    'distributed' for Megatron's distributed optimizer or ZeRO-1, 'none'; ``rec_text`` is
    :attr:`_Recompute.text` (some sources name ZeRO-3 there)."""
    rid, par = run["id"], run["parallel"]
    zero = zero_stage_of(par)
    if zero == 3 or par.get("fsdp") or "ZeRO-3" in rec_text or "zero-3" in rec_text:
        sharding = "full"
    elif par.get("distributed_optimizer") is True:
        sharding = "distributed"
    elif par.get("distributed_optimizer") is False:
        sharding = "none"
    else:
        sharding = ""
    if rid.startswith("torchtitan") or "fsdp" in str(par.get("notes", "")).lower():
        # torchtitan shards with FSDP2 (its README); with pp > 1 planner models it as ZeRO-1.
        sharding = "full" if par["pp"] == 1 else "distributed"
        notes.append(f"FSDP2 modelled as '{sharding}' sharding")
    elif zero == 1:
        sharding = "distributed"
    elif not sharding:
        sharding = "distributed" if fam != "a100" else "none"
        notes.append(f"optimizer sharding {sharding} assumed")
    return sharding


def _config_of(run: dict, model: ModelSpec, fam: str, notes: list[str]) -> ParallelConfig:
    """The run's parallel configuration as published (degrees, micro-batch, recompute, sharding,
    schedule, offloading, rank order), before its layer split (:func:`_layer_split`)."""
    par = run["parallel"]
    rec = _recompute_of(par, model, notes)
    tp, pp, cp = par["tp"], par["pp"], par.get("cp") or 1
    sharding = _sharding_of(run, rec.text, fam, notes)
    vpp = par.get("vpp") or 1
    mbs = par.get("micro_batch_size")
    if mbs is None:
        mbs = 1
        notes.append("micro-batch size 1 assumed")
    sp = par.get("sequence_parallel")
    if sp is None:
        sp = tp > 1
    return ParallelConfig(
        tp=tp,
        pp=pp,
        cp=cp,
        ep=par.get("ep") or 1,
        vpp=vpp,
        micro_batch_size=mbs,
        recompute=rec.mode,
        recompute_num_layers=rec.num_layers,
        recompute_modules=rec.modules if rec.mode == "selective" else (),
        sequence_parallel=bool(sp),
        optimizer_sharding=sharding,
        # The source's schedule where it names one (`parallel.schedule`: Qi et al. 2024's
        # zero-bubble runs), else Megatron's by vpp.
        schedule=str(par.get("schedule") or ("interleaved" if vpp > 1 else "1f1b")),
        # The recipe's activation CPU offloading (Megatron --cpu-offloading-num-layers).
        offload_layers=int(par.get("cpu_offloading_num_layers") or 0),
        # The partial distributed optimizer (Megatron --num-distributed-optimizer-instances).
        optimizer_instances=int(par.get("num_distributed_optimizer_instances") or 1)
        if sharding == "distributed"
        else 1,
        # The recipe's rank layout (Megatron --use-tp-pp-dp-mapping; NeMo's TP_PP_DP_MAPPING).
        rank_order=RANK_ORDERS[1] if par.get("use_tp_pp_dp_mapping") else RANK_ORDERS[0],
    )


def _layer_split(run: dict, model: ModelSpec, config: ParallelConfig, notes: list[str]) -> ParallelConfig:
    """``config`` with the run's decoder layers per virtual pipeline stage where they are not the
    even split: the source's split, the recipe's layout or embedding / loss accounting, else a
    balanced uneven split."""
    par = run["parallel"]
    n_virtual = config.num_virtual_stages
    slots = embedding_slots(run)
    emb_split = bool(par.get("account_for_embedding_in_pipeline_split")) or slots
    loss_split = bool(par.get("account_for_loss_in_pipeline_split")) or slots
    if par.get("layers_per_stage"):
        # The split the source's framework made (e.g. torchtitan's generate_split_points).
        return config.with_(layers_per_stage=tuple(int(x) for x in par["layers_per_stage"]))
    if par.get("pipeline_layout"):
        # The recipe's --pipeline-model-parallel-layout (Megatron-Bridge's DeepSeek-V3 and
        # Kimi-K2 configs): decoder layers per virtual stage as Megatron unrolls it.
        layout = tuple(stage.count("t") for stage in parse_layout(str(par["pipeline_layout"])))
        if len(layout) != n_virtual or sum(layout) != model.num_layers:
            raise PlannerError(
                f"pipeline_layout {par['pipeline_layout']!r} does not give {n_virtual} virtual "
                f"stages of {model.num_layers} layers in all"
            )
        config = config.with_(layers_per_stage=layout)
        notes.append("pipeline layout from the recipe")
        return config
    if emb_split or loss_split:
        # The recipe's --account-for-embedding/loss-in-pipeline-split (Megatron-Bridge's
        # Llama 3.1 405B and Qwen3-235B pretrain configs).
        config = config.with_(
            layers_per_stage=account_for_split(model.num_layers, n_virtual, emb_split, loss_split)
        )
        notes.append(
            "embedding layers given pipeline slots (DeepSpeed 'type:transformer|embedding')"
            if slots
            else "embedding and loss accounted in the pipeline split (recipe)"
        )
        return config
    if model.num_layers < n_virtual and (model.num_layers + 2) % n_virtual == 0:
        # More virtual stages than layers: Megatron's recipes account the embedding and the
        # loss as one layer each (e.g. Qwen3-235B, 94 layers, pp 32 x vpp 3).
        config = config.with_(layers_per_stage=account_for_split(model.num_layers, n_virtual, True, True))
        notes.append("embedding and loss accounted in the pipeline split assumed")
        return config
    if model.num_layers % n_virtual:
        base, extra = divmod(model.num_layers, n_virtual)
        config = config.with_(
            layers_per_stage=tuple(base + (1 if i < extra else 0) for i in range(n_virtual))
        )
        notes.append("balanced uneven layer split assumed")
    return config


def with_software(cluster, name: str):
    """The cluster with its GPU's efficiency under software profile ``name`` (planner.profiles.software;
    '' or ``base``: the cluster as it is)."""
    if not name or name == BASE:
        return cluster
    gpu = cluster.groups[0].gpu
    eff = apply_software(gpu.efficiency, name, efficiency_family(gpu.name))
    groups = tuple(replace(g, gpu=replace(g.gpu, efficiency=eff)) for g in cluster.groups)
    return replace(cluster, groups=groups)


@dataclass(frozen=True)
class Result:
    """A case with its prediction."""

    case: Case
    estimate: Estimate

    @property
    def predicted(self) -> float:
        return self.estimate.tokens_per_s_per_gpu

    @property
    def error(self) -> float:
        """Absolute relative error of tokens/s per GPU."""
        return (
            abs(self.predicted - self.case.measured_tokens_per_s_per_gpu)
            / self.case.measured_tokens_per_s_per_gpu
        )


def predict_all(all_cases: list[Case]) -> list[Result]:
    """Predict every usable case."""
    return [Result(c, estimate(c.model, c.cluster, c.job, c.config)) for c in all_cases if not c.skip_reason]


def by_source(results: list[Result]) -> dict[str, list[Result]]:
    """Results grouped by their case's source, in first-seen order."""
    out: dict[str, list[Result]] = {}
    for r in results:
        out.setdefault(r.case.source, []).append(r)
    return out


def median_over_sources(results: list[Result]) -> float:
    """Median over sources of each source's median absolute error (nan without results): a figure
    no single source's size moves, beside :func:`summary`'s pooled one, in which a source of many
    runs (vTrain's 108 of 306) weighs as many times."""
    groups = by_source(results).values()
    return (
        statistics.median(statistics.median(r.error for r in g) for g in groups) if groups else float("nan")
    )


def summary(results: list[Result]) -> dict[str, float]:
    """Median and 90th percentile of the absolute errors (nearest-rank percentile)."""
    errors = sorted(r.error for r in results)
    if not errors:
        return {"count": 0, "median": float("nan"), "p90": float("nan")}
    p90 = errors[min(len(errors) - 1, max(0, int(round(0.9 * len(errors))) - 1))]
    return {"count": len(errors), "median": statistics.median(errors), "p90": p90}
