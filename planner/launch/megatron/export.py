"""Megatron-LM export: the launch scripts (torchrun, Slurm, Slurm heterogeneous job) of a plan for
the pinned release (:data:`~planner.frameworks.megatron.MEGATRON`), around the ``pretrain_gpt.py``
arguments of :mod:`.export_args`: the CUDA_DEVICE_MAX_CONNECTIONS the launch needs, the
placeholders, the node map and cluster file of a mixed-GPU cluster.

Emitters are pure functions and golden-tested; :func:`export_files` is the whole export (the CLI
only writes its result). Not exported: data paths, the tokenizer files, learning-rate schedule and
run length (placeholders in the script).
"""

from __future__ import annotations

import re

from planner.frameworks.megatron import MEGATRON
from planner.inputs.cluster_spec import compute_capability_major
from planner.inputs.errors import SpecError
from planner.inputs.files import plan_yaml
from planner.inputs.validation import limit
from planner.launch.megatron import hybrid
from planner.launch.megatron.export_args import FSDP_STRATEGY, args_text, megatron_args, quoted
from planner.plans.plan_file import PlanInputs
from planner.profiles.hardware import cluster_to_mapping

VERSION = MEGATRON.version

A2A_OVERLAP_CONNECTIONS = 8
"""CUDA_DEVICE_MAX_CONNECTIONS for the MoE all-to-all overlap before Blackwell with tp or cp > 1:
Megatron-Bridge's performance launcher sets 8 there (scripts/performance/perf_plugins.py
``_set_num_cuda_device_max_connections``; 1 only without the overlap), and Megatron's validate_args
only warns ("If you want to use both, you can set CUDA_DEVICE_MAX_CONNECTIONS to 1 or 32")."""


def needs_single_connection(inputs: PlanInputs) -> bool:
    """validate_args asserts CUDA_DEVICE_MAX_CONNECTIONS=1 with tp > 1 or cp > 1 before Blackwell
    (compute capability < 10), except with Megatron-FSDP, where it asserts the variable is *not* 1
    (NVIDIA's Megatron-FSDP guide: unset it), and with the MoE all-to-all overlap, which wants
    several queues (:data:`A2A_OVERLAP_CONNECTIONS`; the cost model prices the overlap and drops
    the tensor-parallel overlap then, cost_models.layers)."""
    c = inputs.config
    if c.optimizer_sharding in FSDP_STRATEGY or a2a_overlap_connections(inputs):
        return False
    return (c.tp > 1 or c.cp > 1) and _pre_blackwell(inputs)


def a2a_overlap_connections(inputs: PlanInputs) -> int:
    """The CUDA_DEVICE_MAX_CONNECTIONS the launch sets for the MoE all-to-all overlap before
    Blackwell with tp or cp > 1 (0 where the plan does not need one)."""
    c = inputs.config
    overlap = inputs.job.moe_a2a_overlap and inputs.model.is_moe and c.ep > 1
    if (
        overlap
        and c.optimizer_sharding not in FSDP_STRATEGY
        and (c.tp > 1 or c.cp > 1)
        and _pre_blackwell(inputs)
    ):
        return A2A_OVERLAP_CONNECTIONS
    return 0


def _pre_blackwell(inputs: PlanInputs) -> bool:
    return any(compute_capability_major(g.gpu.name) < 10 for g in inputs.cluster.groups)


TRAINING_ARGS = (
    "(--train-iters 1000 --lr 1.0e-4 --min-lr 1.0e-5 --lr-decay-style cosine --lr-warmup-iters 100)"
)
"""The launch's placeholder training schedule (a bash array): replace it for a real run."""


def benchmark_training_args(steps: int) -> str:
    """The training arguments of a short benchmark run (``planner trial``): ``steps`` iterations,
    each logged (``--log-interval 1``: ``training_log`` prints ``elapsed time per iteration (ms)``,
    ``megatron/training/training.py``), no evaluation (``--eval-iters 0``), a constant learning rate
    (no warm-up to outlast the run)."""
    return f"(--train-iters {steps} --log-interval 1 --eval-iters 0 --lr 1.0e-4 --lr-decay-style constant)"


PLACEHOLDERS = """# --- PLACEHOLDERS: replace before launching --------------------------------------------
MEGATRON_PATH=${{MEGATRON_PATH:-/workspace/Megatron-LM}}   # a Megatron-LM checkout ({script})
DATA_ARGS=(--mock-data)                                 # e.g. (--data-path /data/my_text_document --split 99,1,0)
# NullTokenizer takes its vocabulary from --vocab-size above (the plan's {vocab}). With a real
# tokenizer, e.g. (--tokenizer-type HuggingFaceTokenizer --tokenizer-model /path), its vocabulary
# must have {vocab} entries, or the plan's embedding and output-layer costs do not apply.
TOKENIZER_ARGS=(--tokenizer-type NullTokenizer)
TRAINING_ARGS={training}
# -----------------------------------------------------------------------------------------
"""


def _script_parts(inputs: PlanInputs, training_args: str = TRAINING_ARGS) -> tuple[str, str, str]:
    """The environment lines, the placeholders and the indented argument array body."""
    queues = a2a_overlap_connections(inputs)
    if needs_single_connection(inputs):
        env = "export CUDA_DEVICE_MAX_CONNECTIONS=1\n"
    elif queues:
        env = f"export CUDA_DEVICE_MAX_CONNECTIONS={queues}\n"
    else:
        env = "unset CUDA_DEVICE_MAX_CONNECTIONS\n"
    if inputs.model.is_hybrid:
        env += "".join(f"export {name}={value}\n" for name, value in hybrid.TRITON_ENV)
    args = "\n".join(f"    {quoted(flag, value)}" for flag, value in megatron_args(inputs))
    script = hybrid.training_script(inputs.model)
    return (
        env,
        PLACEHOLDERS.format(vocab=inputs.model.vocab_size, training=training_args, script=script),
        args,
    )


NODE_MAP_HEADER = "# Pipeline stages are placed in node-rank order; the plan needs:"
_NODE_MAP_LINE = re.compile(r"^#   node ranks (\d+)-(\d+): (\d+) x (\S+) nodes$")
CLUSTER_FILE = "cluster.yaml"
"""The cluster file a mixed-GPU export writes beside its launch: the plan's cluster, node groups in
pipeline-stage order (the search may reorder the groups of the cluster it was given)."""


def _node_map(inputs: PlanInputs) -> str:
    """Comment lines naming which node ranks must be which GPU type (mixed clusters), read back by
    :func:`planned_nodes` (``planner check`` warns when the cluster it is given disagrees)."""
    if len(inputs.cluster.groups) == 1:
        return ""
    lines, first = [], 0
    for g in inputs.cluster.groups:
        lines.append(f"#   node ranks {first}-{first + g.num_nodes - 1}: {g.num_nodes} x {g.gpu.name} nodes")
        first += g.num_nodes
    lines.append(
        f"#   (that cluster, in this order: {CLUSTER_FILE}; planner check this launch with -c {CLUSTER_FILE})"
    )
    return NODE_MAP_HEADER + "\n" + "\n".join(lines) + "\n"


def planned_nodes(text: str) -> list[str] | None:
    """The GPU type of each node rank a launch's :func:`_node_map` comment names, in node-rank
    order; None for a launch without one (not a mixed-GPU export)."""
    lines = text.splitlines()
    if NODE_MAP_HEADER not in lines:
        return None
    nodes: list[str] = []
    for line in lines[lines.index(NODE_MAP_HEADER) + 1 :]:
        m = _NODE_MAP_LINE.match(line)
        if not m:
            break
        first, last, count, gpu = int(m.group(1)), int(m.group(2)), int(m.group(3)), m.group(4)
        if first != len(nodes) or last - first + 1 != count or count > limit("num_nodes"):
            return None  # edited by hand into something the export never writes: not judged
        nodes += [gpu] * count
    return nodes or None


def cluster_file(inputs: PlanInputs) -> str:
    """:data:`CLUSTER_FILE`: the plan's cluster as a cluster file (``--cluster FILE`` reads it),
    node groups in pipeline-stage order, every node field spelled out."""
    order = ", ".join(f"{g.num_nodes} x {g.gpu.name}" for g in inputs.cluster.groups)
    return (
        f"# Generated by planner: the plan's cluster with its node groups in pipeline-stage order ({order}).\n"
        "# Node rank k of the launch runs on the k-th node this file lists, group after group.\n"
        + plan_yaml(cluster_to_mapping(inputs.cluster))
    )


def torchrun_script(
    inputs: PlanInputs, gpus_per_node: int, nodes: int, training_args: str = TRAINING_ARGS
) -> str:
    """A bash script that runs one torchrun per node (run it on every node with NODE_RANK set)."""
    env, placeholders, args = _script_parts(inputs, training_args)
    script = hybrid.training_script(inputs.model)
    return f"""#!/bin/bash
# Generated by planner: torchrun launch of Megatron-LM {script} ({VERSION}).
# World size {gpus_per_node * nodes} = {nodes} nodes x {gpus_per_node} GPUs; run on every node with NODE_RANK=0..{nodes - 1}.
{_node_map(inputs)}set -euo pipefail
{env}
{placeholders}
GPUS_PER_NODE={gpus_per_node}
NUM_NODES={nodes}
NODE_RANK=${{NODE_RANK:-0}}
MASTER_ADDR=${{MASTER_ADDR:-localhost}}
MASTER_PORT=${{MASTER_PORT:-29500}}

DISTRIBUTED_ARGS=(--nproc-per-node "$GPUS_PER_NODE" --nnodes "$NUM_NODES" --node-rank "$NODE_RANK"
                  --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT")
MODEL_AND_PARALLEL_ARGS=(
{args}
)

cd "$MEGATRON_PATH"
torchrun "${{DISTRIBUTED_ARGS[@]}}" {script} "${{MODEL_AND_PARALLEL_ARGS[@]}}" \\
    "${{TOKENIZER_ARGS[@]}}" "${{DATA_ARGS[@]}}" "${{TRAINING_ARGS[@]}}"
"""


# One torchrun per node; the arguments travel as positional parameters of the inner bash ("$@"),
# never re-parsed by it, so values such as a layout with | arrive intact. SLURM_PROCID is the
# node's task number across the whole step (one task per node), also over hetjob components.
_SRUN = """export MEGATRON_PATH GPUS_PER_NODE NUM_NODES MASTER_ADDR MASTER_PORT
srun {het}--ntasks-per-node=1 bash -c 'cd "$MEGATRON_PATH" && exec torchrun --nproc-per-node "$GPUS_PER_NODE" \\
    --nnodes "$NUM_NODES" --node-rank "$SLURM_PROCID" --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT" \\
    {script} "$@"' bash "${{MODEL_AND_PARALLEL_ARGS[@]}}" "${{TOKENIZER_ARGS[@]}}" "${{DATA_ARGS[@]}}" \\
    "${{TRAINING_ARGS[@]}}"
"""


def slurm_script(
    inputs: PlanInputs, gpus_per_node: int, nodes: int, training_args: str = TRAINING_ARGS
) -> str:
    """A Slurm batch script: one torchrun per node (srun --ntasks-per-node=1), rendezvous on the
    first host (``scontrol show hostnames | sed -n 1p``: sed reads every line, where ``head -n 1``
    would exit early and fail the pipeline with SIGPIPE under ``set -o pipefail``). A cluster of
    several node groups becomes a heterogeneous job (:func:`slurm_het_script`)."""
    if len(inputs.cluster.groups) > 1:
        return slurm_het_script(inputs, training_args)
    env, placeholders, args = _script_parts(inputs, training_args)
    script = hybrid.training_script(inputs.model)
    return f"""#!/bin/bash
# Generated by planner: Slurm launch of Megatron-LM {script} ({VERSION}), one torchrun per node.
#SBATCH --job-name=planner-megatron
#SBATCH --nodes={nodes}
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node={gpus_per_node}
#SBATCH --exclusive
set -euo pipefail
{env}
{placeholders}
GPUS_PER_NODE={gpus_per_node}
NUM_NODES=${{SLURM_NNODES:-{nodes}}}
if [ "$NUM_NODES" -ne {nodes} ]; then echo "this plan needs {nodes} nodes, got $NUM_NODES" >&2; exit 1; fi
MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p)
MASTER_PORT=$((SLURM_JOB_ID % 4536 + 61000))

MODEL_AND_PARALLEL_ARGS=(
{args}
)

{_SRUN.format(het="", script=script)}"""


def slurm_het_script(inputs: PlanInputs, training_args: str = TRAINING_ARGS) -> str:
    """A Slurm heterogeneous job (https://slurm.schedmd.com/heterogeneous_jobs.html): one
    component per node group of the plan's cluster, in the plan's rank order (pipeline stage
    order: Megatron's rank order tp-cp-dp-pp puts each stage on consecutive ranks), separated by
    ``#SBATCH hetjob``; ``srun --het-group`` runs one step over all components, whose task ids
    follow component order, so node rank k is the k-th node of the plan."""
    groups = inputs.cluster.groups
    env, placeholders, args = _script_parts(inputs, training_args)
    gpn = groups[0].gpus_per_node
    nodes = sum(g.num_nodes for g in groups)
    script = hybrid.training_script(inputs.model)
    header, checks = [], []
    for i, g in enumerate(groups):
        if i:
            header.append("#SBATCH hetjob")
        feature = g.gpu.name.lower()
        header += [
            f"#SBATCH --nodes={g.num_nodes} --ntasks-per-node=1 --gpus-per-node={g.gpus_per_node} --exclusive",
            f"#SBATCH --constraint={feature}   # PLACEHOLDER: the node feature (or --partition) of your {g.gpu.name} nodes",
        ]
        checks.append(
            f'if [ "${{SLURM_JOB_NUM_NODES_HET_GROUP_{i}:-{g.num_nodes}}}" -ne {g.num_nodes} ]; then '
            f'echo "component {i} ({g.gpu.name}) needs {g.num_nodes} nodes" >&2; exit 1; fi'
        )
    return f"""#!/bin/bash
# Generated by planner: Slurm heterogeneous job of Megatron-LM {script} ({VERSION}), one torchrun per node.
# Components in pipeline-stage order (https://slurm.schedmd.com/heterogeneous_jobs.html):
{_node_map(inputs)}#SBATCH --job-name=planner-megatron
{chr(10).join(header)}
set -euo pipefail
{env}
{placeholders}
GPUS_PER_NODE={gpn}
NUM_NODES={nodes}
{chr(10).join(checks)}
MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST_HET_GROUP_0" | sed -n 1p)
MASTER_PORT=$((SLURM_JOB_ID % 4536 + 61000))

MODEL_AND_PARALLEL_ARGS=(
{args}
)

{_SRUN.format(het=f"--het-group=0-{len(groups) - 1} ", script=script)}"""


LAUNCHERS = ("torchrun", "slurm")


def export_files(inputs: PlanInputs, launcher: str, training_args: str = TRAINING_ARGS) -> dict[str, str]:
    """Every file of a Megatron-LM export, by file name: ``megatron_args.txt`` and
    ``launch_<launcher>.sh`` (whose ``TRAINING_ARGS`` are ``training_args``). SpecError (one line)
    when Megatron-LM cannot run the plan."""
    if launcher not in LAUNCHERS:
        raise SpecError(f"launcher {launcher!r} is not allowed; allowed values: {', '.join(LAUNCHERS)}")
    if inputs.job.is_lora:
        # pretrain_gpt.py has no PEFT: LoRA runs in Megatron-Bridge (src/megatron/bridge/peft/lora.py)
        raise SpecError(
            "a LoRA plan (finetune lora): Megatron-LM's pretrain_gpt.py trains no adapters; run its "
            "layout with a Megatron-Bridge PEFT recipe (docs/finetune.md)"
        )
    args = megatron_args(inputs)
    groups = inputs.cluster.groups
    gpn, nodes = groups[0].gpus_per_node, sum(g.num_nodes for g in groups)
    script = (torchrun_script if launcher == "torchrun" else slurm_script)(inputs, gpn, nodes, training_args)
    files = {"megatron_args.txt": args_text(args), f"launch_{launcher}.sh": script}
    if len(groups) > 1:
        files[CLUSTER_FILE] = cluster_file(inputs)
    return files
