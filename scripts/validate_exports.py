"""Export searched plans and run each through the framework's own validation.

For every case (dense, GQA, MoE with ep, cp, interleaved, uneven, zb-h1, fp8, every sharding, tp 1,
pp 1) and every framework (megatron, torchtitan): ``search --framework F`` (top plan), export it
(Megatron: ``planner.launch.megatron.export`` and ``export_args``; torchtitan: ``planner.launch.torchtitan.export``)
and hand the export to ``scripts/_framework_validators.py`` (``validate_megatron(argv, env)``:
Megatron-LM's ``parse_args``/``validate_args``, micro-batch calculator, parallel state and
``TransformerConfig``; ``validate_torchtitan(toml_path, overrides)``: torchtitan's
``ConfigManager``), which run in the framework environment (``/work/venv-fw`` or
``$PLANNER_FW_PYTHON``). A case a framework cannot search (e.g. zb-h1 for Megatron) is listed as
such, not counted.

    python scripts/validate_exports.py [--framework megatron|torchtitan] [--cases a,b] [--launches] [--json]

``--launches`` adds the launch scripts of :data:`LAUNCHES` (bash arrays, if/case, ``source``, the
MoE Model Zoo's accounting flags, ``srun bash -c``): each is run by bash with a stub torchrun that
records the argv ``pretrain_gpt.py`` gets, Megatron validates that argv, and ``planner check`` reads
the script; a row agrees when both accept or both refuse.

Exit 0 when no export is rejected or silently overridden and no launch disagrees, 1 otherwise, 2
when the validators are unavailable (megatron-core not installed: nothing is judged).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cost_models.placement import group_ranks  # noqa: E402
from planner.frameworks.torchtitan_models import model_from_flavor  # noqa: E402
from planner.inputs.cluster_spec import compute_capability_major  # noqa: E402
from planner.inputs.errors import PlannerError  # noqa: E402
from planner.inputs.jobs import make_job  # noqa: E402
from planner.inputs.models import load_model  # noqa: E402
from planner.plans.plan_file import PlanInputs  # noqa: E402
from planner.profiles.hardware import load_cluster  # noqa: E402
from planner.search.chain import search  # noqa: E402
from planner.search.space import Restrictions  # noqa: E402


@dataclass(frozen=True)
class Case:
    name: str
    model: str
    nodes: int
    gbs: int
    seq: int
    precision: str = "bf16"
    restrict: dict = field(default_factory=dict)
    eager_ops: tuple[str, ...] = ()
    """``JobSpec.eager_ops`` (torchtitan without torch.compile: ("rope", "activation"))."""
    attention_impl: str = "fused"
    """``JobSpec.attention_impl`` (``unfused``: Megatron ``--attention-backend unfused``)."""
    gradient_accumulation_fusion: bool = True
    """``JobSpec.gradient_accumulation_fusion`` (False: Megatron ``--no-gradient-accumulation-fusion``)."""
    fp8_recipe: str | None = None
    """``JobSpec.fp8_recipe`` (None: the default, tensorwise)."""
    cluster: str = "dgx-h100"
    """Node template the case is planned on."""
    moe_a2a_overlap: bool = False
    """``JobSpec.moe_a2a_overlap`` (Megatron ``--overlap-moe-expert-parallel-comm``; before Blackwell
    with tp > 1 the export launches it with CUDA_DEVICE_MAX_CONNECTIONS=8)."""
    optimizer_state_dtype: str = "fp32"
    """``JobSpec.optimizer_state_dtype`` (bf16: Megatron ``--use-precision-aware-optimizer
    --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16``; torchtitan refuses it)."""


CASES = (
    Case("dense-8b", "llama3-8b", 2, 64, 4096),
    Case("gqa-70b", "llama3-70b", 8, 128, 4096),
    Case("readme-70b-64n", "llama3-70b", 64, 1024, 8192),
    Case("interleaved", "llama3-70b", 8, 128, 4096, restrict={"schedule": ("interleaved",), "pp": (4,)}),
    Case("zb-h1", "llama3-70b", 8, 128, 4096, restrict={"schedule": ("zb-h1",), "pp": (4,)}),
    Case(
        "zb-h1-eager",
        "llama3-70b",
        8,
        128,
        4096,
        restrict={"schedule": ("zb-h1",), "pp": (4,)},
        eager_ops=("rope", "activation"),
    ),
    Case(
        "zb-v-eager",
        "llama3-70b",
        8,
        128,
        4096,
        restrict={"schedule": ("zb-v",), "pp": (4,)},
        eager_ops=("rope", "activation"),
    ),
    Case("gpipe", "llama3-8b", 2, 64, 4096, restrict={"schedule": ("gpipe",), "pp": (2,)}),
    Case("cp", "llama3-8b", 2, 32, 16384, restrict={"cp": (2,)}),
    Case("moe-qwen3-ep", "qwen3-30b-a3b", 2, 64, 4096, restrict={"ep": (8,)}),
    Case("moe-mixtral-ep", "mixtral-8x7b", 4, 64, 4096, restrict={"ep": (8,)}),
    Case("fp8", "llama3-8b", 2, 64, 4096, precision="fp8"),
    Case("sharding-none", "qwen3:1.7B", 4, 128, 2048, restrict={"optimizer_sharding": ("none",)}),
    Case("sharding-distributed", "llama3-8b", 2, 64, 4096, restrict={"optimizer_sharding": ("distributed",)}),
    Case("sharding-zero2", "llama3-8b", 2, 64, 4096, restrict={"optimizer_sharding": ("zero2",)}),
    Case("sharding-full", "llama3-8b", 2, 64, 4096, restrict={"optimizer_sharding": ("full",)}),
    Case("tp1", "llama3-8b", 2, 64, 4096, restrict={"tp": (1,)}),
    Case("pp1", "llama3-70b", 8, 128, 4096, restrict={"pp": (1,)}),
    Case("uneven-405b", "llama3.1-405b", 16, 256, 4096, restrict={"pp": (8,), "tp": (8,)}),
    Case("recompute-full", "llama3-70b", 4, 64, 4096, restrict={"recompute": ("full",)}),
    Case("recompute-op", "llama3-8b", 2, 64, 8192, restrict={"recompute": ("op",)}),
    Case("custom-llama2-70b", "llama2-70b", 8, 128, 4096),
    Case("70b-16n-8k", "llama3-70b", 16, 256, 8192),
    Case("8b-1node", "llama3-8b", 1, 32, 4096),
    Case("moe-qwen3-4n", "qwen3-30b-a3b", 4, 128, 4096),
    Case("unfused-attention", "gpt-1.7b", 2, 64, 2048, precision="fp16", attention_impl="unfused"),
    Case(
        "unfused-accumulation",
        "llama3-8b",
        2,
        64,
        4096,
        restrict={"optimizer_sharding": ("distributed",)},
        gradient_accumulation_fusion=False,
    ),
    Case("fp8-delayed", "llama3-8b", 2, 64, 4096, precision="fp8", fp8_recipe="delayed"),
    Case("bf16-adam-moments", "llama3-8b", 2, 64, 4096, optimizer_state_dtype="bf16"),
    Case("fp8-mxfp8-b200", "llama3-8b", 2, 64, 4096, precision="fp8", fp8_recipe="mxfp8", cluster="dgx-b200"),
    Case(
        "tp-pp-dp-mapping-gb200",
        "llama3-70b",
        16,
        128,
        8192,
        restrict={"tp": (4,), "pp": (4,), "cp": (1,), "rank_order": ("tp-cp-ep-pp-dp",)},
        cluster="gb200-nvl72",
    ),
    Case(
        "partial-distopt",
        "llama3-8b",
        4,
        128,
        4096,
        restrict={"optimizer_sharding": ("distributed",), "optimizer_instances": (4,)},
    ),
    Case(
        "activation-offload",
        "llama3-8b",
        2,
        64,
        4096,
        restrict={"pp": (1,), "offload_layers": (8,)},
    ),
    Case(
        "offload-fsdp-gb200",
        "llama3-70b",
        16,
        64,
        8192,
        # the search's pick among none, 40 and 79 offloaded layers (Megatron-FSDP, 79 in 2026-11)
        restrict={"pp": (1,), "offload_layers": (0, 40, 79)},
        cluster="gb200-nvl72",
    ),
    Case(
        "moe-a2a-overlap-tp2",
        "qwen3-30b-a3b",
        2,
        64,
        4096,
        # the distributed optimizer: with Megatron-FSDP the launch leaves the variable unset
        restrict={"tp": (2,), "pp": (1,), "ep": (8,), "optimizer_sharding": ("distributed",)},
        moe_a2a_overlap=True,
    ),
    # Hybrid and 2026 families (issue 56): pretrain_hybrid.py's arguments, which parse and validate
    # with the same megatron/training/arguments.py as pretrain_gpt.py's (same args_defaults).
    Case("hybrid-nemotron-h-8b", "nemotron-h-8b", 2, 64, 4096),
    Case("hybrid-nemotron-h-8b-tp2", "nemotron-h-8b", 2, 64, 4096, restrict={"tp": (2,)}),
    Case("hybrid-nemotron-h-8b-pp2", "nemotron-h-8b", 2, 64, 4096, restrict={"pp": (2,)}),
    Case("hybrid-nemotron-h-8b-cp2", "nemotron-h-8b", 2, 32, 16384, restrict={"cp": (2,)}),
    Case("hybrid-nemotron-h-8b-fp8", "nemotron-h-8b", 2, 64, 4096, precision="fp8"),
    Case("hybrid-nemotron-h-47b", "nemotron-h-47b", 8, 128, 8192),
    Case("hybrid-nemotron-h-56b", "nemotron-h-56b", 16, 256, 8192),
    Case("hybrid-nemotron-h-56b-pp4", "nemotron-h-56b", 16, 256, 8192, restrict={"pp": (4,)}),
    Case("gdn-qwen3-next", "qwen3-next-80b-a3b", 8, 128, 4096),
    Case("gdn-qwen3-next-ep8", "qwen3-next-80b-a3b", 8, 128, 4096, restrict={"ep": (8,)}),
    Case("dsa-deepseek-v3.2", "deepseek-v3.2", 32, 1024, 4096),
)


def _model(name: str):
    if name.startswith("qwen3:"):
        return model_from_flavor("qwen3", name.split(":", 1)[1], "validate_exports")
    return load_model(name)


def plan_for(case: Case, framework: str) -> tuple[PlanInputs | None, str]:
    """The top plan of ``case`` for ``framework``, or None and why there is none."""
    try:
        model = _model(case.model)
        cluster = load_cluster(case.cluster, case.nodes)
        job = make_job(
            global_batch_size=case.gbs,
            seq_length=case.seq,
            precision=case.precision,
            eager_ops=case.eager_ops,
            attention_impl=case.attention_impl,
            gradient_accumulation_fusion=case.gradient_accumulation_fusion,
            fp8_recipe=case.fp8_recipe,
            moe_a2a_overlap=case.moe_a2a_overlap,
            optimizer_state_dtype=case.optimizer_state_dtype,
            where=case.name,
        )
        result = search(model, cluster, job, Restrictions(framework=framework, **case.restrict), top_k=1)
    except PlannerError as exc:
        return None, f"not searched: {exc}"
    if not result.plans:
        from planner.search.chain import infeasible_reason

        return None, f"no feasible plan: {infeasible_reason(model, cluster, job, result)}"
    best = result.plans[0]
    return PlanInputs(model, best.cluster, job, best.estimate.config, best.stage_groups, framework), ""


def megatron_launch(inputs: PlanInputs) -> tuple[list[str], dict]:
    """argv and environment of the Megatron export (the library function of the exporter)."""
    from planner.launch.megatron import export as mx
    from planner.launch.megatron.export_args import argv as megatron_argv
    from planner.launch.megatron.export_args import megatron_args

    argv = megatron_argv(megatron_args(inputs))
    # torchrun's environment for rank 0 of the plan's world: Megatron derives dp from WORLD_SIZE.
    env = {"WORLD_SIZE": str(inputs.config.world_size)}
    queues = mx.a2a_overlap_connections(inputs)
    if mx.needs_single_connection(inputs):
        env["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
    elif queues:
        env["CUDA_DEVICE_MAX_CONNECTIONS"] = str(queues)
    return argv, env


def validate(case: Case, framework: str, validators, workdir: Path) -> dict:
    """One row: the plan, its export and the framework's verdict."""
    inputs, why = plan_for(case, framework)
    row = {"case": case.name, "framework": framework}
    if inputs is None:
        return {**row, "status": "skipped", "error": why}
    c = inputs.config
    row["plan"] = (
        f"tp{c.tp} pp{c.pp} dp{c.dp} cp{c.cp} ep{c.ep} vpp{c.vpp} mbs{c.micro_batch_size} "
        f"{c.schedule} {c.optimizer_sharding} rc:{c.recompute}"
        + (f"/{c.recompute_num_layers}" if c.recompute_num_layers else "")
        + (" uneven" if len(set(c.layers_per_stage)) > 1 else "")
        + (f" offload:{c.offload_layers}" if c.offload_layers else "")
        + (f" instances:{c.optimizer_instances}" if c.optimizer_instances > 1 else "")
        + (f" ranks:{c.rank_order}" if c.rank_order != "tp-cp-ep-dp-pp" else "")
    )
    try:
        if framework == "megatron":
            argv, env = megatron_launch(inputs)
            # validate_args asks the device for its architecture (e.g. no CUDA_DEVICE_MAX_CONNECTIONS
            # rule from Blackwell on): answer with the plan's GPU, the oldest where types mix.
            arch = min(compute_capability_major(g.gpu.name) for g in inputs.cluster.groups) or 9
            result = validators.validate_megatron(argv, env, gpu_arch=arch)
        else:
            from planner.launch.torchtitan import export as tx

            folder = workdir / f"{case.name}-{framework}"
            folder.mkdir(parents=True, exist_ok=True)
            for name, text in tx.export_files(inputs, "torchrun").items():
                (folder / name).write_text(text)
            overrides = [x for pair in tx.cli_overrides(inputs) for x in pair]
            result = validators.validate_torchtitan(str(folder / tx.CONFIG_FILE), overrides)
    except PlannerError as exc:
        return {**row, "status": "export refused", "error": str(exc)}
    overridden = result.get("overridden") or []
    status = "accepted" if result.get("accepted") and not overridden else "rejected"
    if result.get("accepted") and overridden:
        status = "overridden"
    groups = result.get("groups") or {}
    instance = c.shard_degree if c.optimizer_sharding == "distributed" else c.dp * c.cp
    if status == "accepted" and framework == "megatron" and groups.get("dp", c.dp) != c.dp:
        # Megatron accepted the launch but laid it out differently from the plan.
        status, result = (
            "rejected",
            {"stage": "parallel_state", "error": f"dp {groups['dp']} != plan's {c.dp}"},
        )
    elif (
        status == "accepted"
        and framework == "megatron"
        and groups.get("dp_cp_instance", instance) != instance
    ):
        status, result = (
            "rejected",
            {
                "stage": "parallel_state",
                "error": f"distributed-optimizer instance of {groups['dp_cp_instance']} ranks != plan's {instance}",
            },
        )
    elif status == "accepted" and framework == "megatron" and "pp_ranks" in groups:
        # Megatron's own rank layout for this rank: its pipeline and data-parallel groups are the
        # plan's (cost_models.placement.group_ranks, in the plan's rank order).
        want_pp = group_ranks(c, "pp", groups["pp_ranks"][0])
        want_dp = group_ranks(c, "dp", groups["dp_ranks"][0])
        if groups["pp_ranks"] != want_pp or groups["dp_ranks"] != want_dp:
            status, result = (
                "rejected",
                {
                    "stage": "parallel_state",
                    "error": f"rank layout: pipeline group {groups['pp_ranks']} and data-parallel group "
                    f"{groups['dp_ranks']}, the plan's {want_pp} and {want_dp}",
                },
            )
    return {
        **row,
        "status": status,
        "stage": result.get("stage", ""),
        "error": result.get("error") or "",
        "overridden": overridden,
    }


LAUNCH_SHAPE = (
    "--num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 "
    "--group-query-attention --num-query-groups 8 --swiglu --normalization RMSNorm --disable-bias-linear "
    "--position-embedding-type rope --rotary-base 500000 --untie-embeddings-and-output-weights "
    "--vocab-size 128256 --max-position-embeddings 8192 --seq-length 4096"
)
LAUNCHES = {
    # name: (files, the launch script among them, DGX H100 nodes). Launch scripts written in the
    # patterns of public ones (issue 54): each is run by bash with a stub launcher recording the argv
    # pretrain_gpt.py gets, which Megatron validates; planner check reads the script itself.
    "nvidia-two-word-array-elements": (
        {
            "train.sh": "#!/bin/bash\nexport CUDA_DEVICE_MAX_CONNECTIONS=1\n"
            + "MODEL_ARGS=(\n"
            + "".join(
                f'    "{a} {b}"\n' for a, b in zip(LAUNCH_SHAPE.split()[0::2], LAUNCH_SHAPE.split()[1::2])
            )
            + ')\nPREC=("--fp8-format hybrid" "--fp8-recipe tensorwise" --bf16)\n'
            "PAR=(--tensor-model-parallel-size 2 --sequence-parallel --micro-batch-size 1 --global-batch-size 64)\n"
            "torchrun --nproc-per-node 8 pretrain_gpt.py ${MODEL_ARGS[@]} ${PREC[@]} ${PAR[@]}\n"
        },
        "train.sh",
        1,
    ),
    "if-case-and-defaults": (
        {
            "train.sh": "#!/bin/bash\nSIZE=${SIZE:-8b}\nexport CUDA_DEVICE_MAX_CONNECTIONS=1\n"
            "case $SIZE in\n  8b) TP=2 ;;\n  70b) TP=8 ;;\nesac\n"
            'if [ "$TP" -gt 4 ]; then PP=4; else PP=${PP:-2}; fi\n'
            f"torchrun --nproc-per-node 8 pretrain_gpt.py {LAUNCH_SHAPE} --tensor-model-parallel-size $TP "
            "--pipeline-model-parallel-size $PP --micro-batch-size 1 --global-batch-size $((16 * 4)) --bf16\n"
        },
        "train.sh",
        1,
    ),
    "source-beside-the-script": (
        {
            "run.sh": '#!/bin/bash\nSCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"\n'
            'source "${SCRIPT_DIR}/conf/model.sh"\n[ -f "$HOME/.site.env" ] && source "$HOME/.site.env"\n'
            "export CUDA_DEVICE_MAX_CONNECTIONS=1\n"
            'torchrun --nproc-per-node 8 pretrain_gpt.py "${MODEL[@]}" --tensor-model-parallel-size 4 '
            "--micro-batch-size 1 --global-batch-size 64 --bf16\n",
            "conf/model.sh": f"MODEL=({LAUNCH_SHAPE})\n",
        },
        "run.sh",
        1,
    ),
    "model-zoo-qwen3-235b-accounting": (
        {
            "run.sh": '#!/bin/bash\nexport WORKSPACE=$(dirname "$(readlink -f "$0")")\n'
            'source "${WORKSPACE}/runtime.conf"\nexport CUDA_DEVICE_MAX_CONNECTIONS=1\n'
            "torchrun --nproc-per-node 8 pretrain_gpt.py $MODEL_ARGS --tensor-model-parallel-size $TP "
            "--pipeline-model-parallel-size $PP --num-layers-per-virtual-pipeline-stage $(( (94 + 2) / PP / VPP )) "
            "--expert-model-parallel-size $EP --expert-tensor-parallel-size 1 --sequence-parallel "
            "--use-distributed-optimizer --account-for-embedding-in-pipeline-split "
            "--account-for-loss-in-pipeline-split --micro-batch-size 1 --global-batch-size 2048 --bf16 "
            "--moe-token-dispatcher-type alltoall --moe-grouped-gemm\n",
            "runtime.conf": "TP=${TP:-2}; PP=${PP:-8}; VPP=${VPP:-4}; EP=${EP:-32}\n"
            'MODEL_ARGS="--num-layers 94 --hidden-size 4096 --ffn-hidden-size 12288 --num-attention-heads 64 '
            "--kv-channels 128 --group-query-attention --num-query-groups 4 --qk-layernorm --swiglu "
            "--normalization RMSNorm --disable-bias-linear --position-embedding-type rope --rotary-base 1000000 "
            "--untie-embeddings-and-output-weights --seq-length 4096 --max-position-embeddings 40960 "
            '--vocab-size 151936 --num-experts 128 --moe-ffn-hidden-size 1536 --moe-router-topk 8"\n',
        },
        "run.sh",
        32,
    ),
    "srun-bash-c": (
        {
            "job.sbatch": "#!/bin/bash\nexport CUDA_DEVICE_MAX_CONNECTIONS=1\n"
            f"ARGS=({LAUNCH_SHAPE} --pipeline-model-parallel-size 2 --micro-batch-size 2 "
            "--global-batch-size 64 --bf16 --pipeline-model-parallel-layout 'Ettttttttttttttt|tttttttttttttttttL')\n"
            "srun --ntasks-per-node 1 bash -c 'torchrun --nproc-per-node 8 pretrain_gpt.py \"$@\"' bash "
            '"${ARGS[@]}"\n'
        },
        "job.sbatch",
        1,
    ),
    "bash-splits-a-quoted-value": (
        {
            "train.sh": "#!/bin/bash\nexport CUDA_DEVICE_MAX_CONNECTIONS=1\n"
            f'TRAIN=(--micro-batch-size 1 --step-batch-size-schedule "0:16 1M:64")\n'
            f"torchrun --nproc-per-node 8 pretrain_gpt.py {LAUNCH_SHAPE} --bf16 ${{TRAIN[@]}}\n"
        },
        "train.sh",
        1,
    ),
}
"""Launches planner imports (``planner check``), checked against Megatron's own validation of the
argv bash gives them; the last is refused by both (bash splits the schedule, Megatron's parser exits
on the stray word)."""

_STUBS = {
    "torchrun": '#!/bin/bash\nwhile [[ "$1" != *.py ]]; do shift; done\nshift\n'
    'printf "%s\\0" "$@" > "$PLANNER_ARGV"\nprintf "%s" "${CUDA_DEVICE_MAX_CONNECTIONS-}" > "$PLANNER_ARGV.env"\n',
    "srun": '#!/bin/bash\nwhile [[ "$1" == -* ]]; do shift; [[ "$1" != -* && "$1" != bash ]] && shift; done\nexec "$@"\n',
}
"""A torchrun that records the training script's argv (and CUDA_DEVICE_MAX_CONNECTIONS), and an srun
that runs its command on this machine."""


def bash_argv(files: dict, script: str, workdir: Path) -> tuple[list[str], dict] | str:
    """The argv and environment bash gives pretrain_gpt.py when ``script`` (of ``files``, written in
    ``workdir``) is run from its directory with the stub launchers; an error string when it fails."""
    import os
    import shutil
    import subprocess

    bash = shutil.which("bash")
    if bash is None:
        return "bash is not installed"
    for name, text in files.items():
        (workdir / name).parent.mkdir(parents=True, exist_ok=True)
        (workdir / name).write_text(text)
    stubs = workdir / ".bin"
    stubs.mkdir(exist_ok=True)
    for name, text in _STUBS.items():
        (stubs / name).write_text(text)
        (stubs / name).chmod(0o755)
    record = workdir / ".argv"
    env = {"PATH": f"{stubs}:{os.environ.get('PATH', '/usr/bin:/bin')}", "PLANNER_ARGV": str(record)}
    env["HOME"] = str(workdir / ".home")
    proc = subprocess.run(
        [bash, str(workdir / script)], cwd=workdir, env=env, capture_output=True, text=True, timeout=120
    )
    if proc.returncode or not record.exists():
        return f"bash exited {proc.returncode}: {proc.stderr.strip()[-300:]}"
    argv = record.read_text().split("\0")[:-1]
    connections = Path(f"{record}.env").read_text()
    return argv, ({"CUDA_DEVICE_MAX_CONNECTIONS": connections} if connections else {})


def validate_launch(name: str, validators, workdir: Path) -> dict:
    """One row of an imported launch: planner check's verdict on the script beside Megatron's on
    the argv bash gives it; ``status`` "agreed" or "disagreed"."""
    from planner.launch.check import check_file

    files, script, nodes = LAUNCHES[name]
    folder = workdir / name
    folder.mkdir(parents=True, exist_ok=True)
    got = bash_argv(files, script, folder)
    row = {"case": name, "framework": "megatron-import"}
    if isinstance(got, str):
        return {**row, "status": "skipped", "error": got}
    argv, env = got
    from planner.launch.megatron.arguments import megatron_words

    words = [w for w, _ in megatron_words((folder / script).read_text(), path=folder / script)[0]]
    if words != argv:
        return {**row, "status": "disagreed", "error": f"planner reads {words}, bash passes {argv}"}
    env["WORLD_SIZE"] = str(8 * nodes)
    megatron = validators.validate_megatron(argv, env, gpu_arch=9)
    verdict = check_file(str(folder / script), load_cluster("dgx-h100", nodes))
    # Megatron's validation judges the arguments, not whether the model fits the GPUs' memory.
    errors = [
        f"{f.check}: {f.message}" for f in verdict.findings if f.level == "error" and f.check != "memory"
    ]
    accepted = bool(megatron.get("accepted"))
    return {
        **row,
        "status": "agreed" if accepted == (not errors) else "disagreed",
        "plan": f"megatron {'accepts' if accepted else 'refuses'}, planner check "
        + ("passes" if not errors else "refuses"),
        "error": "; ".join(x for x in (megatron.get("error") or "", *errors[:1]) if x),
    }


def load_validators():
    """``scripts/_framework_validators.py``, or None when it (or its environment) is missing."""
    try:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import _framework_validators as validators  # type: ignore[import-not-found]
    except ImportError:
        return None
    ok = getattr(validators, "available", lambda: True)()
    return validators if ok else None


def tally(rows: list[dict]) -> dict:
    out: dict = {}
    for r in rows:
        kinds = ("agreed", "disagreed", "skipped") if r["framework"] == "megatron-import" else None
        t = out.setdefault(
            r["framework"],
            dict.fromkeys(kinds or ("accepted", "rejected", "overridden", "export refused", "skipped"), 0),
        )
        t[r["status"]] += 1
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--framework", choices=("megatron", "torchtitan"), action="append")
    p.add_argument("--cases", help="comma-separated case names (default: all)")
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--launches",
        action="store_true",
        help="also the launch scripts of LAUNCHES: planner check beside Megatron on the argv bash gives them",
    )
    args = p.parse_args(argv)
    validators = load_validators()
    if validators is None:
        print(
            "framework validators unavailable (scripts/_framework_validators.py or its environment)",
            file=sys.stderr,
        )
        return 2
    cases = CASES
    if args.cases:
        wanted = args.cases.split(",")
        unknown = [w for w in wanted if w not in {c.name for c in CASES}]
        if unknown:
            print(
                f"--cases {','.join(unknown)}: allowed values are {', '.join(c.name for c in CASES)}",
                file=sys.stderr,
            )
            return 2
        cases = tuple(c for c in CASES if c.name in wanted)
    frameworks = args.framework or ["megatron", "torchtitan"]
    with tempfile.TemporaryDirectory() as tmp:
        rows = [validate(c, f, validators, Path(tmp)) for f in frameworks for c in cases]
        if args.launches:
            rows += [validate_launch(name, validators, Path(tmp)) for name in LAUNCHES]
    counts = tally(rows)
    bad = [r for r in rows if r["status"] in ("rejected", "overridden", "export refused", "disagreed")]
    if args.json:
        print(json.dumps({"tally": counts, "rows": rows}, indent=2, sort_keys=True))
    else:
        print(
            f"{'framework':<11} {'accepted':>8} {'rejected':>8} {'overridden':>10} {'refused':>7} {'skipped':>7}"
        )
        for f, t in counts.items():
            if f == "megatron-import":
                print(f"{f:<11} agreed {t['agreed']}, disagreed {t['disagreed']}, skipped {t['skipped']}")
                continue
            print(
                f"{f:<11} {t['accepted']:>8} {t['rejected']:>8} {t['overridden']:>10} "
                f"{t['export refused']:>7} {t['skipped']:>7}"
            )
        for r in rows:
            detail = r.get("error") or ", ".join(r.get("overridden") or [])
            print(
                f"  {r['framework']:<10} {r['case']:<22} {r['status']:<14} {r.get('plan', '')}  {detail}".rstrip()
            )
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
