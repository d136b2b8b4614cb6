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
error naming the key.
"""

from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from cost_models.parallel import ParallelConfig
from planner.frameworks.torchtitan import EAGER_TORCHTITAN, layer_sac_recomputed_layers
from planner.frameworks.torchtitan_models import VERSION, model_from_custom, model_from_flavor
from planner.inputs.errors import SpecError
from planner.inputs.job_spec import JobSpec
from planner.inputs.model_spec import ModelSpec
from planner.inputs.validation import read_text_capped

try:  # Python >= 3.11; on 3.10 reading a TOML is an error naming the cause (no extra dependency)
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - exercised on Python 3.10 only
    tomllib = None

SECTION_KEYS: dict[str, tuple[str, ...]] = {
    "model": (
        "name",
        "flavor",
        "hf_assets_path",
        "tokenizer_path",
        "converters",
        "print_after_conversion",
    ),
    "training": (
        "dataset",
        "dataset_path",
        "local_batch_size",
        "global_batch_size",
        "seq_len",
        "max_norm",
        "steps",
        "enable_cpu_offload",
        "dtype",
        "mixed_precision_param",
        "mixed_precision_reduce",
        "gc_freq",
        "gc_debug",
        "dataloader",
    ),
    "parallelism": (
        "data_parallel_replicate_degree",
        "data_parallel_shard_degree",
        "fsdp_reshard_after_forward",
        "tensor_parallel_degree",
        "disable_loss_parallel",
        "enable_async_tensor_parallel",
        "pipeline_parallel_degree",
        "module_fqns_per_model_part",
        "pipeline_parallel_first_stage_less_layers",
        "pipeline_parallel_last_stage_less_layers",
        "pipeline_parallel_layers_per_stage",
        "pipeline_parallel_schedule",
        "pipeline_parallel_schedule_csv",
        "pipeline_parallel_microbatch_size",
        "pipeline_parallel_expert_parallel_overlap",
        "context_parallel_degree",
        "context_parallel_load_balancer",
        "context_parallel_rotate_method",
        "expert_parallel_degree",
        "expert_tensor_parallel_degree",
        "expert_parallel_comm_backend",
    ),
    "compile": ("enable", "components", "backend"),
    "activation_checkpoint": (
        "mode",
        "selective_ac_option",
        "per_op_sac_force_recompute_mm_shapes_by_fqns",
        "early_stop",
        "memory_budget",
        "visualize_memory_budget_pareto",
        "preserve_rng_state",
        "determinism_check",
        "debug",
    ),
}
"""Keys of the sections planner interprets (every field of those 0.2.2 dataclasses)."""

SECTIONS = (
    "job",
    "profiling",
    "metrics",
    "model",
    "optimizer",
    "lr_scheduler",
    "training",
    "parallelism",
    "checkpoint",
    "activation_checkpoint",
    "compile",
    "quantize",
    "comm",
    "memory_estimation",
    "fault_tolerance",
    "experimental",
    "validation",
    "debug",
)
"""Top-level sections of ``JobConfig`` (0.2.2)."""

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


def apply_overrides(doc: dict, overrides: list[str] | tuple[str, ...], where: str) -> None:
    """Apply ``--section.key value`` / ``--section.key=value`` overrides in place (typed as TOML
    values where they parse, else strings; commas split ``converters``)."""
    i, items = 0, list(overrides)
    while i < len(items):
        tok = items[i]
        if not tok.startswith("--") or "." not in tok:
            raise SpecError(f"{where}: override {tok!r}: expected --section.key value")
        if "=" in tok:
            key, raw = tok[2:].split("=", 1)
        elif i + 1 < len(items):
            key, raw = tok[2:], items[i + 1]
            i += 1
        else:
            raise SpecError(f"{where}: override {tok!r} has no value")
        i += 1
        *path, last = key.replace("-", "_").split(".")
        node = doc
        for part in path:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise SpecError(f"{where}: override {tok!r}: {part!r} is not a section")
        try:
            value = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw.split(",") if last == "converters" else raw
        node[last] = value


def key_lines(text: str) -> dict:
    """``section.key`` -> line number of every assignment in a TOML text."""
    out, section = {}, ""
    for n, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        head = re.match(r"^\[([^\]]+)\]", s)
        if head:
            section = head.group(1).strip()
            continue
        m = re.match(r"^([A-Za-z0-9_\-]+)\s*=", s)
        if m:
            out[f"{section}.{m.group(1)}"] = n
    return out


class _Doc:
    """Typed access to a TOML document with key paths in errors."""

    def __init__(self, doc: dict, where: str) -> None:
        self.doc, self.where = doc, where
        for name, value in doc.items():
            if name not in SECTIONS:
                raise SpecError(f"{where}: key {name!r}: not a torchtitan {VERSION} section")
            if not isinstance(value, dict):
                raise SpecError(f"{where}: key {name!r}: expected a section")
        for name, keys in SECTION_KEYS.items():
            for key in doc.get(name, {}):
                if key not in keys:
                    raise SpecError(f"{where}: key '{name}.{key}': not a torchtitan {VERSION} key")

    def get(self, section: str, key: str, kind: type | tuple, default):
        value = self.doc.get(section, {}).get(key, default)
        bad = isinstance(value, bool) and kind is int
        if value is not None and (bad or not isinstance(value, kind)):
            raise SpecError(
                f"{self.where}: key '{section}.{key}': expected {getattr(kind, '__name__', kind)}"
            )
        return value

    def positive(self, section: str, key: str, default: int, allow_minus_one: bool = False) -> int:
        value = self.get(section, key, int, default)
        if value < 1 and not (allow_minus_one and value == -1):
            raise SpecError(f"{self.where}: key '{section}.{key}': must be >= 1, got {value}")
        return value


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
        layers = [int(x.split(".", 1)[1]) for x in p if x.startswith("layers.") and x[7:].isdigit()]
        counts.append(len(layers))
        seen += layers
    if seen != list(range(num_layers)):
        raise SpecError(f"{key}: stages must hold layers.0 .. layers.{num_layers - 1} in order, each once")
    if "tok_embeddings" not in parts[0] or not {"norm", "output"} <= set(parts[-1]):
        raise SpecError(f"{key}: tok_embeddings belongs to the first stage, norm and output to the last")
    return counts


def _custom_flavor(d: _Doc, path: Path | None, name: str, flavor: str) -> ModelSpec:
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
    if tomllib is None:
        raise SpecError(f"{where}: reading torchtitan TOML files needs Python >= 3.11 (tomllib)")
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{where}: not valid TOML: {exc}") from None
    apply_overrides(doc, overrides, where)
    d = _Doc(doc, where)
    notes: list[str] = []
    name = d.get("model", "name", str, "llama3")
    flavor = d.get("model", "flavor", str, "debugmodel")
    model = _custom_flavor(d, path, name, flavor)
    L = model.num_layers

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
    dp = rep * shard
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
    accumulation = gbs // (local * dp)
    if pp > 1:
        mbs = d.positive("parallelism", "pipeline_parallel_microbatch_size", 1)
        if local % mbs:
            raise SpecError(
                f"{where}: key 'parallelism.pipeline_parallel_microbatch_size': {mbs} does not divide "
                f"training.local_batch_size {local}"
            )
        if accumulation > 1:
            raise SpecError(
                f"{where}: key 'training.local_batch_size': with pipeline parallelism planner models one "
                f"pipeline flush per step; set local_batch_size = global_batch_size / dp = {gbs // dp}"
            )
    else:
        mbs = local

    precision = "bf16"
    if d.get("training", "dtype", str, "float32") != "float32":
        raise SpecError(
            f"{where}: key 'training.dtype': planner models bf16 mixed precision (float32 master weights)"
        )
    if d.get("training", "mixed_precision_param", str, "bfloat16") != "bfloat16":
        raise SpecError(f"{where}: key 'training.mixed_precision_param': planner models bfloat16 only")
    converters = d.get("model", "converters", list, [])
    if any(x in FLOAT8 for x in converters):
        precision = "fp8"
        float8 = ((d.doc.get("quantize") or {}).get("linear") or {}).get("float8") or {}
        recipe = float8.get("recipe_name") or "tensorwise"
        if recipe != "tensorwise":
            raise SpecError(
                f"{where}: key 'quantize.linear.float8.recipe_name': planner prices torchao's "
                f"tensorwise recipe (per-tensor current scaling), not {recipe!r}"
            )

    schedule, vpp, layers_per_stage = "1f1b", 1, ()
    if pp > 1:
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
        if len(set(counts)) > 1 or L % len(counts):
            layers_per_stage = tuple(counts)

    mode = d.get("activation_checkpoint", "mode", str, "selective")
    recompute, recompute_layers = "none", 0
    if mode == "full":
        recompute = "full"
    elif mode == "selective":
        option = d.get("activation_checkpoint", "selective_ac_option", str, "2")
        if option == "op":
            # per-op policy (distributed/activation_checkpoint.py _apply_op_sac): cost_models.recompute
            recompute = "op"
        elif not option.isdigit() or int(option) < 1:
            raise SpecError(
                f"{where}: key 'activation_checkpoint.selective_ac_option': {option!r}: allowed values: "
                "op, or a positive integer n (checkpoint every n-th block)"
            )
        else:
            every = int(option)
            stage = max(layers_per_stage) if layers_per_stage else L // (pp * vpp)
            if every == 1:
                recompute = "full"
            elif layer_sac_recomputed_layers(stage, every):
                recompute, recompute_layers = "full", layer_sac_recomputed_layers(stage, every)
                notes.append(
                    f"activation_checkpoint: selective every {every} blocks read as full recompute of "
                    f"{recompute_layers} of {stage} layers per stage"
                )
    elif mode != "none":
        raise SpecError(
            f"{where}: key 'activation_checkpoint.mode': {mode!r} is not modelled by planner (allowed values: "
            "none, full, selective)"
        )

    config = ParallelConfig(
        tp=tp,
        pp=pp,
        dp=dp,
        cp=cp,
        ep=ep,
        etp=etp if ep > 1 else 0,
        vpp=vpp,
        micro_batch_size=mbs,
        recompute=recompute,
        recompute_num_layers=recompute_layers,
        sequence_parallel=True,
        optimizer_sharding=sharding,
        schedule="interleaved" if vpp > 1 and schedule == "interleaved" else schedule,
        layers_per_stage=layers_per_stage,
        fsdp_shard=fsdp_shard,
    )
    eager_ops: tuple[str, ...] = ()
    components = d.get("compile", "components", list, ["model", "loss"])
    if not (d.get("compile", "enable", bool, False) and "model" in components):
        eager_ops = EAGER_TORCHTITAN
        notes.append(
            "compile: the model is not compiled (compile.enable, compile.components): RoPE and SwiGLU "
            "priced as eager PyTorch ops"
        )
    job = JobSpec(global_batch_size=gbs, seq_length=seq, precision=precision, eager_ops=eager_ops)
    return ImportedTitan(model, job, config, key_lines(text), tuple(notes))


def read_torchtitan(
    path: str | Path, world_size: int | None, overrides: list[str] | tuple[str, ...] = ()
) -> ImportedTitan:
    """Read a torchtitan TOML file (with a sibling ``custom_import`` module when it names one)."""
    p = Path(path)
    text = read_text_capped(p)  # size-capped, UTF-8, one-line errors (planner.inputs.validation)
    return parse_torchtitan(text, str(p), world_size, overrides, p)
