"""Plan files: the resolved inputs, the chosen configuration with its exact layer partition, the
predictions and the bubble-fill budget, versioned (``schema_version``) and strict on read.

A plan file is YAML or JSON by extension, written for people to read top to bottom (schema
version 2): the framework, ``model``, ``cluster`` and ``job`` (themselves valid planner model and
cluster files), the ``config``, the ``predictions`` with their memory and time breakdowns (the same
fields as ``planner estimate --json``, rounded to 4 significant digits), and last a compact
``bubble_fill_budget`` (one line per stage; ``planner bubbles --plan FILE`` lists every window).
Per-stage rows are written one per line. ``predictions`` and ``bubble_fill_budget`` are outputs:
they are re-computed, never trusted, when a plan is read back. Version-1 plan files (keys sorted,
every window spelled out) are still read.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cost_models.constraints import violations
from cost_models.finetune import check_model as check_finetune_model
from cost_models.parallel import (
    OPTIMIZER_SHARDING,
    RANK_ORDERS,
    RECOMPUTE,
    RECOMPUTE_MODULES,
    SCHEDULES,
    ParallelConfig,
    canonical_modules,
)
from planner import __version__
from planner.frameworks import FRAMEWORKS, get_framework
from planner.inputs.cluster_spec import ClusterSpec
from planner.inputs.documents import Reader, check_header, read_document
from planner.inputs.errors import SpecError
from planner.inputs.files import is_stdout, plan_yaml, write_text_atomic
from planner.inputs.job_spec import JobSpec
from planner.inputs.jobs import finetune_mapping, job_from_mapping
from planner.inputs.model_spec import ModelSpec
from planner.inputs.model_yaml import model_from_mapping, model_to_mapping
from planner.inputs.validation import check_number, clean, json_text, limit, require_precision
from planner.profiles.hardware import cluster_from_mapping, cluster_to_mapping

PLAN_SCHEMA_VERSION = 2
"""Plan file layout version: 2 orders sections for reading and keeps the budget compact."""
PLAN_SCHEMA_VERSIONS = (1, 2)
"""Plan file versions :func:`read_plan` accepts (version 1: before the layout of version 2)."""


@dataclass(frozen=True, slots=True)
class PlanInputs:
    """What a plan file fixes: everything needed to re-estimate or export it."""

    model: ModelSpec
    cluster: ClusterSpec
    job: JobSpec
    config: ParallelConfig
    stage_groups: tuple[int, ...] = ()
    framework: str = "any"
    """The framework the plan was searched for (:data:`planner.frameworks.FRAMEWORKS`); plan files
    written before frameworks existed read back as ``any``."""
    memory_headroom_bytes: float = 0.0
    """Memory per GPU the search kept free (``search --headroom-gib``), recorded in the plan's
    ``search`` section so that ``planner check --max-slowdown`` compares with the best plan under
    the same memory rule (plans written before it read back as 0)."""
    profile: object | None = None
    """The calibrated profile (:class:`planner.profiles.calibrated.Profile`) the plan was made with,
    recorded in its ``profile`` section and re-applied to the cluster when the plan is read."""
    software: str = "base"
    """The software profile (:mod:`planner.profiles.software`) the plan was made with, recorded in its
    ``software`` section and re-applied to the cluster when the plan is read (plans written before
    software profiles read back as ``base``: the GPU files' base values, as they were made with)."""


def config_to_mapping(c: ParallelConfig) -> dict:
    return {
        "tp": c.tp,
        "pp": c.pp,
        "dp": c.dp,
        "cp": c.cp,
        "ep": c.ep,
        "etp": c.expert_tp,
        "vpp": c.vpp,
        "micro_batch_size": c.micro_batch_size,
        "recompute": c.recompute,
        "recompute_num_layers": c.recompute_num_layers,
        # Selective recompute modules other than the default, written only when set.
        **({"recompute_modules": list(c.recompute_modules)} if c.recompute_modules else {}),
        "sequence_parallel": c.sp,
        "optimizer_sharding": c.optimizer_sharding,
        "schedule": c.schedule,
        "layers_per_stage": list(c.layers_per_stage),
        # HSDP shard, offloaded layers, optimizer instances, rank order: written only when set.
        **c.optional_fields(),
    }


def recompute_modules_tuple(values: list, where: str, key: str) -> tuple[str, ...]:
    """Selective recompute modules (:data:`cost_models.parallel.RECOMPUTE_MODULES`, any order, no
    repeats) in canonical order, Megatron's default (core attention alone) as the empty tuple; or a
    SpecError naming ``where``, ``key`` and the allowed values."""
    for m in values:
        if m not in RECOMPUTE_MODULES:
            raise SpecError(
                f"{where}: {key}: {m!r} is not allowed; allowed values: {', '.join(RECOMPUTE_MODULES)}"
            )
    if len(set(values)) != len(values):
        raise SpecError(f"{where}: {key}: a module is listed twice: {', '.join(values)}")
    return canonical_modules(values)


def config_from_mapping(data: dict, where: str) -> ParallelConfig:
    r = Reader(data, where, "config")
    c = ParallelConfig(
        tp=r.get("tp", int, positive=True),
        pp=r.get("pp", int, positive=True),
        dp=r.get("dp", int, positive=True),
        cp=r.get("cp", int, 1, positive=True),
        ep=r.get("ep", int, 1, positive=True),
        etp=r.get("etp", int, 0, positive=True),  # written resolved (>= 1); absent = Megatron's default
        vpp=r.get("vpp", int, 1, positive=True),
        micro_batch_size=r.get("micro_batch_size", int, positive=True),
        recompute=r.get("recompute", str, "none", choices=RECOMPUTE),
        recompute_num_layers=r.get("recompute_num_layers", int, 0),
        recompute_modules=recompute_modules_tuple(
            r.get("recompute_modules", list, []), where, "key 'config.recompute_modules'"
        ),
        sequence_parallel=r.get("sequence_parallel", bool, True),
        optimizer_sharding=r.get("optimizer_sharding", str, "distributed", choices=OPTIMIZER_SHARDING),
        schedule=r.get("schedule", str, "1f1b", choices=SCHEDULES),
        layers_per_stage=tuple(r.get("layers_per_stage", list, [])),
        fsdp_shard=r.get("fsdp_shard", int, 0),
        offload_layers=r.get("offload_layers", int, 0),
        optimizer_instances=r.get("optimizer_instances", int, 1, positive=True),
        rank_order=r.get("rank_order", str, RANK_ORDERS[0], choices=RANK_ORDERS),
    )
    for i, x in enumerate(c.layers_per_stage):
        check_number(
            x,
            where,
            f"config.layers_per_stage[{i}]",
            integer=True,
            positive=True,
            maximum=limit("num_layers"),
        )
    r.done()
    return c


def job_to_mapping(job: JobSpec) -> dict:
    """The job section of a plan file (read back by :func:`planner.inputs.jobs.job_from_mapping`)."""
    return {
        "global_batch_size": job.global_batch_size,
        "seq_length": job.seq_length,
        "precision": job.precision,
        # Always with fp8 (plans without it were planned with delayed scaling: job_from_mapping).
        **({"fp8_recipe": job.fp8_recipe} if job.precision == "fp8" else {}),
        "optimizer": job.optimizer,
        "grad_dtype": job.grad_dtype,
        "master_dtype": job.master_dtype,
        **(
            {"optimizer_state_dtype": job.optimizer_state_dtype}
            if job.optimizer_state_dtype != "fp32"
            else {}
        ),
        "overlap_grad_reduce": job.overlap_grad_reduce,
        "overlap_param_gather": job.overlap_param_gather,
        # Written only when not the default, so plans without them read as before.
        **({"gradient_accumulation_fusion": False} if not job.gradient_accumulation_fusion else {}),
        **({"tp_comm_overlap": True} if job.tp_comm_overlap else {}),
        **({"moe_dispatcher": job.moe_dispatcher} if job.moe_dispatcher != "alltoall" else {}),
        **({"moe_a2a_overlap": True} if job.moe_a2a_overlap else {}),
        **({"cuda_graph_scope": list(job.cuda_graph_scope)} if job.cuda_graph_scope else {}),
        **({"eager_ops": list(job.eager_ops)} if job.eager_ops else {}),
        **({"attention_impl": job.attention_impl} if job.attention_impl != "fused" else {}),
        **({"pipeline_scatter_gather": True} if job.pipeline_scatter_gather else {}),
        **(
            {"sharded_grad_reduce": job.sharded_grad_reduce}
            if job.sharded_grad_reduce != "reduce_scatter"
            else {}
        ),
        # LoRA and packed sequences: written only when set (planner.inputs.jobs.finetune_mapping).
        **finetune_mapping(job),
    }


def plan_document(inputs: PlanInputs, predictions: dict, budget: dict | None) -> dict:
    """The full plan as plain data, in reading order: inputs, configuration, predictions
    (:func:`planner.outputs.views.predictions_dict`), then the compact budget
    (:func:`planner.outputs.bubbles.budget_summary_dict`)."""
    config = config_to_mapping(inputs.config)
    config = {
        **{k: v for k, v in config.items() if k != "layers_per_stage"},
        "num_microbatches": inputs.config.num_microbatches(inputs.job),
        "layers_per_stage": config["layers_per_stage"],
    }
    doc = {
        "schema_version": PLAN_SCHEMA_VERSION,
        "kind": "plan",
        "planner_version": __version__,
        "framework": framework_to_mapping(inputs.framework),
        "software": software_to_mapping(inputs.software),
        "model": model_to_mapping(inputs.model),
        "cluster": cluster_to_mapping(inputs.cluster),
        "job": job_to_mapping(inputs.job),
        "config": config,
        "stage_groups": list(inputs.stage_groups),
        "search": search_to_mapping(inputs.memory_headroom_bytes),
        "predictions": predictions,
    }
    if inputs.profile is not None:
        from planner.profiles.calibrated import profile_to_mapping

        doc = {
            **{k: v for k, v in doc.items() if k != "predictions"},
            "profile": profile_to_mapping(inputs.profile, with_fit=False),
            "predictions": predictions,
        }
    if budget is not None:
        doc["bubble_fill_budget"] = budget
    return doc


def search_to_mapping(memory_headroom_bytes: float) -> dict:
    """The ``search`` section of a plan file: the search's rules a re-check must apply again."""
    return {"memory_headroom_gib": memory_headroom_bytes / 2**30}


def search_from_mapping(data: dict, where: str) -> float:
    """The memory headroom (bytes) recorded in a plan file's ``search`` section."""
    r = Reader(data, where, "search")
    gib = r.get("memory_headroom_gib", float, 0.0, maximum=limit("memory_gib"))
    r.done()
    return gib * 2**30


def framework_to_mapping(name: str) -> dict:
    """The framework section of a plan file: its name and the pinned version it was planned for."""
    fw = get_framework(name)
    return {"name": fw.name, "version": fw.version}


def framework_from_mapping(data: dict, where: str) -> str:
    """The framework name of a plan file's ``framework`` section (version recorded, not enforced)."""
    r = Reader(data, where, "framework")
    name = r.get("name", str, choices=tuple(FRAMEWORKS))
    r.get("version", str, "")
    r.done()
    return name


def software_to_mapping(name: str) -> dict:
    """The ``software`` section of a plan file: the software profile's name (``base``: none) and
    its release month."""
    from planner.profiles.software import BASE, load_profiles

    released = str((load_profiles().get(name) or {}).get("released", ""))
    return {"name": name, **({"released": released} if name != BASE else {})}


def software_from_mapping(data: dict | None, where: str) -> str:
    """The software profile name of a plan file's ``software`` section (``base`` when absent; the
    release month is recorded, not enforced)."""
    from planner.profiles.software import BASE, software_names

    if data is None:
        return BASE
    r = Reader(data, where, "software")
    name = r.get("name", str, choices=software_names())
    r.get("released", str, "")
    r.done()
    return name


def check_framework(inputs: PlanInputs, where: str) -> None:
    """A plan's configuration must be one its framework runs (a hand-edited plan may not be)."""
    reasons = get_framework(inputs.framework).violations(
        inputs.model, inputs.cluster, inputs.job, inputs.config
    )
    if reasons:
        raise SpecError(f"{where}: key 'config': {reasons[0]} (the plan's framework is {inputs.framework})")


def write_plan(path: Path, doc: dict) -> None:
    """Write YAML (.yaml/.yml) or JSON (.json) atomically: a failed write never clobbers the file
    (:func:`planner.inputs.files.write_text_atomic`); ``-`` or ``/dev/stdout``: YAML on stdout."""
    suffix = ".yaml" if is_stdout(path) else path.suffix.lower()
    if suffix not in (".yaml", ".yml", ".json"):
        raise SpecError(f"{path}: plan files end in .yaml, .yml or .json")
    doc = clean(doc)  # finite, no round-off negatives (planner.inputs.validation)
    text = json_text(doc, indent=2) + "\n" if suffix == ".json" else plan_yaml(doc)
    write_text_atomic(path, text)


def open_plan(path: str | Path, kind: str) -> tuple[Reader, str]:
    """A strict reader over a plan file of ``kind`` (header checked) and the file's name."""
    p = Path(path)
    where = str(p)
    r = Reader(read_document(p), where)
    if kind == "plan":
        version = r.get("schema_version", int)
        if version not in PLAN_SCHEMA_VERSIONS:
            raise SpecError(
                f"{where}: schema_version {version} is not supported for plan files; supported: "
                + ", ".join(map(str, PLAN_SCHEMA_VERSIONS))
            )
        r.get("kind", str, choices=(kind,))
    else:
        check_header(r, kind)
    r.get("planner_version", str, "")
    return r, where


def read_plan(path: str | Path, software: str | None = None, profile=None) -> PlanInputs:
    """Read a plan file strictly back into its inputs, its cluster under the software profile and
    then the calibration profile it records (:func:`planner.profiles.software.configure`). ``software`` (a
    name :func:`planner.profiles.software.check_software` accepted) and ``profile`` (a
    :class:`planner.profiles.calibrated.Profile`) replace the recorded ones."""
    r, where = open_plan(path, "plan")
    model = model_from_mapping(r.get("model", dict), f"{where} (model)")
    cluster = cluster_from_mapping(r.get("cluster", dict), f"{where} (cluster)")
    job = job_from_mapping(r.get("job", dict), where)
    raw_config = dict(r.get("config", dict))
    microbatches = raw_config.pop("num_microbatches", None)
    config = config_from_mapping(raw_config, where)
    if microbatches is not None and microbatches != config.num_microbatches(job):
        raise SpecError(
            f"{where}: key 'config.num_microbatches': {microbatches!r} does not match global_batch_size / "
            f"(dp x micro_batch_size) = {config.num_microbatches(job)}"
        )
    groups = tuple(r.get("stage_groups", list, []))
    framework = framework_from_mapping(r.get("framework", dict, {"name": "any"}), where)
    recorded = software_from_mapping(r.get("software", dict, None), where)
    software = recorded if software is None else software
    headroom = search_from_mapping(r.get("search", dict, {}), where)
    if r.get("profile", dict, None) is not None:
        from planner.profiles.calibrated import profile_from_mapping

        recorded_profile = profile_from_mapping(r.get("profile", dict), f"{where} (profile)")
        profile = recorded_profile if profile is None else profile
    from planner.profiles.software import configure

    cluster, _ = configure(cluster, software, profile)
    r.get("predictions", dict, {})
    r.get("bubble_fill_budget", dict, {})
    r.done()
    inputs = PlanInputs(model, cluster, job, config, groups, framework, headroom, profile, software)
    check_configuration(inputs, where)
    check_framework(inputs, where)
    return inputs


def check_configuration(inputs: PlanInputs, where: str) -> None:
    """Re-validate a plan's recorded configuration against its recorded inputs: a hand-edited plan
    (``etp: 64``, ``tp: 3``) is a one-line error naming the constraint, never a crash or a silent
    re-estimate."""
    require_precision(inputs.cluster, inputs.job, where)
    check_finetune_model(inputs.model, inputs.job, where)
    reasons = violations(inputs.model, inputs.cluster, inputs.job, inputs.config)
    if reasons:
        raise SpecError(f"{where}: key 'config': {reasons[0]}")
