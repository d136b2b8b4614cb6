"""What Megatron-LM's own validation rejects in an imported launch, beyond the cost model's shape
constraints (:func:`cost_models.constraints.violations`): the argparse parser, ``validate_args``
(megatron/training/arguments.py) and ``TransformerConfig.__post_init__``
(megatron/core/transformer/transformer_config.py) of the pinned release, megatron-core 0.19.2.
Each rule cites the check it restates; each finding names the flag to change. The agreement of
these rules with Megatron's own verdicts is tested (tests/test_megatron_agreement.py) and tabled in
docs/megatron.md.

One generator per family of checks (optimizer dtypes, recompute, overlap flags, FSDP, ...);
:func:`megatron_findings` chains them in a fixed order, the parser's refusals first, so one launch
always lists its findings in one order.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from dataclasses import dataclass

from planner.inputs.cluster_spec import ClusterSpec, compute_capability_major
from planner.launch.megatron.flags import ACCEPTED, VERSION
from planner.launch.megatron.importer import OPTIMIZER_DTYPE_FLAGS, Imported, below_fp32

Finding = tuple[str, str, tuple[str, ...]]
"""(level, message, flags): level "error" (Megatron rejects the launch) or "warning"."""

Findings = Iterator[Finding]
"""The findings of one family of checks, in the order Megatron meets them."""


def megatron_findings(imp: Imported, cluster: ClusterSpec) -> list[Finding]:
    """Every rejection (and warning) of Megatron's validation for this launch, first cause first.

    A ``--yaml-cfg`` launch is validated by ``validate_yaml`` instead of ``validate_args``
    (megatron/training/arguments.py ``parse_and_validate_args``), whose rules the import has
    applied (:mod:`.yaml_rules`): of these, only the parser's, OptimizerConfig's,
    TransformerConfig's and the parallel state's apply to it."""
    f, sizes = imp.flags, _Sizes.of(imp.flags)
    yaml = imp.yaml_cfg is not None
    validate_args = (
        ()
        if yaml
        else (
            *_overlap(imp, sizes),
            *_positions(f),
            *_megatron_fsdp(f),
            *_torch_fsdp2(f, sizes),
            *_device_connections(imp, cluster, sizes),
        )
    )
    return [
        *_unrecognized(imp.rejected),
        *_optimizer_dtypes(f, yaml),
        *_recompute(f),
        *validate_args,
        *_moe_a2a_overlap(imp, sizes),
        *_cuda_graphs(f),
        *_sparse_attention(f, sizes),
        *_expert_grid(imp),
    ]


def _error(msg: str, *flags: str) -> Finding:
    return ("error", msg, flags)


def _warning(msg: str, *flags: str) -> Finding:
    return ("warning", msg, flags)


@dataclass(frozen=True, slots=True)
class _Sizes:
    """The parallel sizes a launch gives (a flag absent or not an integer: Megatron's default 1)."""

    tp: int
    cp: int
    pp: int

    @classmethod
    def of(cls, f: dict) -> _Sizes:
        return cls(
            tp=_int(f.get("--tensor-model-parallel-size"), 1),
            cp=_int(f.get("--context-parallel-size"), 1),
            pp=_int(f.get("--pipeline-model-parallel-size"), 1),
        )


def _granularity(f: dict) -> str | None:
    """``--recompute-granularity``, or selective under the older ``--recompute-activations``."""
    return f.get("--recompute-granularity") or ("selective" if "--recompute-activations" in f else None)


def _unrecognized(rejected: tuple[str, ...]) -> Findings:
    """argparse (parse_args, allow_abbrev=False): any other -- word, and any word no flag takes
    (the parser has no positional argument), exits with "unrecognized arguments"."""
    for flag in rejected:
        if not flag.startswith("-"):
            yield _error(
                f"{flag!r} is a word no flag of {VERSION} takes (its parser exits: unrecognized "
                "arguments); a value bash split at a space must reach Megatron as one word (quote it, "
                'and expand an array holding it as "${ARR[@]}")',
                flag,
            )
            continue
        close = difflib.get_close_matches(flag, ACCEPTED, n=1, cutoff=0.8)
        hint = f"; did you mean {close[0]}?" if close else ""
        yield _error(
            f"{flag} is not an argument of {VERSION} (its parser exits: unrecognized arguments){hint}", flag
        )


def _optimizer_dtypes(f: dict, yaml: bool = False) -> Findings:
    """OptimizerConfig.__post_init__ (megatron/core/optimizer/optimizer_config.py): the optimizer's
    dtypes "can only be fp32 when not using precision-aware optimizer", and the precision-aware
    optimizer is "only supported with distributed optimizer"; validate_args under --bf16:
    "--main-grads-dtype can only be fp32 when --accumulate-allreduce-grads-in-fp32 is set"
    (megatron/training/arguments.py; not validate_yaml's, ``yaml``)."""
    lowered = [g for g in OPTIMIZER_DTYPE_FLAGS if below_fp32(f, g)]
    if "--use-precision-aware-optimizer" in f:
        if "--use-distributed-optimizer" not in f:
            yield _error(
                "--use-precision-aware-optimizer is only supported with the distributed optimizer "
                "(OptimizerConfig)",
                "--use-precision-aware-optimizer",
                "--use-distributed-optimizer",
            )
    elif lowered:
        yield _error(
            f"{', '.join(lowered)} can only be fp32 without --use-precision-aware-optimizer (OptimizerConfig)",
            *lowered,
            "--use-precision-aware-optimizer",
        )
    if (
        not yaml
        and "--bf16" in f
        and "--accumulate-allreduce-grads-in-fp32" in f
        and "--main-grads-dtype" in lowered
    ):
        yield _error(
            "--main-grads-dtype can only be fp32 when --accumulate-allreduce-grads-in-fp32 is set "
            "(validate_args, --bf16)",
            "--main-grads-dtype",
            "--accumulate-allreduce-grads-in-fp32",
        )


def _recompute(f: dict) -> Findings:
    """Recompute: validate_args ("selective" takes no method) and TransformerConfig (full needs a
    method and --recompute-num-layers; selective takes no --recompute-num-layers)."""
    granularity = _granularity(f)
    if granularity == "full":
        if f.get("--recompute-method") is None:
            yield _error(
                "full recompute needs --recompute-method uniform or block (TransformerConfig)",
                "--recompute-method",
            )
        if f.get("--recompute-num-layers") is None:
            yield _error(
                "full recompute needs --recompute-num-layers (layers recomputed per pipeline stage; TransformerConfig)",
                "--recompute-num-layers",
            )
        if "--moe-layer-recompute" in f:
            yield _error(
                "--moe-layer-recompute is refused with full recompute granularity (TransformerConfig)",
                "--moe-layer-recompute",
                "--recompute-granularity",
            )
    elif granularity == "selective":
        if "moe_act" in str(f.get("--recompute-modules") or "").split() and "--moe-grouped-gemm" not in f:
            yield _error(
                "moe_act in --recompute-modules is only supported with --moe-grouped-gemm (TransformerConfig)",
                "--recompute-modules",
                "--moe-grouped-gemm",
            )
        if f.get("--recompute-method") is not None:
            yield _error(
                "--recompute-method is not supported with selective recompute (validate_args)",
                "--recompute-method",
                "--recompute-granularity",
            )
        if f.get("--recompute-num-layers") is not None:
            yield _error(
                "--recompute-num-layers must not be given with selective recompute (TransformerConfig)",
                "--recompute-num-layers",
            )


def _overlap(imp: Imported, sizes: _Sizes) -> Findings:
    """The overlap flags (validate_args): the parameter all-gather, tensor-parallel communication
    (sequence parallelism, which validate_args turns off when tp == 1) and, for the interleaved
    schedule, pp > 2 unless p2p communication overlaps."""
    f = imp.flags
    if "--overlap-param-gather" in f:
        if "--use-distributed-optimizer" not in f and "--use-megatron-fsdp" not in f:
            yield _error(
                "--overlap-param-gather needs the distributed optimizer (--use-distributed-optimizer) or "
                "Megatron-FSDP (validate_args)",
                "--overlap-param-gather",
                "--use-distributed-optimizer",
            )
        if "--overlap-grad-reduce" not in f:
            yield _error(
                "--overlap-param-gather needs --overlap-grad-reduce (validate_args)", "--overlap-grad-reduce"
            )
    if "--tp-comm-overlap" in f and not ("--sequence-parallel" in f and sizes.tp > 1):
        yield _error(
            "--tp-comm-overlap needs sequence parallelism (--sequence-parallel with tp > 1; validate_args)",
            "--tp-comm-overlap",
            "--sequence-parallel",
        )
    if imp.config.vpp > 1 and "--no-overlap-p2p-communication" in f and sizes.pp <= 2:
        yield _error(
            "the interleaved schedule without p2p overlap (--no-overlap-p2p-communication) needs "
            "--pipeline-model-parallel-size > 2 (validate_args)",
            "--no-overlap-p2p-communication",
            "--pipeline-model-parallel-size",
        )


def _positions(f: dict) -> Findings:
    """Positions (validate_args asserts it for every embedding type)."""
    seq, maxpos = _int(f.get("--seq-length"), 0), _int(f.get("--max-position-embeddings"), None)
    if maxpos is None:
        yield _error("--max-position-embeddings is required (validate_args)", "--max-position-embeddings")
    elif maxpos < seq:
        yield _error(
            f"--max-position-embeddings ({maxpos}) must be >= --seq-length ({seq}) (validate_args)",
            "--max-position-embeddings",
            "--seq-length",
        )


def _checkpoint_format(f: dict) -> str:
    """``--ckpt-format`` (Megatron's default: torch_dist)."""
    return f.get("--ckpt-format") or "torch_dist"


def _megatron_fsdp(f: dict) -> Findings:
    """Megatron-FSDP (validate_args; NVIDIA's Megatron-FSDP user guide "Required Configurations")
    and its checkpoint format."""
    ckpt = _checkpoint_format(f)
    if "--use-megatron-fsdp" in f:
        if ckpt != "fsdp_dtensor":
            yield _error("Megatron-FSDP requires --ckpt-format fsdp_dtensor (validate_args)", "--ckpt-format")
        if "--use-distributed-optimizer" not in f:
            yield _warning(
                "Megatron-FSDP turns on the distributed optimizer by itself; NVIDIA's guide lists "
                "--use-distributed-optimizer as required",
                "--use-distributed-optimizer",
            )
        if "--no-gradient-accumulation-fusion" not in f:
            yield _warning(
                "NVIDIA's Megatron-FSDP guide lists --no-gradient-accumulation-fusion as required",
                "--no-gradient-accumulation-fusion",
            )
    elif ckpt == "fsdp_dtensor":
        yield _error(
            "--ckpt-format fsdp_dtensor is only supported with --use-megatron-fsdp (validate_args)",
            "--ckpt-format",
        )


def _torch_fsdp2(f: dict, sizes: _Sizes) -> Findings:
    """PyTorch FSDP2 (validate_args, ``use_torch_fsdp2``)."""
    if "--use-torch-fsdp2" not in f:
        return
    if sizes.pp > 1:
        yield _error(
            "--use-torch-fsdp2 is not supported with pipeline parallelism (validate_args)",
            "--use-torch-fsdp2",
        )
    if "--use-distributed-optimizer" in f:
        yield _error(
            "--use-torch-fsdp2 excludes --use-distributed-optimizer (validate_args)",
            "--use-distributed-optimizer",
        )
    if "--no-gradient-accumulation-fusion" not in f:
        yield _error(
            "--use-torch-fsdp2 needs --no-gradient-accumulation-fusion (validate_args)",
            "--no-gradient-accumulation-fusion",
        )
    if "--untie-embeddings-and-output-weights" not in f:
        yield _error(
            "--use-torch-fsdp2 needs --untie-embeddings-and-output-weights (validate_args)",
            "--untie-embeddings-and-output-weights",
        )
    if _checkpoint_format(f) not in ("torch_dist", "torch_dcp"):
        yield _error(
            "--use-torch-fsdp2 needs --ckpt-format torch_dist or torch_dcp (validate_args)",
            "--ckpt-format",
        )


def _device_connections(imp: Imported, cluster: ClusterSpec, sizes: _Sizes) -> Findings:
    """CUDA_DEVICE_MAX_CONNECTIONS (validate_args, before Blackwell): 1 with tp > 1 or cp > 1,
    never 1 with Megatron-FSDP. Only a launch script (or a model config's ENV_VARS) sets the
    environment."""
    f = imp.flags
    conn = imp.env.get("CUDA_DEVICE_MAX_CONNECTIONS")
    pre_blackwell = any(compute_capability_major(g.gpu.name) < 10 for g in cluster.groups)
    model_parallel = sizes.tp > 1 or sizes.cp > 1
    if "--use-megatron-fsdp" in f or "--use-torch-fsdp2" in f:
        if conn == "1":
            yield _error(
                "Megatron-FSDP requires CUDA_DEVICE_MAX_CONNECTIONS > 1 or unset (validate_args); unset it",
                "CUDA_DEVICE_MAX_CONNECTIONS",
            )
    elif "--overlap-moe-expert-parallel-comm" in f:
        if imp.is_script and model_parallel and pre_blackwell:
            # The estimate prices the all-to-all overlap with several queues and no
            # tensor-parallel overlap (cost_models.layers; the Megatron export sets 8).
            yield _warning(
                "CUDA_DEVICE_MAX_CONNECTIONS=1 serialises the MoE all-to-all overlap before Blackwell "
                "with tensor or context parallelism; the estimate assumes it overlaps, as with 8 "
                "(Megatron-Bridge's setting; validate_args warns either way)"
                if conn == "1"
                else "before Blackwell, tensor or context parallelism wants CUDA_DEVICE_MAX_CONNECTIONS=1 "
                "while the MoE all-to-all overlap wants more (validate_args warns); the estimate "
                "prices the all-to-all overlap and no tensor-parallel overlap",
                "CUDA_DEVICE_MAX_CONNECTIONS",
            )
    elif imp.is_script and model_parallel and pre_blackwell and conn != "1":
        yield _error(
            "tensor or context parallelism needs CUDA_DEVICE_MAX_CONNECTIONS=1 before Blackwell "
            "(validate_args); add 'export CUDA_DEVICE_MAX_CONNECTIONS=1' to the launch script (in a "
            "MODEL_ARGS model config: CUDA_DEVICE_MAX_CONNECTIONS: 1 under ENV_VARS)",
            "CUDA_DEVICE_MAX_CONNECTIONS",
        )


def _moe_a2a_overlap(imp: Imported, sizes: _Sizes) -> Findings:
    """MoE all-to-all overlap (TransformerConfig.__post_init__, overlap_moe_expert_parallel_comm)."""
    f, a2a = imp.flags, "--overlap-moe-expert-parallel-comm"
    if a2a not in f:
        return
    if _int(f.get("--expert-model-parallel-size"), 1) <= 1:
        yield _error(
            f"{a2a} needs expert parallelism (--expert-model-parallel-size > 1; TransformerConfig)", a2a
        )
    if (f.get("--moe-token-dispatcher-type") or "allgather") not in ("alltoall", "flex"):
        yield _error(
            f"{a2a} needs --moe-token-dispatcher-type alltoall or flex (TransformerConfig)",
            a2a,
            "--moe-token-dispatcher-type",
        )
    if sizes.pp > 1 and imp.config.vpp <= 1:
        yield _error(
            f"{a2a} with pipeline parallelism needs virtual pipeline stages (TransformerConfig)",
            a2a,
            "--num-layers-per-virtual-pipeline-stage",
        )
    if _granularity(f) == "full" or f.get("--recompute-method") is not None:
        yield _error(f"{a2a} excludes full recompute and --recompute-method (TransformerConfig)", a2a)
    if "moe" in str(f.get("--recompute-modules") or "").split() or "--moe-layer-recompute" in f:
        yield _error(
            f"{a2a} excludes 'moe' in --recompute-modules (TransformerConfig; --moe-layer-recompute adds it)",
            a2a,
            "--recompute-modules" if "--recompute-modules" in f else "--moe-layer-recompute",
        )


def _cuda_graphs(f: dict) -> Findings:
    """CUDA graphs (TransformerConfig.__post_init__, cuda_graph_modules)."""
    modules = str(f.get("--cuda-graph-modules") or "").split()
    if f.get("--cuda-graph-impl") == "full_iteration" and modules:
        yield _error(
            "--cuda-graph-modules must be empty with --cuda-graph-impl full_iteration (TransformerConfig)",
            "--cuda-graph-modules",
        )
    if "moe_preprocess" in modules and "moe_router" not in modules:
        yield _error(
            "--cuda-graph-modules moe_preprocess needs moe_router (TransformerConfig)", "--cuda-graph-modules"
        )


def _sparse_attention(f: dict, sizes: _Sizes) -> Findings:
    """DeepSeek sparse attention (``--experimental-attention-variant dsa``), TransformerConfig's
    checks (megatron/core/transformer/transformer_config.py at d98e8a64): ``__post_init__`` "DSA uses
    AbsorbedMLASelfAttention, which requires add_bias_linear=False" (linear biases are on unless
    ``--disable-bias-linear``), then "RoPE fusion is not supported for DSAttention" (fusion is on
    unless ``--no-rope-fusion``) and, with context parallelism, "supports cp_comm_type=allgather
    only" (``--cp-comm-type`` defaults to p2p)."""
    if f.get("--experimental-attention-variant") != "dsa":
        return
    if "--disable-bias-linear" not in f:
        yield _error(
            "DeepSeek sparse attention (AbsorbedMLASelfAttention) needs --disable-bias-linear (TransformerConfig)",
            "--disable-bias-linear",
        )
    if "--no-rope-fusion" not in f:
        yield _error(
            "DeepSeek sparse attention does not support RoPE fusion: add --no-rope-fusion (TransformerConfig)",
            "--no-rope-fusion",
        )
    comm = str(f.get("--cp-comm-type") or "p2p").split()
    if sizes.cp > 1 and any(t.replace("_", "").lower() != "allgather" for t in comm):
        yield _error(
            "DeepSeek sparse attention with context parallelism supports --cp-comm-type allgather only "
            f"(got {' '.join(comm)}; TransformerConfig)",
            "--cp-comm-type",
        )


def _expert_grid(imp: Imported) -> Findings:
    """The expert grid: parallel_state.initialize_model_parallel's "When not using pp-last rank
    ordering, the data parallel size of the attention and moe layers must be the same" (the expert
    grid has world / (expert tp x ep x pp) data-parallel ranks; a dense model's has ep 1, expert
    tp = tp), and expert parallelism only for an MoE model."""
    f, c = imp.flags, imp.config
    if "--use-tp-pp-dp-mapping" in f and c.pp > 1 and imp.world_size and c.expert_dp != c.dp:
        yield _error(
            f"--use-tp-pp-dp-mapping with pipeline parallelism needs the same data-parallel size for "
            f"the dense and the expert layers ({c.dp} vs {c.expert_dp}): expert tp x ep must equal "
            "tp x cp (parallel_state.initialize_model_parallel)",
            "--use-tp-pp-dp-mapping",
            "--context-parallel-size" if c.cp > 1 else "--expert-model-parallel-size",
        )
    if "--num-experts" not in f and _int(f.get("--expert-model-parallel-size"), 1) > 1:
        yield _error(
            "--expert-model-parallel-size > 1 needs an MoE model (--num-experts)",
            "--expert-model-parallel-size",
            "--num-experts",
        )


def _int(value, default):
    try:
        return int(value)
    except (TypeError, ValueError):
        return default
