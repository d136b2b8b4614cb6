"""torchtitan import: a job-config TOML (and command-line overrides) back into a model, a job and a
configuration, the way torchtitan 0.2.2 reads it (``torchtitan/config/job_config.py`` defaults,
``ConfigManager``: CLI overrides > TOML > defaults).

Read as torchtitan runs it: ``data_parallel_shard_degree = -1`` takes the leftover ranks; FSDP is
ZeRO-3 or ZeRO-2 by ``fsdp_reshard_after_forward`` (``"default"``: ZeRO-2 with pp > 1, else
ZeRO-3); the stages come from ``module_fqns_per_model_part``, else from
``pipeline_parallel_layers_per_stage``, else from torchtitan's default split (one stage per rank
for single-stage schedules, two for looped ones, the first and last stages one layer lighter:
``generate_llm_fqn_per_model_part``). torchtitan's default ``activation_checkpoint.mode`` is
``selective`` with ``selective_ac_option = "2"``: full checkpointing of every second block, read
as full recompute of half the layers of each stage; ``selective_ac_option = "op"`` (the per-op
policy of its Llama configs) is recompute ``op`` (:mod:`cost_models.recompute`). HSDP (``data_parallel_replicate_degree`` and
``data_parallel_shard_degree`` both > 1) reads as ``fsdp_shard = dp_shard * cp``, with full sharding
only. Without ``compile.enable`` (torchtitan's default: false) or with ``model`` left out of
``compile.components``, the job's RoPE and SwiGLU are eager PyTorch ops
(``JobSpec.eager_ops``, :data:`~planner.frameworks.torchtitan.EAGER_TORCHTITAN`).
What planner cannot model (HSDP with ZeRO-2 resharding, pure-bf16 or fp32 training, several pipeline flushes per step) is an
error naming the key. The TOML itself (sections, keys, overrides, typed access) is read by
:mod:`.job_config`; this module reads it section by section into planner's inputs.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass, field
from pathlib import Path

from cost_models.parallel import ParallelConfig
from planner.frameworks.torchtitan import EAGER_TORCHTITAN, layer_sac_recomputed_layers
from planner.frameworks.torchtitan_models import model_from_custom, model_from_flavor
from planner.inputs.errors import SpecError
from planner.inputs.job_spec import JobSpec
from planner.inputs.model_spec import ModelSpec
from planner.inputs.validation import read_text_capped
from planner.launch.torchtitan.job_config import Document, key_lines, read_document

SCHEDULES = {
    "1f1b": "1f1b",
    "gpipe": "gpipe",
    "interleaved1f1b": "interleaved",
    "interleavedzerobubble": "zb-h1",
    "zbvzerobubble": "zb-v",
}
"""torch schedule names (case-insensitive, as ``get_schedule_class``) planner models."""
LOOPED = ("interleaved1f1b", "interleavedzerobubble", "zbvzerobubble")
FLOAT8 = ("quantize.linear.float8", "float8")

KEY_HINTS = {
    "--global-batch-size": "training.global_batch_size",
    "--micro-batch-size": "parallelism.pipeline_parallel_microbatch_size",
    "--tensor-model-parallel-size": "parallelism.tensor_parallel_degree",
    "--pipeline-model-parallel-size": "parallelism.pipeline_parallel_degree",
    "--context-parallel-size": "parallelism.context_parallel_degree",
    "--expert-model-parallel-size": "parallelism.expert_parallel_degree",
    "--expert-tensor-parallel-size": "parallelism.expert_tensor_parallel_degree",
    "--num-virtual-stages-per-pipeline-rank": "parallelism.module_fqns_per_model_part",
    "--seq-length": "training.seq_len",
    "--recompute-granularity": "activation_checkpoint.mode",
    "--use-distributed-optimizer": "parallelism.data_parallel_shard_degree",
}
"""The torchtitan key for each Megatron flag ``planner.launch.check`` names in a finding."""


@dataclass(frozen=True, slots=True)
class ImportedTitan:
    """A torchtitan job config read back."""

    model: ModelSpec
    job: JobSpec
    config: ParallelConfig
    key_lines: dict = field(default_factory=dict)
    """Line (1-based) of each ``section.key`` in the TOML, for annotations."""
    notes: tuple[str, ...] = ()
    """How settings without an exact planner equivalent were read."""


def _decimal(text: str) -> bool:
    """Whether ``text`` passes torchtitan's ``str.isdigit`` test and then its ``int``: isdigit
    also accepts superscripts such as ``"²"``, on which ``int`` raises (torchtitan's own launch
    fails there; planner refuses it with a one-line error)."""
    if not text.isdigit():
        return False
    try:
        int(text)
    except ValueError:
        return False
    return True


def default_layer_split(num_stages: int, num_layers: int, first_less: int, last_less: int) -> list[int]:
    """Layers per stage of torchtitan's ``generate_llm_fqn_per_model_part`` (the embedding and the
    output count as ``first_less`` and ``last_less`` layers)."""
    if num_stages == 1:
        return [num_layers]
    effective = num_layers + first_less + last_less
    base, extra = divmod(effective, num_stages)
    if base == 0 or first_less > base or last_less > base:
        raise ValueError(f"{num_stages} stages cannot split {num_layers} layers")
    out, left = [], num_layers
    for s in range(num_stages):
        n = base + (1 if s < extra else 0)
        n -= first_less if s == 0 else (last_less if s == num_stages - 1 else 0)
        n = min(n, left)
        out.append(n)
        left -= n
    return out


def _split_from_fqns(parts: object, num_layers: int, where: str) -> list[int]:
    key = f"{where}: key 'parallelism.module_fqns_per_model_part'"
    if not isinstance(parts, list) or not all(
        isinstance(p, list) and all(isinstance(x, str) for x in p) for p in parts
    ):
        raise SpecError(f"{key}: expected a list of lists of module names")
    counts, seen = [], []
    for p in parts:
        layers = [int(x.split(".", 1)[1]) for x in p if x.startswith("layers.") and _decimal(x[7:])]
        counts.append(len(layers))
        seen += layers
    if seen != list(range(num_layers)):
        raise SpecError(f"{key}: stages must hold layers.0 .. layers.{num_layers - 1} in order, each once")
    if "tok_embeddings" not in parts[0] or not {"norm", "output"} <= set(parts[-1]):
        raise SpecError(f"{key}: tok_embeddings belongs to the first stage, norm and output to the last")
    return counts


def _custom_flavor(d: Document, path: Path | None, name: str, flavor: str) -> ModelSpec:
    """The model of a flavor registered by the ``[experimental] custom_import`` module next to the TOML."""
    module = d.get("experimental", "custom_import", str, "")
    where = d.where
    if not module or path is None:
        return model_from_flavor(name, flavor, where)
    source = path.parent / (module.replace(".", "/") + ".py")
    try:
        tree = ast.parse(source.read_text())
    except (OSError, SyntaxError) as exc:
        raise SpecError(
            f"{where}: key 'experimental.custom_import': cannot read {source} for flavor {flavor!r} ({exc})"
        ) from None
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Subscript)
            and isinstance(node.value, ast.Call)
        ):
            target = node.targets[0].slice
            if isinstance(target, ast.Constant) and target.value == flavor:
                kwargs: dict = {}
                try:
                    for kw in node.value.keywords:
                        if isinstance(kw.value, ast.Call):
                            kwargs.update({k.arg: ast.literal_eval(k.value) for k in kw.value.keywords})
                        else:
                            kwargs[kw.arg] = ast.literal_eval(kw.value)
                except ValueError:
                    raise SpecError(f"{source}: flavor {flavor!r}: arguments must be literals") from None
                return model_from_custom(name, flavor, kwargs, str(source))
    raise SpecError(f"{where}: key 'model.flavor': {flavor!r} is not registered in {source}")


def parse_torchtitan(
    text: str,
    where: str,
    world_size: int | None,
    overrides: list[str] | tuple[str, ...] = (),
    path: Path | None = None,
) -> ImportedTitan:
    """A torchtitan job config (TOML text plus overrides) as planner inputs."""
    d = read_document(text, where, overrides)
    notes: list[str] = []
    name = d.get("model", "name", str, "llama3")
    flavor = d.get("model", "flavor", str, "debugmodel")
    model = _custom_flavor(d, path, name, flavor)
    mesh = _mesh(d, world_size)
    seq, gbs, mbs = _batch(d, mesh.pp, mesh.dp)
    precision = _precision(d)
    schedule, vpp, layers_per_stage = _stages(d, mesh.pp, model.num_layers)
    recompute, recompute_layers = _activation_checkpoint(
        d, model.num_layers, mesh.pp, vpp, layers_per_stage, notes
    )
    config = ParallelConfig(
        tp=mesh.tp,
        pp=mesh.pp,
        dp=mesh.dp,
        cp=mesh.cp,
        ep=mesh.ep,
        etp=mesh.etp if mesh.ep > 1 else 0,
        vpp=vpp,
        micro_batch_size=mbs,
        recompute=recompute,
        recompute_num_layers=recompute_layers,
        sequence_parallel=True,
        optimizer_sharding=mesh.sharding,
        schedule="interleaved" if vpp > 1 and schedule == "interleaved" else schedule,
        layers_per_stage=layers_per_stage,
        fsdp_shard=mesh.fsdp_shard,
    )
    eager_ops = _eager_ops(d, notes)
    job = JobSpec(global_batch_size=gbs, seq_length=seq, precision=precision, eager_ops=eager_ops)
    return ImportedTitan(model, job, config, key_lines(text), tuple(notes))


@dataclass(frozen=True, slots=True)
class _Mesh:
    """The ``[parallelism]`` degrees as torchtitan's ``ParallelDims`` takes them, with the data
    parallelism resolved (``data_parallel_shard_degree = -1``: the leftover ranks) and the FSDP
    sharding it implies."""

    tp: int
    pp: int
    cp: int
    ep: int
    etp: int
    dp: int
    """dp_replicate x dp_shard."""
    sharding: str
    """``ParallelConfig.optimizer_sharding``: none, zero2 or full."""
    fsdp_shard: int
    """``ParallelConfig.fsdp_shard``: dp_shard x cp under HSDP, else 0."""


def _mesh(d: Document, world_size: int | None) -> _Mesh:
    """The parallel degrees, checked against the cluster's ``world_size`` GPUs (None: unknown)."""
    where = d.where
    tp = d.positive("parallelism", "tensor_parallel_degree", 1)
    pp = d.positive("parallelism", "pipeline_parallel_degree", 1)
    cp = d.positive("parallelism", "context_parallel_degree", 1)
    ep = d.positive("parallelism", "expert_parallel_degree", 1)
    etp = d.positive("parallelism", "expert_tensor_parallel_degree", 1)
    rep = d.positive("parallelism", "data_parallel_replicate_degree", 1)
    shard = d.positive("parallelism", "data_parallel_shard_degree", -1, allow_minus_one=True)
    if shard == -1:
        if world_size is None:
            raise SpecError(
                f"{where}: key 'parallelism.data_parallel_shard_degree': -1 needs the cluster size"
            )
        shard = max(1, world_size // (rep * cp * tp * pp))
    if world_size is not None and rep * shard * cp * tp * pp != world_size:
        raise SpecError(
            f"{where}: key 'parallelism.data_parallel_shard_degree': dp_replicate*dp_shard*cp*tp*pp = "
            f"{rep}*{shard}*{cp}*{tp}*{pp} = {rep * shard * cp * tp * pp} is not the cluster's {world_size} GPUs"
        )
    policy = d.get("parallelism", "fsdp_reshard_after_forward", str, "default")
    if policy not in ("default", "always", "never"):
        raise SpecError(
            f"{where}: key 'parallelism.fsdp_reshard_after_forward': {policy!r} (allowed values: default, always, never)"
        )
    if shard * cp > 1:
        sharding = "zero2" if policy == "never" or (policy == "default" and pp > 1) else "full"
    else:
        sharding = "none"
    # HSDP: FSDP2 shards over dp_shard x cp and replicates across dp_replicate (planner's fsdp_shard)
    fsdp_shard = shard * cp if rep > 1 and shard > 1 else 0
    if fsdp_shard and sharding != "full":
        raise SpecError(
            f"{where}: key 'parallelism.data_parallel_replicate_degree': HSDP (replicate {rep} x shard {shard}) "
            "is modelled with full sharding only (fsdp_reshard_after_forward always, or default without pp)"
        )
    return _Mesh(
        tp=tp, pp=pp, cp=cp, ep=ep, etp=etp, dp=rep * shard, sharding=sharding, fsdp_shard=fsdp_shard
    )


def _batch(d: Document, pp: int, dp: int) -> tuple[int, int, int]:
    """(sequence length, global batch, micro-batch): ``global_batch_size`` -1 is one local batch
    per data-parallel rank; with pipeline parallelism one flush per step, micro-batches of
    ``pipeline_parallel_microbatch_size``; without, the local batch is the micro-batch."""
    where = d.where
    seq = d.positive("training", "seq_len", 2048)
    local = d.positive("training", "local_batch_size", 8)
    gbs = d.get("training", "global_batch_size", int, -1)
    if gbs < 0:
        gbs = local * dp
    if gbs % (local * dp):
        raise SpecError(
            f"{where}: key 'training.global_batch_size': {gbs} is not divisible by local_batch_size x dp = "
            f"{local} x {dp}"
        )
    if pp == 1:
        return seq, gbs, local
    mbs = d.positive("parallelism", "pipeline_parallel_microbatch_size", 1)
    if local % mbs:
        raise SpecError(
            f"{where}: key 'parallelism.pipeline_parallel_microbatch_size': {mbs} does not divide "
            f"training.local_batch_size {local}"
        )
    if gbs // (local * dp) > 1:
        raise SpecError(
            f"{where}: key 'training.local_batch_size': with pipeline parallelism planner models one "
            f"pipeline flush per step; set local_batch_size = global_batch_size / dp = {gbs // dp}"
        )
    return seq, gbs, mbs


def _precision(d: Document) -> str:
    """``JobSpec.precision``: bf16 mixed precision, fp8 with torchao's float8 converter (tensorwise
    recipe only)."""
    where = d.where
    if d.get("training", "dtype", str, "float32") != "float32":
        raise SpecError(
            f"{where}: key 'training.dtype': planner models bf16 mixed precision (float32 master weights)"
        )
    if d.get("training", "mixed_precision_param", str, "bfloat16") != "bfloat16":
        raise SpecError(f"{where}: key 'training.mixed_precision_param': planner models bfloat16 only")
    converters = d.get("model", "converters", list, [])
    if not any(x in FLOAT8 for x in converters):
        return "bf16"
    float8 = ((d.doc.get("quantize") or {}).get("linear") or {}).get("float8") or {}
    recipe = float8.get("recipe_name") or "tensorwise"
    if recipe != "tensorwise":
        raise SpecError(
            f"{where}: key 'quantize.linear.float8.recipe_name': planner prices torchao's "
            f"tensorwise recipe (per-tensor current scaling), not {recipe!r}"
        )
    return "fp8"


def _stages(d: Document, pp: int, num_layers: int) -> tuple[str, int, tuple[int, ...]]:
    """(schedule, virtual stages per rank, layers per stage: empty when even) of the pipeline, the
    stages read from ``module_fqns_per_model_part``, else ``pipeline_parallel_layers_per_stage``,
    else torchtitan's default split (:func:`default_layer_split`)."""
    if pp == 1:
        return "1f1b", 1, ()
    where, L = d.where, num_layers
    raw = d.get("parallelism", "pipeline_parallel_schedule", str, "1F1B")
    key = raw.lower()
    if key not in SCHEDULES:
        raise SpecError(
            f"{where}: key 'parallelism.pipeline_parallel_schedule': {raw!r} is not modelled by planner "
            "(allowed values: 1F1B, GPipe, Interleaved1F1B, InterleavedZeroBubble, ZBVZeroBubble)"
        )
    schedule = SCHEDULES[key]
    parts = d.doc.get("parallelism", {}).get("module_fqns_per_model_part")
    per_stage = d.get("parallelism", "pipeline_parallel_layers_per_stage", int, None)
    first_less = d.get("parallelism", "pipeline_parallel_first_stage_less_layers", int, 1)
    last_less = d.get("parallelism", "pipeline_parallel_last_stage_less_layers", int, 1)
    if parts is not None:
        counts = _split_from_fqns(parts, L, where)
    else:
        if per_stage is not None:
            stages = math.ceil((L + first_less + last_less) / per_stage)
        else:
            stages = pp * (2 if key in LOOPED else 1)
        try:
            counts = default_layer_split(stages, L, first_less, last_less)
        except ValueError as exc:
            raise SpecError(f"{where}: key 'parallelism.pipeline_parallel_degree': {exc}") from None
    if len(counts) % pp:
        raise SpecError(
            f"{where}: key 'parallelism.module_fqns_per_model_part': {len(counts)} stages do not divide "
            f"over pp = {pp} ranks"
        )
    vpp = len(counts) // pp
    _check_stages_per_rank(where, schedule, raw, vpp)
    return schedule, vpp, (tuple(counts) if len(set(counts)) > 1 or L % len(counts) else ())


def _check_stages_per_rank(where: str, schedule: str, raw: str, vpp: int) -> None:
    """The stages per rank each schedule runs: one for 1F1B, GPipe and (as ZB-H1)
    InterleavedZeroBubble, two or more for Interleaved1F1B, exactly two for ZBVZeroBubble."""
    if schedule == "zb-h1" and vpp > 1:
        raise SpecError(
            f"{where}: key 'parallelism.pipeline_parallel_schedule': InterleavedZeroBubble with {vpp} stages "
            "per rank is not modelled by planner (one stage per rank is ZB-H1)"
        )
    if schedule in ("1f1b", "gpipe") and vpp > 1:
        raise SpecError(
            f"{where}: key 'parallelism.pipeline_parallel_schedule': {raw} runs one stage per rank"
        )
    if schedule == "zb-v" and vpp != 2:
        raise SpecError(
            f"{where}: key 'parallelism.pipeline_parallel_schedule': {raw} runs exactly 2 stages per rank "
            f"(torchtitan's V placement), got {vpp}"
        )
    if schedule == "interleaved" and vpp < 2:
        raise SpecError(
            f"{where}: key 'parallelism.pipeline_parallel_schedule': {raw} needs 2+ stages per rank"
        )


def _activation_checkpoint(
    d: Document, num_layers: int, pp: int, vpp: int, layers_per_stage: tuple[int, ...], notes: list[str]
) -> tuple[str, int]:
    """(``ParallelConfig.recompute``, ``recompute_num_layers``) of ``[activation_checkpoint]``:
    ``selective_ac_option = "op"`` is recompute ``op``, ``"<n>"`` full recompute of every n-th block
    of a stage (a note says how it was read)."""
    where = d.where
    mode = d.get("activation_checkpoint", "mode", str, "selective")
    if mode == "full":
        return "full", 0
    if mode == "none":
        return "none", 0
    if mode != "selective":
        raise SpecError(
            f"{where}: key 'activation_checkpoint.mode': {mode!r} is not modelled by planner (allowed values: "
            "none, full, selective)"
        )
    option = d.get("activation_checkpoint", "selective_ac_option", str, "2")
    if option == "op":
        # per-op policy (distributed/activation_checkpoint.py _apply_op_sac): cost_models.recompute
        return "op", 0
    if not _decimal(option) or int(option) < 1:
        raise SpecError(
            f"{where}: key 'activation_checkpoint.selective_ac_option': {option!r}: allowed values: "
            "op, or a positive integer n (checkpoint every n-th block)"
        )
    every = int(option)
    stage = max(layers_per_stage) if layers_per_stage else num_layers // (pp * vpp)
    if every == 1:
        return "full", 0
    recompute_layers = layer_sac_recomputed_layers(stage, every)
    if not recompute_layers:
        return "none", 0
    notes.append(
        f"activation_checkpoint: selective every {every} blocks read as full recompute of "
        f"{recompute_layers} of {stage} layers per stage"
    )
    return "full", recompute_layers


def _eager_ops(d: Document, notes: list[str]) -> tuple[str, ...]:
    """``JobSpec.eager_ops``: without ``compile.enable`` (torchtitan's default: false) or with
    ``model`` left out of ``compile.components``, RoPE and SwiGLU run as eager PyTorch ops."""
    components = d.get("compile", "components", list, ["model", "loss"])
    if d.get("compile", "enable", bool, False) and "model" in components:
        return ()
    notes.append(
        "compile: the model is not compiled (compile.enable, compile.components): RoPE and SwiGLU "
        "priced as eager PyTorch ops"
    )
    return EAGER_TORCHTITAN


def read_torchtitan(
    path: str | Path, world_size: int | None, overrides: list[str] | tuple[str, ...] = ()
) -> ImportedTitan:
    """Read a torchtitan TOML file (with a sibling ``custom_import`` module when it names one)."""
    p = Path(path)
    text = read_text_capped(
        p, expected="TOML"
    )  # size-capped, UTF-8, one-line errors (planner.inputs.validation)
    return parse_torchtitan(text, str(p), world_size, overrides, p)
