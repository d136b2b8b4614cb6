"""torchtitan export: a job-config TOML, the equivalent command-line overrides, launch scripts.

Keys and their meaning are those of torchtitan 0.2.2 (``torchtitan/config/job_config.py``; see
:mod:`planner.frameworks.torchtitan` for what each setting runs). The TOML is written
by hand (Python has no TOML writer in the standard library); every emitter is a pure function,
golden-tested. Not exported, marked as placeholders: the tokenizer/HF assets path, the dataset,
the learning rate and the run length.

Batch mapping. planner's ``m = gbs / (mbs * dp)`` micro-batches per step become, with pp > 1,
``training.local_batch_size = gbs / dp`` split by the pipeline schedule into micro-batches of
``pipeline_parallel_microbatch_size = mbs`` (``build_pipeline_schedule``); with pp = 1,
``local_batch_size = mbs`` and ``global_batch_size = gbs``, which torchtitan runs as ``m``
gradient-accumulation steps (``torchtitan/train.py``).
"""

from __future__ import annotations

import json

from cost_models.parallel import ParallelConfig
from cost_models.schedules import V_SHAPE
from planner import __version__
from planner.frameworks.base import every_nth, stage_size
from planner.frameworks.torchtitan import TORCHTITAN, dp_shard_degree
from planner.frameworks.torchtitan_models import (
    CUSTOM_MODULE,
    VERSION,
    TitanModel,
    flavor_module,
    titan_model,
)
from planner.inputs.errors import SpecError
from planner.plans.plan_file import PlanInputs

SCHEDULE_NAMES = {
    "1f1b": "1F1B",
    "gpipe": "GPipe",
    "interleaved": "Interleaved1F1B",
    "zb-h1": "InterleavedZeroBubble",
    "zb-v": "ZBVZeroBubble",
}
"""planner schedule -> ``pipeline_parallel_schedule`` (names of torch's ``get_schedule_class``)."""

RESHARD = {"full": "always", "zero2": "never"}
"""``fsdp_reshard_after_forward`` per sharding: ZeRO-3 reshards after forward, ZeRO-2 keeps the
gathered parameters until the backward (``apply_fsdp`` in models/llama3/infra/parallelize.py)."""

CONFIG_FILE = "torchtitan_job.toml"
OVERRIDES_FILE = "torchtitan_overrides.txt"


def require_exportable(inputs: PlanInputs) -> None:
    """SpecError (one line) when torchtitan cannot run the plan, naming the reason."""
    reasons = TORCHTITAN.violations(inputs.model, inputs.cluster, inputs.job, inputs.config)
    if reasons:
        raise SpecError(
            f"cannot export to torchtitan: {reasons[0]}; re-run planner search with --framework torchtitan"
        )


def stage_modules(c: ParallelConfig, num_layers: int) -> list[list[str]]:
    """``module_fqns_per_model_part``: the modules of every (virtual) stage in stage order, the
    embedding on the first and norm + output on the last (``pipeline_module_split``)."""
    layers = c.layers_per_stage or _even(num_layers, c.pp * c.vpp)
    out, start = [], 0
    for n in layers:
        out.append([f"layers.{i}" for i in range(start, start + n)])
        start += n
    out[0].insert(0, "tok_embeddings")
    out[-1] += ["norm", "output"]
    return out


def _even(num_layers: int, stages: int) -> tuple[int, ...]:
    base, extra = divmod(num_layers, stages)
    return tuple(base + (1 if i < extra else 0) for i in range(stages))


def _activation_checkpoint(c: ParallelConfig, num_layers: int) -> list[tuple[str, object, str]]:
    """``[activation_checkpoint]`` keys (``config/job_config.py`` ``ActivationCheckpoint``; modes
    none / full / selective, ``selective_ac_option = "op"`` for the per-op policy, ``"<n>"`` for full
    recompute of every n-th block: ``recompute_num_layers`` of a stage, :func:`every_nth`)."""
    if c.recompute == "op":
        return [("mode", "selective", ""), ("selective_ac_option", "op", "")]
    if c.recompute == "full" and c.recompute_num_layers:
        stage = stage_size(c, num_layers)
        n = every_nth(c.recompute_num_layers, stage)
        k = c.recompute_num_layers
        why = f"one block in {n} checkpointed: full recompute of {k} of {stage} layers per stage"
        return [("mode", "selective", ""), ("selective_ac_option", str(n), why)]
    return [("mode", "full" if c.recompute == "full" else "none", "")]


def job_sections(inputs: PlanInputs, tm: TitanModel) -> list[tuple[str, list[tuple[str, object, str]]]]:
    """The TOML as ordered sections of (key, value, comment); comments mark placeholders."""
    m, job, c = inputs.model, inputs.job, inputs.config
    gpus = inputs.cluster.num_gpus
    place = "PLACEHOLDER: set before launching"
    model_keys: list[tuple[str, object, str]] = [
        ("name", tm.name, ""),
        ("flavor", tm.flavor, "registered by planner_flavor.py" if tm.custom_args else ""),
        ("hf_assets_path", "./assets/hf/tokenizer", place + " (tokenizer files)"),
    ]
    if job.precision == "fp8":
        model_keys.append(("converters", ["quantize.linear.float8"], ""))
    local = job.global_batch_size // c.dp if c.pp > 1 else c.micro_batch_size
    training: list[tuple[str, object, str]] = [
        ("local_batch_size", local, ""),
        ("global_batch_size", job.global_batch_size, ""),
        ("seq_len", job.seq_length, ""),
        ("steps", 1000, place),
        ("dataset", "c4", place),
        ("mixed_precision_param", "bfloat16", ""),
        ("mixed_precision_reduce", "float32", ""),
    ]
    shard = dp_shard_degree(c)
    par: list[tuple[str, object, str]] = [
        ("data_parallel_replicate_degree", c.dp // shard, ""),
        ("data_parallel_shard_degree", shard, ""),
    ]
    if c.optimizer_sharding in RESHARD and shard * c.cp > 1:
        par.append(("fsdp_reshard_after_forward", RESHARD[c.optimizer_sharding], ""))
    par += [
        ("tensor_parallel_degree", c.tp, ""),
        ("pipeline_parallel_degree", c.pp, ""),
        ("context_parallel_degree", c.cp, ""),
        ("expert_parallel_degree", c.ep, ""),
        ("expert_tensor_parallel_degree", c.expert_tp if c.ep > 1 else 1, ""),
    ]
    if c.pp > 1:
        par += [
            ("pipeline_parallel_schedule", SCHEDULE_NAMES[c.schedule], ""),
            ("pipeline_parallel_microbatch_size", c.micro_batch_size, ""),
            (
                "module_fqns_per_model_part",
                stage_modules(c, m.num_layers),
                f"{c.pp * c.vpp} stages, {c.vpp} per rank "
                + (
                    f"(stages r and {2 * c.pp - 1} - r on pp rank r: the V)"
                    if c.schedule in V_SHAPE
                    else f"(stage k on pp rank k % {c.pp})"
                ),
            ),
        ]
    sections: list[tuple[str, list[tuple[str, object, str]]]] = [
        (
            "job",
            [
                ("dump_folder", "./outputs", place),
                ("description", f"planner {__version__}: {m.name} on {gpus} GPUs", ""),
            ],
        ),
        ("model", model_keys),
        ("optimizer", [("name", "AdamW", ""), ("lr", 3e-4, place)]),
        ("lr_scheduler", [("warmup_steps", 100, place)]),
        ("training", training),
        ("parallelism", par),
        ("activation_checkpoint", _activation_checkpoint(c, m.num_layers)),
        # torch.compile exactly when the plan was priced with fused elementwise kernels; without it
        # torchtitan runs RoPE and SwiGLU eager (capabilities.EAGER_TORCHTITAN).
        ("compile", [("enable", not job.eager_ops, "")]),
    ]
    if job.precision == "fp8":
        sections.append(
            (
                "quantize.linear.float8",
                [("recipe_name", "tensorwise", ""), ("filter_fqns", ["output"], "")],
            )
        )
    if tm.custom_args:
        sections.append(
            ("experimental", [("custom_import", CUSTOM_MODULE, "planner_flavor.py on PYTHONPATH")])
        )
    return sections


def toml_value(v: object) -> str:
    """A TOML value: strings and lists in JSON syntax (valid TOML), numbers and booleans bare."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list) and v and all(isinstance(x, list) for x in v):
        return "[\n" + "".join(f"    {toml_value(x)},\n" for x in v) + "]"
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    raise TypeError(f"no TOML form for {v!r}")


def job_toml(inputs: PlanInputs) -> str:
    """The job-config TOML of a plan (``--job.config_file``)."""
    require_exportable(inputs)
    tm = titan_model(inputs.model)
    c = inputs.config
    lines = [
        f"# Generated by planner {__version__} for torchtitan {VERSION}: run with",
        f"#   torchrun ... -m torchtitan.train --job.config_file {CONFIG_FILE}",
        f"# Plan: tp {c.tp} pp {c.pp} dp {c.dp} cp {c.cp} ep {c.ep} vpp {c.vpp} mbs {c.micro_batch_size} "
        f"{c.schedule} recompute {c.recompute}"
        + (f" ({c.recompute_num_layers} layers per stage)" if c.recompute_num_layers else "")
        + f" sharding {c.optimizer_sharding}.",
        "# Keys marked PLACEHOLDER are not part of the plan: set them before launching.",
    ]
    for name, keys in job_sections(inputs, tm):
        lines += ["", f"[{name}]"]
        for key, value, comment in keys:
            text = toml_value(value)
            if "\n" in text:
                lines += ([f"# {comment}"] if comment else []) + [f"{key} = {text}"]
            else:
                lines.append(f"{key} = {text}" + (f"  # {comment}" if comment else ""))
    return "\n".join(lines) + "\n"


def cli_overrides(inputs: PlanInputs) -> list[tuple[str, str]]:
    """The plan's settings as torchtitan command-line overrides (``--section.key value``), each
    scalar key of the TOML except placeholders; the stage list and the booleans (tyro reads a
    boolean as a bare ``--section.key`` / ``--section.no-key`` flag) stay in the TOML."""
    require_exportable(inputs)
    tm = titan_model(inputs.model)
    out = []
    for section, keys in job_sections(inputs, tm):
        for key, value, comment in keys:
            if "PLACEHOLDER" in comment or isinstance(value, (list, bool)) or section == "job":
                continue
            out.append((f"--{section}.{key}", str(value)))
    return out


def overrides_text(inputs: PlanInputs) -> str:
    """``torchtitan_overrides.txt``: one override per line (same values as the TOML)."""
    return "".join(f"{flag} {value}\n" for flag, value in cli_overrides(inputs))


def flavor_file(inputs: PlanInputs) -> str | None:
    """``planner_flavor.py`` when the model is no built-in torchtitan flavor, else None."""
    tm = titan_model(inputs.model)
    return flavor_module(tm) if tm.custom_args else None


PLACEHOLDERS = """# --- PLACEHOLDERS: replace before launching ---------------------------------------------
# torchtitan 0.2.2 installed (pip install torchtitan==0.2.2) with a matching PyTorch; the
# tokenizer (model.hf_assets_path), dataset, steps and learning rate are set in the TOML.
EXTRA_ARGS=()                                            # e.g. (--training.steps 5000 --checkpoint.enable)
# -----------------------------------------------------------------------------------------
"""


def benchmark_extra_args(steps: int) -> str:
    """The overrides of a short benchmark run (``planner trial``): ``steps`` steps, each logged
    (``--metrics.log_freq 1``: ``torchtitan/components/metrics.py`` prints ``step: N ... tps: T``)."""
    return f"(--training.steps {steps} --metrics.log_freq 1)"


def _placeholders(extra_args: str) -> str:
    if extra_args == "()":
        return PLACEHOLDERS
    return PLACEHOLDERS.replace(
        "EXTRA_ARGS=()                                            # e.g. (--training.steps 5000 --checkpoint.enable)",
        f"EXTRA_ARGS={extra_args}   # a short benchmark run (planner trial)",
    )


def torchrun_script(inputs: PlanInputs, gpus_per_node: int, nodes: int, extra_args: str = "()") -> str:
    """A bash script that runs one torchrun per node (run it on every node with NODE_RANK set)."""
    require_exportable(inputs)
    return f"""#!/bin/bash
# Generated by planner: torchrun launch of torchtitan {VERSION} (python -m torchtitan.train).
# World size {gpus_per_node * nodes} = {nodes} nodes x {gpus_per_node} GPUs; run on every node with NODE_RANK=0..{nodes - 1}.
set -euo pipefail
{_placeholders(extra_args)}
HERE="$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)"
export PYTHONPATH="$HERE${{PYTHONPATH:+:$PYTHONPATH}}"
GPUS_PER_NODE={gpus_per_node}
NUM_NODES={nodes}
NODE_RANK=${{NODE_RANK:-0}}
MASTER_ADDR=${{MASTER_ADDR:-localhost}}
MASTER_PORT=${{MASTER_PORT:-29500}}

torchrun --nproc-per-node "$GPUS_PER_NODE" --nnodes "$NUM_NODES" --node-rank "$NODE_RANK" \\
    --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT" \\
    -m torchtitan.train --job.config_file "$HERE/{CONFIG_FILE}" "${{EXTRA_ARGS[@]}}"
"""


def slurm_script(inputs: PlanInputs, gpus_per_node: int, nodes: int, extra_args: str = "()") -> str:
    """A Slurm batch script: one torchrun per node (srun --ntasks-per-node=1), c10d rendezvous on
    the first host."""
    require_exportable(inputs)
    return f"""#!/bin/bash
# Generated by planner: Slurm launch of torchtitan {VERSION}, one torchrun per node.
#SBATCH --job-name=planner-torchtitan
#SBATCH --nodes={nodes}
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node={gpus_per_node}
#SBATCH --exclusive
set -euo pipefail
{_placeholders(extra_args)}
HERE="${{SLURM_SUBMIT_DIR:-$(pwd)}}"   # submit with sbatch from the export folder
export PYTHONPATH="$HERE${{PYTHONPATH:+:$PYTHONPATH}}"
GPUS_PER_NODE={gpus_per_node}
NUM_NODES=${{SLURM_NNODES:-{nodes}}}
if [ "$NUM_NODES" -ne {nodes} ]; then echo "this plan needs {nodes} nodes, got $NUM_NODES" >&2; exit 1; fi
MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p)
MASTER_PORT=$((SLURM_JOB_ID % 4536 + 61000))

srun --ntasks-per-node=1 torchrun --nproc-per-node "$GPUS_PER_NODE" --nnodes "$NUM_NODES" \\
    --rdzv-backend c10d --rdzv-endpoint "$MASTER_ADDR:$MASTER_PORT" --rdzv-id "$SLURM_JOB_ID" \\
    -m torchtitan.train --job.config_file "$HERE/{CONFIG_FILE}" "${{EXTRA_ARGS[@]}}"
"""


def export_files(inputs: PlanInputs, launcher: str, extra_args: str = "()") -> dict[str, str]:
    """Every file of an export by name: the TOML, the overrides, the launch script (whose
    ``EXTRA_ARGS`` are ``extra_args``) and, for a model that is no torchtitan flavor,
    ``planner_flavor.py``."""
    if launcher not in ("torchrun", "slurm"):
        raise SpecError(f"launcher {launcher!r}: allowed values are torchrun, slurm")
    if inputs.job.is_lora:
        # torchtitan/components/lora.py arrived after v0.2.2
        raise SpecError("a LoRA plan (finetune lora): torchtitan 0.2.2 trains no adapters")
    groups = inputs.cluster.groups
    gpn = groups[0].gpus_per_node
    nodes = sum(g.num_nodes for g in groups)
    script = (torchrun_script if launcher == "torchrun" else slurm_script)(inputs, gpn, nodes, extra_args)
    files = {
        CONFIG_FILE: job_toml(inputs),
        OVERRIDES_FILE: overrides_text(inputs),
        f"launch_{launcher}.sh": script,
    }
    flavor = flavor_file(inputs)
    if flavor is not None:
        files[f"{CUSTOM_MODULE}.py"] = flavor
    return files
