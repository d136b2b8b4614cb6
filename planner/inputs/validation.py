"""One validation layer for every input kind, and the JSON edge (docs/reliability.md).

Inputs: :class:`planner.inputs.documents.Reader` (model, GPU, cluster, job, plan, graph-model and fill-job
files), the HF ``config.json`` importer, the Megatron-LM importer and the command-line job flags
all check numbers through :func:`check_number`: the right type, finite, positive or non-negative,
and at most the realistic upper bound of :data:`LIMITS` for that key. Bounds are far above any
system built or announced (each is justified below), so they never refuse a real input; they
exist so that a typo such as ``num_layers: 2147483648`` is a one-line error instead of a run that
allocates until the kernel kills it.

Outputs: :func:`json_text` is the only way ``--json`` and JSON plan files are written: it rejects
NaN and infinity (``allow_nan=False``, so the text is always valid JSON) and turns floating-point
round-off just below zero (``-1.9e-16``) into ``0.0``.

Files: :func:`read_text_capped` reads at most :data:`MAX_FILE_BYTES` and maps undecodable bytes,
unreadable paths and over-long names to :class:`~planner.inputs.errors.SpecError`.
"""

from __future__ import annotations

import json
import math
import numbers
import unicodedata
from pathlib import Path
from typing import Any

from planner.inputs.errors import SpecError

MAX_FILE_BYTES = 16 * 2**20
"""Largest input file read (16 MiB). The largest input planner takes is a plan file of a graph
model with thousands of blocks (tens of KiB); HF ``config.json`` files are a few KiB. A larger file
is not an input (``/dev/zero``, a checkpoint passed by mistake) and is refused before parsing."""

ROUND_OFF = 1e-9
"""Negative results smaller than this in magnitude are round-off of quantities that are
non-negative by definition (idle time, bubble fraction): sums of float64 durations of about
1e-3..1e3 s carry relative errors near 1e-16, i.e. absolute errors far below 1e-9."""

# Upper bounds per input key: (bound, why). Applied by key name wherever the key is read, so a
# model file, a plan file's model section and a graph model's block share one rule.
_WORLD = 10**7
LIMITS: dict[str, tuple[float, str]] = {
    # Model shape.
    "num_layers": (10_000, "the deepest published transformers have about 100-200 layers"),
    "hidden_size": (1_000_000, "the widest published models use 8k-25k (GPT-3: 12288)"),
    "ffn_hidden_size": (10_000_000, "published FFN widths are at most about 100k (4-8x hidden)"),
    "moe_ffn_hidden_size": (10_000_000, "as ffn_hidden_size"),
    "moe_shared_expert_intermediate_size": (10_000_000, "as ffn_hidden_size"),
    "num_attention_heads": (100_000, "published models use at most 128-256 heads"),
    "num_query_groups": (100_000, "at most num_attention_heads"),
    "kv_channels": (100_000, "published head dimensions are 64-256"),
    "vocab_size": (100_000_000, "published vocabularies are at most about 256k-1M tokens"),
    "max_position_embeddings": (100_000_000, "published context lengths reach 1M-10M tokens"),
    "rotary_base": (10**12, "published RoPE bases are 1e4-1e7 (Llama 3: 5e5, Qwen3: 1e6)"),
    "num_experts": (1_000_000, "published MoE models use at most a few thousand experts"),
    "moe_router_topk": (1_000_000, "at most num_experts"),
    "moe_layer_freq": (10_000, "at most num_layers"),
    "moe_expert_capacity_factor": (1_000.0, "capacity factors in use are 1-2; above num_experts is moot"),
    "q_lora_rank": (1_000_000, "as hidden_size (DeepSeek-V3: 1536)"),
    "kv_lora_rank": (1_000_000, "as hidden_size (DeepSeek-V3: 512)"),
    "qk_head_dim": (100_000, "as kv_channels"),
    "qk_pos_emb_head_dim": (100_000, "as kv_channels"),
    "v_head_dim": (100_000, "as kv_channels"),
    "window_size": (100_000_000, "as max_position_embeddings (gpt-oss: 128, Llama 4 chunks: 8192)"),
    "window_attn_skip_freq": (10_000, "at most num_layers"),
    "mtp_num_layers": (10_000, "at most num_layers (DeepSeek-V3: 1)"),
    "mamba_state_dim": (100_000, "published Mamba-2 states are 64-256 per head (Nemotron-H: 128/256)"),
    "mamba_head_dim": (100_000, "as kv_channels (Nemotron-H: 64)"),
    "mamba_num_heads": (100_000, "as num_attention_heads (Nemotron-H: 128-256)"),
    "mamba_num_groups": (100_000, "at most mamba_num_heads (Nemotron-H: 8)"),
    "mamba_conv_kernel": (1_000, "published causal convolutions are 4 wide"),
    "mamba_chunk_size": (1_000_000, "the SSD kernels use chunks of 64-256 tokens"),
    "mamba_version": (2, "1 (Mamba-1, Jamba) or 2 (Mamba-2)"),
    "mamba_expand": (1_000, "published Mamba-1 models expand the hidden size 2x (Jamba: 2)"),
    "mamba_dt_rank": (100_000, "Mamba-1's default is ceil(h / 16) (Jamba-1.5-Mini: 256)"),
    "linear_attention_freq": (10_000, "at most num_layers (Qwen3-Next: 4)"),
    "linear_num_key_heads": (100_000, "as num_attention_heads (Qwen3-Next: 16)"),
    "linear_num_value_heads": (100_000, "as num_attention_heads (Qwen3-Next: 32)"),
    "linear_key_head_dim": (100_000, "as kv_channels (Qwen3-Next: 128)"),
    "linear_value_head_dim": (100_000, "as kv_channels (Qwen3-Next: 128)"),
    "linear_conv_kernel_dim": (1_000, "published causal convolutions are 4 wide"),
    "dsa_indexer_n_heads": (100_000, "as num_attention_heads (DeepSeek-V3.2: 64)"),
    "dsa_indexer_head_dim": (100_000, "as kv_channels (DeepSeek-V3.2: 128)"),
    "dsa_indexer_topk": (100_000_000, "as max_position_embeddings (DeepSeek-V3.2: 2048)"),
    # Job.
    "seq_length": (10_000_000, "the longest published training contexts are about 1M-10M tokens"),
    "global_batch_size": (
        10_000_000,
        "published global batches are at most a few tens of thousands of sequences "
        "(Llama 3 405B: 16M tokens = 2048 x 8k); the simulator's work grows with micro-batches",
    ),
    "micro_batch_size": (1_000_000, "at most the global batch"),
    # Cluster.
    "num_nodes": (1_000_000, "the largest clusters built have about 100k GPUs, 10k-50k nodes"),
    "gpus_per_node": (100_000, "nodes hold 4-8 GPUs; rack-scale NVLink domains reach 72-576"),
    "nvlink_domain_size": (100_000, "NVLink domains reach 72 (GB200 NVL72) to 576 GPUs"),
    "memory_gib": (10_000.0, "GPU memories are 16-288 GiB (B300: 288 GB)"),
    "memory_reserve_gib": (1_000_000.0, "at most memory_gib"),
    "hbm_bandwidth_gb_per_s": (1e5, "HBM bandwidths are 0.9-8 TB/s"),
    "gemm_stream_gb_per_s": (1e5, "as hbm_bandwidth_gb_per_s"),
    "host_link_gb_per_s": (1e4, "PCIe 5 x16 carries 64 GB/s per direction, NVLink-C2C 450 GB/s"),
    "intra_node_bandwidth_gb_per_s": (1e5, "NVLink 5 is 900 GB/s per direction per GPU"),
    "inter_node_bandwidth_gb_per_s": (1e4, "NICs are 25-100 GB/s per GPU (800 Gb/s: 100 GB/s)"),
    "intra_node_latency_us": (1e6, "link latencies are microseconds; one second is a broken link"),
    "inter_node_latency_us": (1e6, "as intra_node_latency_us"),
    "intra_node_efficiency": (1.0, "a fraction of the link's bandwidth"),
    "link_bandwidth_gb_per_s": (1e4, "one NVLink link carries 20-50 GB/s per direction"),
    "nvlink_links": (18, "a GPU has at most 18 NVLink links (H100, B200)"),
    "inter_node_efficiency": (1.0, "a fraction of the link's bandwidth"),
    "host_memory_gb": (1e5, "nodes hold 0.5-4 TB of system memory"),
    "gemm_efficiency_max": (1.0, "a fraction of the peak"),
    "attention_efficiency": (1.0, "a fraction of the peak"),
    "hbm_efficiency": (1.0, "a fraction of the peak bandwidth"),
    "gemm_half_efficiency_gflop": (1e9, "a GEMM size; the largest GEMMs are about 1e6 GFLOP"),
    "fp8_gemm_speedup": (100.0, "fp8 is at most about 2x bf16 on tensor cores"),
    "kernel_overhead_us": (1e6, "launch overheads are microseconds"),
    "host_launch_us": (1e6, "a kernel launch takes microseconds"),
    "grouped_gemm_efficiency": (1.0, "a fraction of a dense GEMM's speed"),
    "comm_overlap_slowdown": (1.0, "compute time added per second of hidden communication: a fraction"),
    "forward": (100.0, "a kernel's speed relative to the GPU's fused attention: fitted values are 0.5-2"),
    "backward": (100.0, "as forward"),
    "local_forward": (100.0, "as forward"),
    "local_backward": (100.0, "as forward"),
    "sm_count": (10_000, "GPUs have 80-304 SMs or CUs (V100: 80, H100 SXM: 132, MI300X: 304)"),
    "tdp_w": (100_000.0, "GPUs draw 300-1,400 W (GB300: 1,400 W)"),
    "gpu_hour_price_usd": (10_000.0, "cloud GPU-hours cost 1-15 USD"),
    "bf16": (1e5, "TFLOP/s: the fastest GPUs are about 2.5-5 PFLOP/s dense"),
    "fp16": (1e9, "as bf16"),
    "fp8": (1e9, "as bf16"),
    "fp4": (1e9, "as bf16"),
    "tf32": (1e9, "as bf16"),
    # Parallel configuration: each degree is at most a world size.
    **{
        k: (_WORLD, "at most the number of GPUs in the largest cluster")
        for k in ("tp", "pp", "dp", "cp", "ep", "etp")
    },
    "vpp": (10_000, "at most num_layers"),
    "fsdp_shard": (_WORLD, "at most the number of GPUs in the largest cluster"),
    "optimizer_instances": (_WORLD, "at most the number of GPUs in the largest cluster"),
    "pipelines": (_WORLD, "at most the number of GPUs in the largest cluster"),
    "num_stages": (_WORLD, "at most the number of GPUs in the largest cluster"),
    "replicas": (_WORLD, "at most the number of GPUs in the largest cluster"),
    "first_layer": (10_000, "at most num_layers"),
    "recompute_num_layers": (10_000, "at most num_layers"),
    "offload_layers": (10_000, "fewer than num_layers"),
    # Graph-model generic blocks.
    "forward_flop_per_sample": (1e21, "a whole GPT-3 forward pass is about 1e15 FLOP per sample"),
    "params": (1e15, "the largest models have about 1e12-1e13 parameters"),
    "activation_bytes_per_sample": (1e15, "a petabyte per sample is no real block"),
    "output_bytes_per_sample": (1e15, "as activation_bytes_per_sample"),
    "bytes_per_sample": (1e15, "as activation_bytes_per_sample"),
    # Fill jobs.
    "unit_time_s": (1e6, "a fill unit fits in a pipeline bubble of milliseconds to seconds"),
    "unit_memory_gib": (1_000_000.0, "at most a GPU's memory"),
    "footprint_gib": (1_000_000.0, "at most a GPU's memory"),
    "min_units": (1_000_000_000, "a count of units in one bubble"),
}


# Profile parameters (planner.profiles.params) share the bounds of what they set.
LIMITS.update(
    {
        "nvlink_bus_bandwidth_gb_per_s": LIMITS["intra_node_bandwidth_gb_per_s"],
        "network_bus_bandwidth_gb_per_s": LIMITS["inter_node_bandwidth_gb_per_s"],
        "nvlink_latency_us": LIMITS["intra_node_latency_us"],
        "network_latency_us": LIMITS["inter_node_latency_us"],
    }
)

# Command-line quantities without a file key (goodput, bubble fill, output sizes): (bound, why).
LIMITS.update(
    {
        "run_days": (3650.0, "training runs last weeks to months (Llama 3 405B: 54 days); ten years"),
        "gpu_failure_rate_per_h": (
            0.01,
            "500 times the Llama 3 run's 1.97e-5 per GPU-hour; a GPU failing every 100 hours is broken",
        ),
        "storage_gb_per_s": (
            1e5,
            "the fastest file systems sustain 2-10 TB/s (Llama 3's Tectonic: 2 TB/s, 7 TB/s peak)",
        ),
        "restart_s": (1e6, "relaunches take minutes; 1e6 s is 12 days"),
        "repair_h": (8760.0, "a failed node is back within days; one year"),
        "checkpoint_interval_s": (1e8, "intervals are minutes to hours; 1e8 s is three years"),
        "spares": (1_000_000, "at most num_nodes"),
        "switch_overhead_s": (1e3, "a context switch takes milliseconds; iterations take seconds"),
        "min_slice_s": (1e3, "as switch_overhead_s"),
        "safety_margin": (1.0, "a fraction of each window"),
        "max_slowdown": (100.0, "a bound on the main job's relative slowdown (0.02 = 2%)"),
        "headroom_gib": (10_000.0, "at most memory_gib"),
        "width": (10_000, "characters per row of a terminal chart (terminals are 80-400 wide)"),
        "top": (
            100,
            "distinct plans returned, each estimated and written out in full: 100 take about 6 s, "
            "1,000 about 2 minutes (Llama 3 8B on 64 H100s)",
        ),
        "jobs": (1_024, "parallel worker processes; machines have at most a few hundred cores"),
        "fail_gpus": (_WORLD, "at most the number of GPUs in the largest cluster"),
        "fail_nodes": (1_000_000, "at most num_nodes"),
    }
)

MINIMA: dict[str, tuple[float, str]] = {
    "memory_gib": (1.0, "the smallest GPUs that train models hold 2-4 GB (Jetson Nano: 4 GB)"),
    "bf16": (0.1, "TFLOP/s: a Jetson Nano (2019) reaches 0.47 TFLOP/s FP16; datacenter GPUs 100-5,000"),
    "fp16": (0.1, "as bf16"),
    "fp8": (0.1, "as bf16"),
    "fp4": (0.1, "as bf16"),
    "tf32": (0.1, "as bf16"),
    "hbm_bandwidth_gb_per_s": (10.0, "a Jetson Nano's LPDDR4 carries 25.6 GB/s; HBM 0.9-8 TB/s"),
    "gemm_stream_gb_per_s": (10.0, "as hbm_bandwidth_gb_per_s"),
    "host_link_gb_per_s": (0.1, "PCIe 1.0 x1, the slowest link a GPU sits on, carries 0.25 GB/s"),
    "intra_node_bandwidth_gb_per_s": (0.1, "as host_link_gb_per_s: PCIe 1.0 x1"),
    "link_bandwidth_gb_per_s": (0.1, "NVLink 1 links carry 20 GB/s; PCIe 1.0 x1 0.25 GB/s"),
    "inter_node_bandwidth_gb_per_s": (0.01, "100 Mb/s Ethernet carries 0.0125 GB/s"),
    "nvlink_bus_bandwidth_gb_per_s": (0.01, "a bus bandwidth nccl-tests measures; 1% of PCIe 1.0 x1"),
    "network_bus_bandwidth_gb_per_s": (0.001, "a bus bandwidth; 10% of 100 Mb/s Ethernet"),
    "host_memory_gb": (1.0, "nodes hold 0.5-4 TB of system memory"),
    **{
        k: (0.001, "a fraction: 0.1% is no steady-state training kernel or link (fitted values 0.3-0.95)")
        for k in (
            "gemm_efficiency_max",
            "attention_efficiency",
            "hbm_efficiency",
            "grouped_gemm_efficiency",
            "intra_node_efficiency",
            "inter_node_efficiency",
        )
    },
    "gemm_half_efficiency_gflop": (1e-6, "a GEMM size (fitted values are 0.1-100 GFLOP)"),
    "fp8_gemm_speedup": (0.1, "fp8 runs 1-2x as fast as bf16 on tensor cores"),
    "forward": (0.01, "a relative kernel speed (fitted values 0.5-2)"),
    "backward": (0.01, "as forward"),
    "local_forward": (0.01, "as forward"),
    "local_backward": (0.01, "as forward"),
    "tdp_w": (1.0, "GPUs draw 10-1,400 W (Jetson Nano: 10 W)"),
    "unit_time_s": (1e-6, "a fill unit is at least one kernel launch, microseconds"),
    "run_days": (1 / 1440, "one minute"),
    "gpu_failure_rate_per_h": (1e-9, "one failure per GPU per 100,000 years"),
    "storage_gb_per_s": (0.01, "one hard disk writes 0.1-0.25 GB/s"),
    "repair_h": (0.01, "36 seconds"),
    "checkpoint_interval_s": (1.0, "a checkpoint takes seconds to write"),
    "width": (10, "characters per row: a stage label and a few columns of chart"),
}
"""Lower bounds per key: (bound, why). A positive physical quantity (a bandwidth, a peak, a memory
size, a rate, a time) below its bound is no real system: a GPU peak of 1e-300 TFLOP/s priced a
step at 7.5e302 s, a bandwidth of 5e-324 GB/s divided by zero. Zero itself is an error where the
key is positive; where a key's zero has a meaning (a peak of 0: the GPU has no such tensor core;
``tdp_w: 0``: not given) zero is allowed, and any other value must be within the bounds."""


def limit(key: str) -> float | None:
    """The upper bound of ``key`` (its last dotted component), or None when it has none."""
    entry = LIMITS.get(key.rsplit(".", 1)[-1])
    return entry[0] if entry else None


def minimum(key: str) -> float | None:
    """The lower bound of ``key`` (its last dotted component) for non-zero values, or None."""
    entry = MINIMA.get(key.rsplit(".", 1)[-1])
    return entry[0] if entry else None


def check_number(
    value: Any,
    where: str,
    key: str,
    *,
    integer: bool = False,
    positive: bool = False,
    maximum: float | None = None,
    least: float | None = None,
) -> int | float:
    """``value`` as a checked number: not a boolean, finite, ``>= 0`` (``> 0`` when ``positive``),
    at most ``maximum`` (default: :func:`limit` of ``key``) and, unless zero where zero is allowed,
    at least ``least`` (default: :func:`minimum` of ``key``). Errors name ``where`` and ``key``."""
    return _checked(value, f"{where}: key '{key}'", key, integer, positive, maximum, least)


def check_flag(
    value: Any,
    flag: str,
    key: str,
    *,
    integer: bool = False,
    positive: bool = True,
    maximum: float | None = None,
    least: float | None = None,
) -> Any:
    """A command-line number checked by the rule of :func:`check_number` with the bounds of
    ``key``, as a :class:`~planner.inputs.errors.UsageError` (exit 2) naming ``flag``; ``None``
    (the option not given) passes. Positive by default: a flag given 0 or -0 is an error, never
    "not given"."""
    from planner.inputs.errors import UsageError

    if value is None:
        return None
    try:
        return _checked(value, flag, key, integer, positive, maximum, least)
    except SpecError as exc:
        raise UsageError(str(exc)) from None


def _checked(value, name: str, key: str, integer: bool, positive: bool, maximum, least):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        kind = "an integer" if integer else "a number"
        raise SpecError(f"{name}: expected {kind}, got {type(value).__name__} {value!r}"[:300])
    if integer and not isinstance(value, int):
        raise SpecError(f"{name}: expected an integer, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise SpecError(f"{name}: must be a finite number, got {value}")
    if positive and value <= 0:
        raise SpecError(f"{name}: must be positive, got {value}")
    if value < 0:
        raise SpecError(f"{name}: must not be negative, got {value}")
    short = key.rsplit(".", 1)[-1]
    bound = limit(key) if maximum is None else maximum
    if bound is not None and value > bound:
        why = LIMITS.get(short, (0, ""))[1] if maximum is None else ""
        shown = (
            f"a {len(str(value))}-digit integer" if isinstance(value, int) and value > 10**18 else str(value)
        )
        raise SpecError(
            f"{name}: {shown} is above the largest allowed, {bound:g}" + (f" ({why})" if why else "")
        )
    low = minimum(key) if least is None else least
    if low is not None and value != 0 and value < low:
        why = MINIMA.get(short, (0, ""))[1] if least is None else ""
        raise SpecError(
            f"{name}: {value:g} is below the smallest allowed, {low:g}" + (f" ({why})" if why else "")
        )
    return value


# ------------------------------------------------------------------------------------------------
# Files


def read_text_capped(path: Path, limit_bytes: int = MAX_FILE_BYTES, expected: str = "YAML or JSON") -> str:
    """The UTF-8 text of ``path``; a missing, unreadable, oversized or binary file is a SpecError.
    ``expected`` names what the file should hold (a binary file's message ends "expected
    ``expected``"): YAML or JSON for the spec files, a shell script for a launch, TOML, Python."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(limit_bytes + 1)
    except FileNotFoundError:
        raise SpecError(f"{short_path(path)}: file not found") from None
    except IsADirectoryError:
        raise SpecError(f"{short_path(path)}: is a directory, expected a file") from None
    except OSError as exc:
        raise SpecError(f"{short_path(path)}: cannot read: {exc.strerror or exc}") from None
    if len(raw) > limit_bytes:
        raise SpecError(f"{short_path(path)}: larger than {limit_bytes // 2**20} MiB; not an input file")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(
            f"{short_path(path)}: not UTF-8 text (byte {exc.start}); expected {expected}"
        ) from None


_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def printable(text: str) -> str:
    """``text`` with control and format characters (a newline, an ANSI escape, a right-to-left
    override) written as escapes (``\\n``, ``\\x1b``, ``\\u202e``), so that a name or path echoed in a
    message stays on one line and prints what it is; other text (accents, CJK, spaces) unchanged."""
    if text.isprintable():
        return text
    out = []
    for c in text:
        if c.isprintable() or unicodedata.category(c) == "Zs":
            out.append(c)
        elif c in _ESCAPES:
            out.append(_ESCAPES[c])
        else:
            code = ord(c)
            out.append(
                f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
            )
    return "".join(out)


def short_path(path: Path | str) -> str:
    """A path for an error message, shortened when absurdly long (a 10k-character name)."""
    text = str(path)
    return text if len(text) <= 200 else text[:100] + "..." + text[-50:]


def path_exists(path: Path) -> bool:
    """``path.exists()`` that treats over-long or otherwise invalid names as absent."""
    try:
        return path.exists()
    except (OSError, ValueError):
        return False


# ------------------------------------------------------------------------------------------------
# The JSON edge


def clean(data: Any, path: str = "") -> Any:
    """``data`` with round-off negatives (``-ROUND_OFF < x < 0``) as ``0.0``; a non-finite float is
    an error naming its key (results are finite by construction, so this is a bug, never hidden)."""
    if isinstance(data, numbers.Real) and not isinstance(data, numbers.Integral):
        data = float(data)  # numpy floats too
        if not math.isfinite(data):
            raise SpecError(
                f"result '{path or 'value'}' is not a finite number ({data}); please report this input"
            )
        return 0.0 if -ROUND_OFF < data < 0 else data
    if isinstance(data, dict):  # the same mapping type (plan files mark one-line rows by type)
        return type(data)({k: clean(v, f"{path}.{k}" if path else str(k)) for k, v in data.items()})
    if isinstance(data, (list, tuple)):
        return type(data)(clean(v, f"{path}[{i}]") for i, v in enumerate(data))
    return data


def json_text(data: Any, **kwargs: Any) -> str:
    """Strict JSON (no NaN or infinity) of :func:`clean` ``(data)``; ``kwargs`` go to ``json.dumps``."""
    return json.dumps(clean(data), allow_nan=False, **kwargs)


# ------------------------------------------------------------------------------------------------
# Cross-input rules


FP4_RUNS_ON = {
    "nvfp4": "NVFP4 runs on Blackwell and later: B200, GB200, B300, GB300",
    "mxfp4": "MXFP4 runs on NVIDIA Blackwell and AMD CDNA 4: B200, GB200, B300, GB300, MI355X",
}
"""The FP4 precisions (:data:`planner.inputs.job_spec.FP4_PRECISIONS`) and where each runs, for
:func:`require_precision`'s message."""


def require_precision(cluster: Any, job: Any, where: str) -> None:
    """Every GPU of ``cluster`` has a tensor-core peak for the job's precision (a V100 has no bf16),
    FP8 tensor cores for FP8 (an ``fp8`` peak in its GPU file; Transformer Engine's
    ``check_fp8_support`` asks for compute capability 8.9 or later, so an A100 cannot run
    ``--fp8-format``), FlashAttention-2 kernels for ``attention_impl`` ``flash2`` (Ampere and
    later: cost_models.attention.FUSED_ATTENTION_MIN_COMPUTE_CAPABILITY) and runs its FP8 recipe (MXFP8 from Blackwell on: :data:`planner.inputs.job_spec.MXFP8_MIN_COMPUTE_CAPABILITY`)
    or NVFP4 (a GPU file with an ``fp4`` peak: :data:`planner.inputs.job_spec.NVFP4_MIN_COMPUTE_CAPABILITY`;
    not an AMD Instinct GPU, whose FP4 is the OCP MX format only) or MXFP4 (an ``fp4`` peak:
    Blackwell, AMD CDNA 4)."""
    from planner.inputs.cluster_spec import compute_capability_major, is_amd_instinct
    from planner.inputs.job_spec import COMPUTE_DTYPE, MXFP8_MIN_COMPUTE_CAPABILITY

    dtype = COMPUTE_DTYPE.get(job.precision, job.precision)
    for g in cluster.groups:
        if not g.gpu.supports(dtype):
            have = ", ".join(k for k, v in g.gpu.peak_flop_per_s if v) or "none"
            raise SpecError(
                f"{where}: GPU {g.gpu.name} has no {dtype} tensor-core peak for --precision {job.precision}; "
                f"it has: {have}"
            )
        if job.attention_impl == "flash2" and 0 < compute_capability_major(g.gpu.name) < 8:
            raise SpecError(
                f"{where}: attention_impl flash2: GPU {g.gpu.name} cannot run FlashAttention-2 (Ampere, "
                "compute capability 8.0, and later); use fused (Transformer Engine runs unfused "
                "attention there) or unfused"
            )
        if job.precision == "fp8" and not g.gpu.supports("fp8"):
            raise SpecError(
                f"{where}: GPU {g.gpu.name} has no FP8 tensor cores for --precision fp8 (Transformer "
                "Engine runs FP8 from compute capability 8.9 on: Ada, Hopper, Blackwell); use bf16"
            )
        if (
            job.precision == "fp8"
            and job.fp8_recipe == "mxfp8"
            and compute_capability_major(g.gpu.name) < MXFP8_MIN_COMPUTE_CAPABILITY
        ):
            raise SpecError(
                f"{where}: fp8_recipe mxfp8: GPU {g.gpu.name} has no MXFP8 (it runs on Blackwell, compute "
                "capability 10.0, and later); use tensorwise, delayed or blockwise"
            )
        if job.precision in FP4_RUNS_ON and not g.gpu.supports("fp4"):
            raise SpecError(
                f"{where}: GPU {g.gpu.name} has no FP4 tensor cores for --precision {job.precision} "
                f"({FP4_RUNS_ON[job.precision]}); use fp8 or bf16"
            )
        if job.precision == "nvfp4" and is_amd_instinct(g.gpu.name):
            raise SpecError(
                f"{where}: GPU {g.gpu.name} runs the OCP MX FP4 format on its FP4 tensor cores, not NVIDIA's "
                "NVFP4: its FP4 is MXFP4 (--precision mxfp4)"
            )


SIGNIFICANT_DIGITS = 4


def rounded(data, digits: int = SIGNIFICANT_DIGITS):
    """``data`` with every float rounded to ``digits`` significant digits (ints, booleans and
    strings unchanged): the one rounding of predictions in plan files and ``--json``. Inputs
    (model, cluster, job) are never rounded, so a plan file reads back to the same problem."""
    if isinstance(data, float):
        return float(f"{data:.{digits}g}") if math.isfinite(data) else data
    if isinstance(data, dict):
        return {k: rounded(v, digits) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [rounded(v, digits) for v in data]
    return data
