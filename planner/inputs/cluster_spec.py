"""The hardware specifications: a GPU type (:class:`GPUSpec`, with its achieved-efficiency data
:class:`EfficiencySpec`), a set of identical nodes (:class:`NodeGroup`, with the NVLink wiring of
nodes without NVSwitch, :class:`NVLinkMesh`) and a cluster of node groups (:class:`ClusterSpec`),
as frozen, keyword-only values (STYLE.md lesson 1).

Built by :mod:`planner.profiles.hardware` from the GPU and cluster files; units are in the field
names and SI inside (bytes, seconds, FLOP/s, bytes/s).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True, slots=True)
class EfficiencySpec:
    """Achieved-throughput data of one GPU type (calibrated; see docs/calibration.md).

    GEMM efficiency follows a saturating curve in the GEMM's size:
    ``eff(F) = gemm_efficiency_max * F / (F + gemm_half_efficiency_flop)`` where F is the FLOP
    count of one GEMM call, so small (e.g. tensor-parallel-sliced) GEMMs run below peak. This
    is the smooth form of Calculon's piecewise efficiency-by-size tables (Isaev et al., SC'23).
    """

    gemm_efficiency_max: float
    """Fraction of dense peak reached by large GEMMs."""
    gemm_half_efficiency_flop: float
    """GEMM size (FLOP per call) at which efficiency is half the maximum."""
    attention_efficiency: float
    """Fraction of dense peak reached by fused (flash) attention kernels, forward."""
    hbm_efficiency: float
    """Fraction of HBM bandwidth reached by memory-bound elementwise kernels."""
    fp8_gemm_speedup: float
    """Achieved speed-up of an FP8 GEMM over the same BF16 GEMM (1.0 where FP8 is unsupported)."""
    kernel_overhead_s: float
    """Fixed launch and synchronisation overhead per transformer layer per pass, seconds."""
    comm_overlap_slowdown: float = 0.0
    """Compute time added per second of communication hidden under it: NCCL kernels take SMs (an
    all-gather launches 24 CTAs on a 132-SM H100, ~18%) and HBM bandwidth from the GEMMs they overlap
    (Lee et al. 2025, "Characterizing Compute-Communication Overlap in GPU-Accelerated Distributed
    Deep Learning", arXiv:2507.03114). Charged on FSDP/ZeRO-2 prefetch and the overlapped
    data-parallel reduction and gather; fitted per GPU family (scripts/calibrate.py)."""
    grouped_gemm_efficiency: float = 1.0
    """An MoE layer's grouped expert GEMMs' speed relative to one dense GEMM of the same total FLOPs
    and tile-padded rows (cost_models.moe.grouped_linear_s). 1.0 is the kernel: a fused grouped
    kernel (``torch._grouped_mm``) and Transformer Engine's ``GroupedLinear`` (one cuBLAS GEMM per
    local expert over four streams, ``multi_stream_cublas_gemm``) both run at that price from about
    a thousand tokens per expert, measured on an H100 and an H200 (docs/calibration.md, "MoE
    grouped GEMMs in three passes"). Fitted per GPU family and software release on its MoE runs
    (0.39-0.72), it therefore stands for the MoE layer's costs not yet priced on their own (host
    synchronisation on token counts, permutation, router and dispatcher kernels), applied where the
    expert GEMMs are."""
    host_launch_s: float = 0.0
    """Host (CPU) time to issue one kernel from an eager PyTorch module (Python, the dispatcher and
    the CUDA launch; 5-50 us per kernel, NVIDIA's CUDA Graphs documentation and Megatron-Core's
    ``--cuda-graph-impl`` help; 13.5-100 us per linear forward, TransformerEngine issue #2053). It
    bounds an MoE layer's pass from below, since the token dispatcher synchronises the host on the
    token counts every layer, so the host issues each whole layer after the GPU has drained
    (cost_models.moe.host_launches; Megatron-Core's MoE README, "CPU Overhead Bottleneck": reduce
    kernel launches by a smaller TP or a larger micro-batch); 0 = never binding. Fitted per GPU
    family on its MoE runs."""


LINEAR_MIXER_KERNELS = ("ssd_scan", "gated_delta_rule", "kda")
"""Keys of a GPU file's ``linear_mixer_kernels``: Mamba-2's SSD chunked scan (mamba_ssm's
``mamba_chunk_scan_combined``), the chunked gated delta rule (flash-linear-attention's
``chunk_gated_delta_rule``) and Kimi Delta Attention (flash-linear-attention's ``chunk_kda``)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class GPUSpec:
    """One GPU type: capacity, peaks, and achieved-efficiency data."""

    name: str
    """Catalogue name, e.g. ``h100-sxm5-80gb``."""
    memory_bytes: int
    """HBM capacity in bytes."""
    peak_flop_per_s: tuple[tuple[str, float], ...]
    """Dense (no sparsity) tensor-core peak per dtype, as (dtype, FLOP/s) pairs: bf16, fp16, fp8, tf32."""
    hbm_bandwidth_bytes_per_s: float
    """Peak HBM bandwidth."""
    memory_reserve_bytes: int
    """Memory not available to tensors: CUDA context, NCCL buffers, workspaces."""
    efficiency: EfficiencySpec
    """Achieved-throughput data."""
    source: str = ""
    """Citation for the numbers."""
    tdp_w: float = 0.0
    """Thermal design power (maximum board power) in watts, from the vendor datasheet; 0 when
    unknown (no energy estimate then)."""
    sm_count: int = 0
    """Streaming multiprocessors, from the vendor's architecture whitepaper: the wave size of GEMM
    tiles (:func:`cost_models.compute.gemm_quantization`); 0 when unknown (no quantization)."""
    gemm_tile: tuple[int, int] | None = (256, 128)
    """Output tile (rows, columns) of one GEMM thread block, one per SM: NVIDIA's "Matrix
    Multiplication Background User's Guide" example for A100 (256 x 128 tiles, one thread block per
    SM, a wave of 108 tiles). None (``gemm_tile: null`` in a GPU file): no tile or wave
    quantization, as Hopper's GEMM kernels measure (docs/calibration.md, "Linear-layer GEMMs in their
    three passes"; the shipped Hopper files keep 128 x 128 tiles, and the docs say why)."""
    gemm_stream_bytes_per_s: float = 0.0
    """Rate at which a GEMM with few rows per weight (an MoE grouped GEMM at tens of tokens per
    expert) streams its weights, measured (``gemm_stream_gb_per_s`` in a GPU file; docs/calibration.md,
    "MoE grouped GEMMs in three passes"); 0 when unmeasured: the HBM bandwidth times ``hbm_efficiency``
    (:meth:`gemm_stream_bandwidth`). Hopper's kernels stream at about 2.4-2.7 TB/s on an H100 and on
    an H200 alike, whose HBM is 1.4x faster: the limit is the SMs' loads, not HBM."""
    attention_kernel_speed: tuple[float, float] = (1.0, 1.0)
    """Speed of this GPU's fused full-attention kernels (forward, backward) relative to the same
    kernels on the other GPUs of its efficiency family at the same tensor-core peak: Blackwell
    Ultra's doubled exponential (SFU) throughput makes cuDNN's causal attention 1.18x (forward) and
    1.10x (backward) faster on a GB300 than on a GB200 of equal BF16 peak
    (hardware_profiles/gpus/gb300.yaml cites the measurement). 1 elsewhere."""
    host_link_bytes_per_s: float = 0.0
    """Bytes per second one GPU moves to host memory, or back, in each direction at once: the PCIe
    link to the host CPU, or NVLink-C2C on a Grace superchip (``host_link_gb_per_s`` in a GPU
    file; each shipped file cites its datasheet). Prices activation offloading
    (``ParallelConfig.offload_layers``); 0 when unknown (no offloading planned on this GPU)."""
    local_attention_kernel_speed: tuple[float, float] = (1.0, 1.0)
    """The same for sliding-window (local) attention kernels, which are bound by memory and latency
    more than by the exponentials (GB300 over GB200: 1.04 / 1.06 at a 128-token window)."""
    linear_mixer_efficiency: tuple[tuple[str, float], ...] = ()
    """Measured fraction of the dense 16-bit tensor-core peak that the chunked Triton kernels of the
    linear-time token mixers reach on their own FLOP count (:data:`LINEAR_MIXER_KERNELS`: the Mamba-2
    SSD scan, the gated delta rule, KDA), as (kernel, fraction) pairs (``linear_mixer_kernels`` in a
    GPU file, which cites each measurement; :mod:`planner.calibration.mixer_kernels` derives them). A
    kernel without one is priced at the roofline of its FLOPs and bytes (:mod:`cost_models.scans`)."""

    def peak(self, dtype: str) -> float:
        """Dense peak FLOP/s for ``dtype``; raises ``KeyError`` when unsupported."""
        value = dict(self.peak_flop_per_s).get(dtype)
        if not value:
            raise KeyError(f"{self.name} has no {dtype} tensor-core peak")
        return value

    def supports(self, dtype: str) -> bool:
        """Whether the GPU has a tensor-core peak for ``dtype``."""
        return bool(dict(self.peak_flop_per_s).get(dtype))

    def mixer_kernel_efficiency(self, kernel: str) -> float:
        """:attr:`linear_mixer_efficiency` of ``kernel``; 0 when unmeasured (the roofline applies)."""
        return dict(self.linear_mixer_efficiency).get(kernel, 0.0)

    def gemm_stream_bandwidth(self) -> float:
        """Bytes per second a weight-streaming GEMM reaches (:attr:`gemm_stream_bytes_per_s`, or the
        HBM bandwidth times ``hbm_efficiency`` when unmeasured)."""
        return self.gemm_stream_bytes_per_s or self.hbm_bandwidth_bytes_per_s * self.efficiency.hbm_efficiency


@dataclass(frozen=True, kw_only=True, slots=True)
class NVLinkMesh:
    """Point-to-point NVLink wiring of a node without NVSwitch (DGX-1's hybrid cube-mesh): GPUs
    reach only some peers, over one or more bonded links, so a collective's bandwidth depends on
    which GPUs form the group (:func:`cost_models.communication.mesh_ring_channels`)."""

    links: tuple[tuple[int, ...], ...]
    """``links[i][j]``: NVLink links between local GPUs i and j (``nvidia-smi topo -m``'s ``NV#``);
    symmetric, zero on the diagonal, one row per GPU of the node."""
    link_bandwidth_bytes_per_s: float
    """Unidirectional bandwidth of one link (V100 NVLink2: 25 GB/s each way)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class NodeGroup:
    """A set of identical nodes: one GPU type and one set of links."""

    gpu: GPUSpec
    """GPU type of every node in the group."""
    num_nodes: int
    """Number of nodes."""
    gpus_per_node: int
    """GPUs per node."""
    intra_node_bandwidth_bytes_per_s: float
    """Unidirectional NVLink (or fabric) bandwidth per GPU inside an NVLink domain."""
    intra_node_latency_s: float
    """Per-step latency of a collective inside the NVLink domain."""
    inter_node_bandwidth_bytes_per_s: float
    """Unidirectional network bandwidth per GPU across NVLink domains."""
    inter_node_latency_s: float
    """Per-step latency of a collective across the network."""
    nvlink_domain_size: int
    """GPUs reachable over NVLink (8 for DGX, 72 for GB200 NVL72)."""
    intra_node_efficiency: float = 0.8
    """Achieved fraction of NVLink bandwidth by NCCL collectives."""
    inter_node_efficiency: float = 0.9
    """Achieved fraction of network bandwidth by NCCL collectives."""
    nvlink_mesh: NVLinkMesh | None = None
    """Point-to-point NVLink wiring when the node has no NVSwitch; ``None``: every GPU pair gets
    ``intra_node_bandwidth_bytes_per_s`` (NVSwitch nodes)."""
    host_memory_bytes: float = 0.0
    """System (CPU) memory of one node (``host_memory_gb`` in a cluster file; each shipped
    template cites its datasheet). Holds the activations a plan offloads
    (``ParallelConfig.offload_layers``): :attr:`cost_models.estimate.Estimate.host_fits` checks
    them against :data:`cost_models.memory.HOST_MEMORY_USABLE_FRACTION` of it. 0 when unknown
    (nothing checked)."""

    @property
    def num_gpus(self) -> int:
        """GPUs in this group."""
        return self.num_nodes * self.gpus_per_node


@dataclass(frozen=True, kw_only=True, slots=True)
class ClusterSpec:
    """A cluster: one or more node groups, ranks numbered group by group."""

    name: str
    """Template or file name, for display."""
    groups: tuple[NodeGroup, ...]
    """Node groups in rank order; several groups form a heterogeneous cluster."""
    gpu_hour_price_usd: float | None = None
    """Price of one GPU-hour in US dollars (cluster file key ``gpu_hour_price_usd``), if given."""

    @property
    def num_gpus(self) -> int:
        """Total GPUs."""
        return sum(g.num_gpus for g in self.groups)

    @property
    def is_heterogeneous(self) -> bool:
        """Whether the groups differ in GPU type or links."""
        return (
            len(
                {
                    (g.gpu.name, g.gpus_per_node, g.inter_node_bandwidth_bytes_per_s, g.nvlink_mesh)
                    for g in self.groups
                }
            )
            > 1
        )

    def group_of_rank(self, rank: int) -> NodeGroup:
        """Node group holding global ``rank``."""
        start = 0
        for g in self.groups:
            if rank < start + g.num_gpus:
                return g
            start += g.num_gpus
        raise IndexError(f"rank {rank} outside a cluster of {self.num_gpus} GPUs")


def compute_capability_major(gpu_name: str) -> int:
    """CUDA compute-capability major of a GPU preset (NVIDIA's CUDA GPUs table,
    developer.nvidia.com/cuda-gpus), for what depends on the architecture: Megatron-LM's
    ``get_device_arch_version() < 10`` in validate_args, and kernels written for one generation.
    Volta (V100) 7, Turing (T4, 7.5) 7, Ampere and Ada (A100, A10, A30, A40, L4, L40S) 8, Hopper (H100, H200, H800,
    GH200) 9, Blackwell (B100, B200, GB200, B300, GB300) 10; 0 for a GPU without a CUDA compute
    capability (AMD Instinct) or one not named here, which counts as before Blackwell."""
    name = gpu_name.lower()
    table = (
        (10, ("b100", "b200", "gb200", "b300", "gb300")),
        (9, ("h100", "h200", "h800", "gh200")),
        (8, ("a100", "a10", "a30", "a40", "l40", "l4")),
        (7, ("v100", "t4")),
    )
    for major, keys in table:
        if any(k in name for k in keys):
            return major
    return 0


def is_amd_instinct(gpu_name: str) -> bool:
    """Whether a GPU preset is an AMD Instinct accelerator (``mi`` and a model number: mi300x,
    mi355x), whose FP4 and FP8 block formats are the OCP Microscaling ones, not NVIDIA's NVFP4."""
    name = gpu_name.lower()
    return name.startswith("mi") and name[2:3].isdigit()
