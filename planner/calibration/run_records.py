"""How a published run's record becomes planner inputs (:func:`planner.calibration.cases.cases`): the
source it counts under, the model, cluster and runtime choices (attention kernels, eager ops, FP8
recipe, MoE dispatcher, data-parallel overlap) its source implies, and the measured tokens/s per GPU
by the source's own FLOP counting. Every rule records what it assumed in the case's notes."""

from __future__ import annotations

import re

from cost_models.layers import model_flop_per_iteration
from planner.inputs.cluster_spec import compute_capability_major
from planner.inputs.documents import preset_files
from planner.inputs.errors import PlannerError
from planner.inputs.job_spec import EAGER_OPS, JobSpec
from planner.inputs.model_spec import ModelSpec
from planner.inputs.models import load_model


def source_of(run: dict) -> str:
    """A run's source: its citation's title up to the first comma or parenthesis (one paper, one
    framework page, one repository document)."""
    title = str((run.get("source") or {}).get("title") or run["id"])
    for sep in (",", " ("):
        title = title.split(sep)[0]
    return title.strip()


SEQUENTIAL_REDUCTION_SOURCES = (
    "Narayanan et al. 2021",
    "Korthikanti et al. 2022",
    "DLPerf Megatron-LM",
    "Hagemann et al. 2023",
)
"""Megatron-LM as of Narayanan et al. 2021 and Korthikanti et al. 2022 all-reduced gradients after
the pipeline flush (Narayanan et al. 2021 Sec. 2.2 and 3.3: the data-parallel all-reduce follows
the last backward); overlap with backward (``--overlap-grad-reduce``) came with Megatron-Core's
distributed optimizer buckets in 2023. DLPerf's Megatron-LM runs (commit 8aa4619, January 2021)
use that release's default ``--DDP-impl local``, whose all-reduce follows the backward pass.
Hagemann et al. 2023's sweep ran Aleph Alpha's codebase, whose data-parallel all-reduce runs inside
``optimizer.step()`` after the last micro-batch (as released, Aleph-Alpha/scaling@737f855
``src/scaling/core/optimizer/optimizer.py``)."""


def deepspeed_bf16_optimizer(run: dict, precision: str) -> bool:
    """Whether a run trained with DeepSpeed's ``BF16_Optimizer``: BigScience's BF16 runs (BLOOM-176B
    and its reshaping runs; its FP16 runs used DeepSpeed's ZeRO stage 1 optimizer). That optimizer
    both accumulates gradients in fp32 with a separate add (:func:`unfused_accumulation`) and
    all-reduces them before its sharded step (:func:`sharded_grad_reduce_of`)."""
    return source_of(run).startswith("BigScience") and precision == "bf16"


def unfused_accumulation(run: dict, precision: str, notes: list[str]) -> bool:
    """Whether a run added every micro-batch's weight gradients into its main gradients with a
    separate pass (``JobSpec.gradient_accumulation_fusion`` False; priced by
    :func:`cost_models.estimate.unfused_accumulation_bytes`).

    * Megatron-LM's ``--no-gradient-accumulation-fusion`` where the source's launch sets it (the
      Megatron-LM CI rows).
    * BigScience's BF16 runs: DeepSpeed's ``BF16_Optimizer`` keeps fp32 gradients and adds each
      micro-batch's bf16 gradients into them: the pipeline engine calls
      ``optimizer.update_hp_grads(clear_lp_grads=False)`` after every micro-batch's backward
      (deepspeed ``runtime/pipe/engine.py`` ``_exec_backward_pass``), which for every parameter
      adds ``lp.grad`` into the fp32 ``hp_grad`` (``runtime/bf16_optimizer.py``). The chronicles
      say so of the switch (bigscience-workshop/bigscience ``train/tr11-176B-ml/chronicles-prequel.md``,
      "Rebalancing layers": the "BF16 optimizer that was just written to accumulate gradients in
      fp32 ... is more memory heavy and is a bit slower"). Their FP16 runs accumulate in fp16,
      in the gradients autograd writes: no extra pass."""
    par = run.get("parallel") or {}
    if "--no-gradient-accumulation-fusion" in str(par.get("notes") or ""):
        notes.append("gradient accumulation unfused (--no-gradient-accumulation-fusion)")
        return True
    if deepspeed_bf16_optimizer(run, precision):
        notes.append(
            "gradient accumulation unfused (DeepSpeed BF16_Optimizer: fp32 gradients, one add per micro-batch)"
        )
        return True
    return False


ALL_REDUCE_SHARDED_SOURCES = ("Hagemann et al. 2023",)
"""Sources whose ZeRO-1 optimizer all-reduced the whole gradient before each rank's sharded step
(``JobSpec.sharded_grad_reduce`` ``all_reduce``): Aleph Alpha's codebase, whose ``Optimizer.step``
calls ``allreduce_gradients`` over the data-parallel group when ``zero`` is set and all-gathers the
updated shards in ``step_sequel`` (Aleph-Alpha/scaling ``src/scaling/core/optimizer/optimizer.py``).
BigScience's BF16 runs are matched by precision in :func:`sharded_grad_reduce_of`."""


def sharded_grad_reduce_of(run: dict, precision: str, notes: list[str]) -> str:
    """How a run's ZeRO-1 optimizer reduced gradients (``JobSpec.sharded_grad_reduce``).

    * BigScience's BF16 runs (BLOOM-176B and its reshaping runs): DeepSpeed's pipeline engine with
      the ``BF16_Optimizer`` all-reduces the optimizer's fp32 gradients
      (``deepspeed/runtime/pipe/engine.py`` ``_exec_reduce_grads`` -> ``_bf16_reduce_grads`` ->
      ``buffered_allreduce_fallback``, microsoft/DeepSpeed as of 2022-07, 735406e5), then each rank
      steps its partition and all-gathers the bf16 parameters (``bf16_optimizer.py`` ``step``,
      ``all_gather_dp_groups``). Their FP16 runs used DeepSpeed's ZeRO stage 1 optimizer, whose
      ``average_tensor`` reduces each gradient slice to its owner: a reduce-scatter.
    * :data:`ALL_REDUCE_SHARDED_SOURCES`."""
    if deepspeed_bf16_optimizer(run, precision) or source_of(run).startswith(ALL_REDUCE_SHARDED_SOURCES):
        notes.append("ZeRO-1 gradients all-reduced before the sharded step (not reduce-scattered)")
        return "all_reduce"
    return "reduce_scatter"


def zero_stage_of(par: dict) -> int | None:
    """A record's ZeRO stage: the number, or the one its text starts with (BLOOM's README row:
    ``1 (DeepSpeed BF16_Optimizer implements ZeRO-1-equivalent; ZERO_STAGE=0 flag)``); None when
    the record gives none or names a sharding in words (``FSDP2``)."""
    value = par.get("zero_stage")
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    found = re.match(r"\s*(\d)\b", str(value or ""))
    return int(found.group(1)) if found else None


def embedding_slots(run: dict) -> bool:
    """Whether a run's pipeline split gave each embedding a layer's slot: DeepSpeed's
    ``--pp-partition-method 'type:transformer|embedding'`` (Megatron-DeepSpeed ``GPTModelPipe``)
    balances the transformer blocks and the two tied embedding layers as equal units, so with
    ``L + 2`` divisible by pp the first stage holds the embedding and one block fewer, the last
    one block fewer and the output embedding: BLOOM-176B's 70 layers on pp 12 ran
    ``[embed | 5 blocks], [6 blocks] x 10, [5 blocks | embed]`` (bigscience-workshop/bigscience
    ``train/tr11-176B-ml/README.md``, "Replica setup"; introduced on 2022-02-28,
    ``chronicles-prequel.md`` "Rebalancing layers"; before it the default ``type:transformer``
    counted blocks only). The same split as Megatron-LM's
    ``--account-for-embedding-in-pipeline-split`` with ``--account-for-loss-in-pipeline-split``
    (:func:`cost_models.parallel.account_for_split`)."""
    return "type:transformer|embedding" in str((run.get("parallel") or {}).get("notes") or "")


def overlapped_reduction(run: dict) -> bool:
    """Whether a run's data-parallel gradient reduction overlapped backward: not with DeepSpeed's
    pipeline engine (``TrainSchedule`` issues ``ReduceGrads`` after every micro-batch's backward,
    deepspeed/runtime/pipe/schedule.py; BLOOM, Megatron-DeepSpeed), nor with the Megatron-LM of
    :data:`SEQUENTIAL_REDUCTION_SOURCES`, unless the run records ``parallel.ddp_impl: torch``: that
    Megatron-LM wraps the model in PyTorch's DistributedDataParallel, runs every micro-batch but the
    last under ``no_sync()`` (``forward_backward_no_pipelining``, megatron/schedules.py at
    de7dc40f88) and PyTorch's gradient buckets all-reduce during the last backward (Narayanan et
    al. 2021's Table 1 runs up to 18B: ``DDP=torch`` in examples/sc21/run_table_1.sh). A record
    whose recipe leaves Megatron-Core's ``DistributedDataParallelConfig.overlap_grad_reduce`` at its
    default False says so with ``parallel.overlap_grad_reduce: false`` (AMD's MLPerf v5.1 Llama 3.1
    8B implementation builds its ``DistributedDataParallelConfig`` without it): reduced after the
    last backward."""
    par = run.get("parallel") or {}
    if par.get("overlap_grad_reduce") is False:
        return False
    if par.get("framework") == "deepspeed" or str(run["id"]).startswith("bloom176b"):
        return False
    if par.get("ddp_impl") in ("torch", "local"):
        return par["ddp_impl"] == "torch"
    return not source_of(run).startswith(SEQUENTIAL_REDUCTION_SOURCES)


SCATTER_GATHER_SOURCES = ("Narayanan et al. 2021", "Korthikanti et al. 2022", "BigScience", "vTrain")
"""Sources whose pipeline sends were scattered over the tensor-parallel ranks
(``JobSpec.pipeline_scatter_gather``): the Megatron-LM of 2021-2022, where the scatter/gather
optimization (Narayanan et al. 2021, Sec. 4.1) was on by default from commit 72e4230bb5
(2021-02-16, "Turn scatter-gather optimization on by default") until Megatron-Core took over the
pipeline code (39b83c7953, 2023-01-31), and BigScience's Megatron-DeepSpeed, whose DeepSpeed
``PipelineEngine`` partitions the activations and gradients it sends whenever the model is
tensor-parallel (``is_pipe_partitioned = is_grad_partitioned = is_model_parallel``,
``deepspeed/runtime/pipe/engine.py`` of 2022); vTrain's validation runs, Megatron-DeepSpeed on the
same engine (its data/README.md). DLPerf's Megatron-LM (8aa4619, 2021-03, a release
branch without commit 27fc468964 that introduced the chunking) sent whole tensors."""


def pipeline_scatter_gather(run: dict, notes: list[str]) -> bool:
    """Whether a run's pipeline sends were scattered over tp (:data:`SCATTER_GATHER_SOURCES`);
    noted only where it matters (tp > 1 and pp > 1)."""
    if not source_of(run).startswith(SCATTER_GATHER_SOURCES):
        return False
    par = run.get("parallel") or {}
    if (par.get("tp") or 1) > 1 and (par.get("pp") or 1) > 1:
        notes.append("pipeline sends scattered over tp and all-gathered by the receiver")
    return True


UNFUSED_ATTENTION_SOURCES = (
    "Narayanan et al. 2021",
    "Korthikanti et al. 2022",
    "DLPerf Megatron-LM",
    "DLPerf OneFlow-GPT",
    "BigScience",
    "vTrain",
    "Qi et al. 2024",
)
"""Sources whose runs materialised the attention score matrix (``JobSpec.attention_impl``
``unfused``): they predate FlashAttention (Dao et al., May 2022) in their frameworks. Megatron-LM's
``ParallelAttention`` of 2021 (megatron/model/transformer.py at de7dc40f88: ``baddbmm``,
``FusedScaleMaskSoftmax``, dropout, ``bmm``), which Korthikanti et al. 2022 (Sec. 4.1, the 5as/h
activation term) and DLPerf (Megatron-LM 8aa4619, January 2021) ran; BigScience's
Megatron-DeepSpeed fork of 2022, the same code; vTrain's validation runs (Megatron-DeepSpeed, whose
attention vTrain's profiled model copies: ``ShardedGptSelfAttention`` in src/model/gpt_modeling.py,
``baddbmm``, ``FusedScaleMaskSoftmax``, dropout, ``bmm``); Qi et al. 2024's zero-bubble runs (their
Megatron-LM fork's legacy GPT model: ``examples/pretrain_zero_bubble.sh`` at 77b9eed9 sets neither
``--use-flash-attn`` nor ``--use-mcore-models``, and ``--transformer-impl`` defaults to local); OneFlow-GPT's ``bmm`` + fused scale-mask-softmax-
dropout (DLPerf, 2021), priced as Megatron's."""


FLASH2_ATTENTION_SOURCES = ("pytorch/torchtitan", "mosaicml/llm-foundry", "Hagemann et al. 2023")
"""Sources whose runs below Blackwell used FlashAttention-2 kernels (``JobSpec.attention_impl``
``flash2``, priced below the fused kernel from Hopper on: cost_models.attention.FLASH2_SPEED).
torchtitan calls PyTorch SDPA with its own backend order: flash attention (FlashAttention-2) first,
cuDNN first only on compute capability 10 (torchtitan/models/attention.py
``ScaledDotProductAttention._init_backend`` at f4048f8e, 2025-06; ``F.scaled_dot_product_attention``
with PyTorch's default order, FlashAttention-2 first on Hopper in its 2.6 nightlies, at ba246978,
2024-12, the benchmarks' dates); cuDNN first everywhere only from torchtitan 0.2.2 (2026-02), the
release planner's torchtitan export targets. llm-foundry's MPT benchmarks ran llm-foundry's Triton
FlashAttention (its benchmark sweep, scripts/train/benchmarking/sweep.sh at 5e85bd62, passes no
``--attn_impl``, and submit_benchmarks.py defaults to ``triton``, the kernel that carries MPT's
ALiBi bias): a FlashAttention kernel of the pre-Hopper generation like FlashAttention-2, priced as
it for want of a measured speed of its own (docs/calibration.md, "The measured attention kernels
are FlashAttention-2"). Hagemann et al. 2023's rows are those of the sheets' ``flash_attention2``
kernels (FlashAttention-2, with or without their RMSNorm kernel)."""


def attention_impl_of(run: dict, notes: list[str]) -> str:
    """``unfused`` for the runs of :data:`UNFUSED_ATTENTION_SOURCES` and those whose recipe sets
    Megatron-Core's ``--attention-backend unfused`` (``parallel.attention_backend``), ``flash2`` for
    the runs of :data:`FLASH2_ATTENTION_SOURCES`, else ``fused``."""
    backend = (run.get("parallel") or {}).get("attention_backend")
    if backend is not None and backend != "unfused":
        raise PlannerError(f"parallel.attention_backend {backend!r}: only 'unfused' is recorded")
    if backend == "unfused":
        notes.append("unfused attention (--attention-backend unfused)")
        return "unfused"
    if source_of(run).startswith(UNFUSED_ATTENTION_SOURCES):
        notes.append("unfused attention (score matrix in HBM; pre-FlashAttention software)")
        return "unfused"
    gpu = str(run.get("hardware", {}).get("gpu", ""))
    if source_of(run).startswith(FLASH2_ATTENTION_SOURCES) and compute_capability_major(gpu) < 10:
        notes.append("FlashAttention-2 kernels (PyTorch SDPA's default / flash-attn 2)")
        return "flash2"
    return "fused"


TORCHTITAN_FUSED_RMSNORM = ("torchtitan_a100_llama_3_8b_", "torchtitan_a100_llama_2_13b_")
"""torchtitan runs whose RMSNorm was a fused kernel although the model ran eager: the 64-A100 tables
of pytorch/torchtitan docs/performance.md (commit 0413364) use the presets of that commit, whose
``train_configs/llama3_8b.toml`` and ``llama2_13b.toml`` set ``norm_type = "fused_rmsnorm"`` (a
Triton kernel, ``torchtitan/models/norms.py``) while ``llama3_70b.toml`` and ``llama2_70b.toml`` set
``"rmsnorm"``; every preset has ``compile = false``."""


def eager_ops_of(run: dict, notes: list[str]) -> tuple[str, ...]:
    """The elementwise op groups a run executed as eager PyTorch (``JobSpec.eager_ops``).

    The rule: llm-foundry's Composer runs are eager (no ``compile_config`` in its benchmark
    launches: ``scripts/train/benchmarking/submit_benchmarks.py`` and ``yamls/pretrain/mpt-*.yaml``
    at 5e85bd6; MPT's ``LPLayerNorm`` and GELU are one ATen kernel each, so they cost what the
    fused kernels do). torchtitan runs are compiled when their record mentions ``compile``
    (``FSDP + torch.compile`` and the like in the locator or notes, unless it says ``eager``; async
    TP requires it, ``torchtitan/parallelisms/parallelize_llama.py`` at 9dec370: "Async TP requires
    --training.compile"), else eager in every group, less ``norm`` for the runs of
    :data:`TORCHTITAN_FUSED_RMSNORM`. Hagemann et al. 2023's sheets name the kernels of each trial:
    RMSNorm is eager in the ``flash_attention2`` rows and fused in the ``flash_attention2 + RMS
    kernel`` ones (the record's locator quotes the label). Every other run is Megatron-LM,
    NeMo/Megatron-Bridge, Megatron-DeepSpeed or OneFlow, with fused kernels (no note). The
    inferred groups are recorded in ``notes``."""
    par = run.get("parallel") or {}
    rid = str(run["id"])
    if source_of(run).startswith("Hagemann et al. 2023"):
        if "RMS kernel" in str((run.get("source") or {}).get("locator") or ""):
            return ()
        notes.append("RMSNorm eager (the sheet's 'flash_attention2' kernel, without its RMS kernel)")
        return ("norm",)
    if par.get("framework") == "composer":
        notes.append(
            "eager PyTorch (Composer, no torch.compile): norm, rope, activation eager (MPT's LayerNorm "
            "and GELU are one ATen kernel each and it has no RoPE: no extra bytes)"
        )
        return EAGER_OPS
    if not (rid.startswith("torchtitan") or par.get("framework") == "torchtitan"):
        return ()
    text = f"{par.get('notes') or ''} {(run.get('source') or {}).get('locator') or ''}"
    if re.search(r"\bcompile\b", text) and "eager" not in text:
        notes.append("elementwise ops fused (torch.compile in the source)")
        return ()
    if rid.startswith(TORCHTITAN_FUSED_RMSNORM):
        notes.append("eager PyTorch (no torch.compile): rope, activation eager; fused_rmsnorm preset")
        return tuple(op for op in EAGER_OPS if op != "norm")
    notes.append("eager PyTorch (no torch.compile in the source): norm, rope, activation eager")
    return EAGER_OPS


PRESET_CHECKS = (
    ("num_layers", "num_layers"),
    ("hidden_size", "hidden_size"),
    ("num_attention_heads", "num_attention_heads"),
    ("num_query_groups", "num_query_groups"),
    ("vocab_size", "vocab_size"),
)
"""A record's model fields that must agree with the preset it names (``model.preset``): (record key,
ModelSpec field)."""

PRESET_MOE_CHECKS = (
    ("num_experts", "num_experts"),
    ("topk", "moe_router_topk"),
    ("moe_ffn_hidden_size", "moe_ffn_hidden_size"),
    ("moe_shared_expert_intermediate_size", "moe_shared_expert_intermediate_size"),
)
"""The same for the record's ``model.moe`` block."""


def model_of(run_id: str, mb: dict, notes: list[str]) -> ModelSpec:
    """The run's model: the planner preset ``model.preset`` names, else built from the record's
    dimensions (a GPT / Llama-like decoder; MoE, MLA, head width and sliding windows from
    ``model.moe``)."""
    if mb.get("preset") is not None:
        return _preset_model(mb, notes)
    h = mb["hidden_size"]
    heads = mb["num_attention_heads"]
    act = mb.get("activation") or "gelu"
    if mb.get("activation") is None:
        notes.append("activation gelu assumed")
    if act == "relu":
        act = "relu"
    ffn = mb.get("ffn_hidden_size")
    if ffn is None:
        ffn = 4 * h
        notes.append("ffn = 4h assumed")
    vocab = mb.get("vocab_size")
    if vocab is None:
        vocab = 256000 if act == "squared_relu" else 51200
        notes.append(f"vocab {vocab} assumed")
    llama_like = act == "swiglu" or (mb.get("num_query_groups") not in (None, heads))
    moe = mb.get("moe") or {}
    return ModelSpec(
        name=mb.get("name", run_id),
        num_layers=mb["num_layers"],
        hidden_size=h,
        ffn_hidden_size=ffn,
        num_attention_heads=heads,
        num_query_groups=mb.get("num_query_groups") or heads,
        **{
            "kv_channels": h // heads,
            "add_bias_linear": not (llama_like or act == "squared_relu"),
            **_attention_fields(str(moe.get("attention") or ""), mb["num_layers"], moe, notes),
        },
        vocab_size=vocab,
        max_position_embeddings=mb.get("seq_length") or 8192,
        activation=act,
        normalization="rmsnorm" if act == "swiglu" else "layernorm",
        position_embedding_type="rope" if llama_like or act == "squared_relu" else "learned_absolute",
        untie_embeddings_and_output_weights=llama_like or act == "squared_relu",
        num_experts=first_of(moe, "num_experts", "experts") or 0,
        moe_router_topk=first_of(moe, "topk", "top_k", "router_topk", "moe_router_topk") or 0,
        moe_ffn_hidden_size=first_of(moe, "moe_ffn_hidden_size", "expert_ffn_hidden_size", "ffn_hidden_size")
        or 0,
        moe_shared_expert_intermediate_size=first_of(
            moe,
            "moe_shared_expert_intermediate_size",
            "shared_expert_intermediate_size",
            "shared_ffn_hidden_size",
        )
        or 0,
        **_explicit_model_fields(mb),
    )


EXPLICIT_MODEL_FIELDS = (("qk_layernorm", bool), ("mtp_num_layers", int), ("attention_dropout", float))
"""ModelSpec fields a record's ``model`` block may give by name (the Megatron flags of its recipe:
``--qk-layernorm``, ``--mtp-num-layers``, ``--attention-dropout``); absent, the field's default."""


def _explicit_model_fields(mb: dict) -> dict:
    out = {}
    for key, kind in EXPLICIT_MODEL_FIELDS:
        value = mb.get(key)
        if value is None:
            continue
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        ok = isinstance(value, bool) if kind is bool else number and (kind is float or isinstance(value, int))
        if not ok or (key == "attention_dropout" and not 0 <= value < 1):
            raise PlannerError(
                f"model.{key} {value!r} is not a {'probability' if kind is float else kind.__name__}"
            )
        out[key] = kind(value)
    return out


def _preset_model(mb: dict, notes: list[str]) -> ModelSpec:
    """The planner preset a record names (``model.preset``), for shapes the record's keys cannot
    state (a hybrid layer pattern with its Mamba-2 mixers); the record's dimensions and MoE block
    must agree with it, so a record reads the same to a person and to the case builder. Only a
    built-in preset name is accepted (a runs file names no file to read)."""
    name = mb["preset"]
    if not isinstance(name, str) or name not in preset_files("planner.presets", "models"):
        raise PlannerError(f"model.preset {str(name)[:80]!r} is not a planner model preset")
    model = load_model(name)
    moe = mb.get("moe") or {}
    checks = [(f"model.{k}", mb.get(k), getattr(model, f)) for k, f in PRESET_CHECKS]
    checks += [(f"model.moe.{k}", moe.get(k), getattr(model, f)) for k, f in PRESET_MOE_CHECKS]
    for key, given, preset in checks:
        if given is not None and given != preset:
            raise PlannerError(f"{key} {given!r} disagrees with preset {name} ({preset!r})")
    notes.append(f"model: preset {name}")
    return model


MLA_DEEPSEEK_V3 = {"q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope": 128, "qk_rope": 64, "v_head": 128}
"""DeepSeek-V3's MLA dimensions (arXiv:2412.19437 Sec. 4.2; its config.json), which Kimi K2 keeps
(arXiv:2507.20534, its config.json): used for runs whose source says 'DeepSeek-V3 style'."""


def _attention_fields(text: str, num_layers: int, moe: dict, notes: list[str]) -> dict:
    """ModelSpec fields for what a run's ``model.moe.attention`` note and ``first_k_dense_layers``
    say (the calibration file records the attention shape of models whose heads are not h / heads):
    MLA with its ranks, an explicit head dimension, alternating sliding-window layers, attention
    sinks and biased linear layers."""
    out: dict = {}
    if text.startswith("MLA"):
        dims = {
            k: int(v) for k, v in re.findall(r"(q_lora_rank|kv_lora_rank|qk_nope|qk_rope|v_head) (\d+)", text)
        }
        if not dims and "DeepSeek-V3 style" in text:
            dims = dict(MLA_DEEPSEEK_V3)
            notes.append("MLA dimensions of DeepSeek-V3 assumed")
        if set(dims) != set(MLA_DEEPSEEK_V3):
            raise PlannerError(f"MLA note without its ranks: {text!r}")
        out.update(
            multi_latent_attention=True,
            q_lora_rank=dims["q_lora_rank"],
            kv_lora_rank=dims["kv_lora_rank"],
            qk_head_dim=dims["qk_nope"],
            qk_pos_emb_head_dim=dims["qk_rope"],
            v_head_dim=dims["v_head"],
        )
    head_dim = re.search(r"head_dim (\d+)", text)
    if head_dim:
        out["kv_channels"] = int(head_dim.group(1))
    window = re.search(r"alternating full / (\d+)-token sliding-window", text)
    if window:
        out.update(window_size=int(window.group(1)), window_attn_skip_freq=2)
    if "attention sinks" in text:
        out["softmax_type"] = "learnable"  # gpt-oss (Megatron-Bridge: softmax_type="learnable")
    if "biased linear layers" in text:
        out["add_bias_linear"] = True  # gpt-oss (Megatron-Bridge: add_bias_linear=True)
    dense = moe.get("first_k_dense_layers")
    if dense:
        out["moe_layer_pattern"] = (0,) * int(dense) + (1,) * (num_layers - int(dense))
    return out


MEGATRON_RECOMPUTE_MODULES = (
    "core_attn",
    "moe_act",
    "layernorm",
    "mla_up_proj",
    "mlp",
    "moe",
    "shared_experts",
)
"""Megatron-Core's ``--recompute-modules`` choices (megatron/training/arguments.py, megatron-core
0.19.2) that the calibration file's recompute notes name."""


def moe_runtime_of(rid: str, par: dict, notes: list[str]) -> dict:
    """The MoE dispatcher, all-to-all overlap and CUDA graphs of a run (JobSpec fields) from the
    keys the calibration file records from the recipes (``moe_token_dispatcher``,
    ``moe_a2a_overlap``, ``cuda_graphs``), else from the source's own words ("token dispatcher
    DeepEP"; ``_a2a`` / ``_deepep`` in Megatron-MoE-ModelZoo run names); alltoall, no overlap and no
    graphs otherwise (noted)."""
    text = f"{par.get('notes') or ''} {rid}".lower()
    dispatcher = par.get("moe_token_dispatcher")
    if dispatcher is None:
        if "deepep" in text or "hybridep" in text:
            dispatcher = "flex"
        elif "a2a" in text or "alltoall" in text:
            dispatcher = "alltoall"
        else:
            dispatcher = "alltoall"
            notes.append("alltoall token dispatcher assumed")
    graphs = par.get("cuda_graphs")
    if graphs in (None, "none", "null"):
        graphs = ()
    elif isinstance(graphs, str):
        graphs = (graphs,)
    if par.get("cuda_graphs") is None:
        notes.append("no CUDA graphs assumed")
    return {
        "moe_dispatcher": dispatcher,
        "moe_a2a_overlap": bool(par.get("moe_a2a_overlap")),
        "cuda_graph_scope": tuple(graphs),
    }


def fp8_recipe_of(run: dict, prec_text: str, notes: list[str]) -> str | None:
    """The FP8 scaling recipe of an FP8 run (``JobSpec.fp8_recipe``; None for a 16-bit run).

    The rule: the source's precision says ``mxfp8``, or current / tensorwise scaling (Megatron-Bridge
    ``fp8cs``), or it is a torchtitan float8 run (torchao's float8 linears scale dynamically, i.e.
    per-tensor current scaling: ``scaling_type_input = "dynamic"``, torchtitan's default); a
    Megatron-Bridge H100 "FP8" row whose performance recipe is a ``..._FP8_CS_...`` config is current
    scaling too. Every other FP8 run is delayed scaling: NeMo 24.07 ran Transformer Engine 1.x, whose
    only recipe it was (``Float8CurrentScaling`` arrived in TE 2.2), and Megatron-LM's
    ``examples/llama/train_llama3_8b_h100_fp8.sh`` sets ``--fp8-amax-history-len 1024`` with
    Megatron's default ``--fp8-recipe delayed``."""
    if "fp8" not in prec_text and "float8" not in prec_text:
        return None
    locator = str(((run.get("source") or {}).get("recipe") or {}).get("locator") or "")
    if "mxfp8" in prec_text:
        recipe = "mxfp8"
    elif any(w in prec_text for w in ("current scaling", "tensorwise", "float8")) or "_FP8_CS_" in locator:
        recipe = "tensorwise"
    else:
        recipe = "delayed"
    notes.append(f"FP8 recipe {recipe}")
    return recipe


def first_of(data: dict, *keys: str):
    """The first of ``keys`` the mapping has a non-null value for (sources name MoE fields differently)."""
    return next((data[k] for k in keys if data.get(k) is not None), None)


def measured_of(run: dict, model: ModelSpec, job: JobSpec, gpus: int) -> tuple[float, str]:
    x = run["measured"]
    if x.get("tokens_per_sec_per_gpu"):
        return float(x["tokens_per_sec_per_gpu"]), "tokens/s"
    if x.get("step_time_s"):
        return job.tokens_per_step / (x["step_time_s"] * gpus), "step time"
    tflops, counting = x.get("tflops_per_gpu"), x.get("flops_counting") or ""
    if not tflops:
        return 0.0, ""
    L, h, s, V = model.num_layers, model.hidden_size, job.seq_length, model.vocab_size
    if "eq.(3)" in counting:
        per_token = 96 * L * h * h * (1 + s / (6 * h) + V / (16 * L * h))
        return tflops * 1e12 / per_token, "TFLOP/s by Narayanan eq. 3"
    if "eq.(7)" in counting:
        # Korthikanti et al. 2022 eq. 7, model FLOPs per iteration 72 B L s h^2 (1 + s/6h + V/12hL),
        # divided by the B s tokens of an iteration (no recompute counted: the source's MFU).
        per_token = 72 * L * h * h * (1 + s / (6 * h) + V / (12 * L * h))
        return tflops * 1e12 / per_token, "TFLOP/s by Korthikanti eq. 7"
    if "BigScience" in counting:
        per_token = 8 * run["model"]["params_b"] * 1e9
        return tflops * 1e12 / per_token, "TFLOP/s by BigScience 8 x params"
    if "Megatron-LM training-loop" in counting:
        per_token = model_flop_per_iteration(model, job) / job.tokens_per_step
        return tflops * 1e12 / per_token, "TFLOP/s by Megatron model FLOPs"
    return 0.0, ""
