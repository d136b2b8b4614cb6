"""Megatron-Bridge export: an override of a recipe's ``ConfigContainer`` (YAML, merged by
``megatron.bridge.training.utils.omegaconf_utils.process_config_with_overrides``) and a torchrun
launch of a small driver that loads the recipe, applies the file and calls Bridge's ``pretrain``.

Every field was checked against Megatron-Bridge v0.6.0 (:data:`VERSION`):
``src/megatron/bridge/training/config.py`` (``ConfigContainer``: sections ``model``, ``train``,
``ddp``, ``optimizer``, ``dist``, ``checkpoint``, ``dataset``, ``comm_overlap``,
``mixed_precision``), ``src/megatron/bridge/models/gpt_provider.py`` (``GPTModelProvider``, a
megatron-core ``TransformerConfig``), ``training/mixed_precision.py`` (the recipe names) and
``training/comm_overlap.py``. The mapping is one table from the Megatron-LM export's flags
(:func:`planner.launch.megatron.export_args.megatron_args`) to fields, :data:`FIELDS`, which the import
(:mod:`.importer`) reads backwards, so both speak about the same launch; what Megatron-LM's export
refuses, this one refuses too. docs/megatron.md tables the fields.
"""

from __future__ import annotations

import yaml

from cost_models.parallel import ParallelConfig
from planner.inputs.errors import SpecError
from planner.inputs.job_spec import JobSpec
from planner.inputs.layer_pattern import parse_pattern
from planner.inputs.model_spec import ModelSpec
from planner.launch.megatron.export import a2a_overlap_connections, needs_single_connection
from planner.launch.megatron.export_args import megatron_args, model_args
from planner.plans.plan_file import PlanInputs

VERSION = "Megatron-Bridge v0.6.0"
OVERRIDES_FILE = "bridge_overrides.yaml"
DRIVER_FILE = "pretrain_bridge.py"

FIELDS: tuple[tuple[str, str, str], ...] = (
    ("model.num_layers", "--num-layers", "int"),
    ("model.hidden_size", "--hidden-size", "int"),
    ("model.ffn_hidden_size", "--ffn-hidden-size", "int"),
    ("model.num_attention_heads", "--num-attention-heads", "int"),
    ("model.kv_channels", "--kv-channels", "int"),
    ("model.window_attn_skip_freq", "--window-attn-skip-freq", "int"),
    ("model.softmax_type", "--softmax-type", "str"),
    ("model.normalization", "--normalization", "str"),
    ("model.add_bias_linear", "--disable-bias-linear", "negated"),
    ("model.add_qkv_bias", "--add-qkv-bias", "switch"),
    ("model.qk_layernorm", "--qk-layernorm", "switch"),
    ("model.share_embeddings_and_output_weights", "--untie-embeddings-and-output-weights", "negated"),
    ("model.position_embedding_type", "--position-embedding-type", "str"),
    ("model.rotary_base", "--rotary-base", "int"),
    ("model.vocab_size", "--vocab-size", "int"),
    ("model.num_moe_experts", "--num-experts", "int"),
    ("model.moe_router_topk", "--moe-router-topk", "int"),
    ("model.moe_ffn_hidden_size", "--moe-ffn-hidden-size", "int"),
    ("model.moe_shared_expert_intermediate_size", "--moe-shared-expert-intermediate-size", "int"),
    ("model.moe_shared_expert_gate", "--moe-shared-expert-gate", "set_switch"),
    ("model.expert_model_parallel_size", "--expert-model-parallel-size", "int"),
    ("model.expert_tensor_parallel_size", "--expert-tensor-parallel-size", "int"),
    ("model.moe_token_dispatcher_type", "--moe-token-dispatcher-type", "str"),
    ("model.moe_grouped_gemm", "--moe-grouped-gemm", "switch"),
    ("model.mtp_num_layers", "--mtp-num-layers", "int"),
    ("model.tensor_model_parallel_size", "--tensor-model-parallel-size", "int"),
    ("model.pipeline_model_parallel_size", "--pipeline-model-parallel-size", "int"),
    ("model.context_parallel_size", "--context-parallel-size", "int"),
    ("model.pipeline_model_parallel_layout", "--pipeline-model-parallel-layout", "str"),
    ("model.num_layers_in_first_pipeline_stage", "--decoder-first-pipeline-num-layers", "int"),
    ("model.num_layers_in_last_pipeline_stage", "--decoder-last-pipeline-num-layers", "int"),
    ("model.account_for_embedding_in_pipeline_split", "--account-for-embedding-in-pipeline-split", "switch"),
    ("model.account_for_loss_in_pipeline_split", "--account-for-loss-in-pipeline-split", "switch"),
    ("model.sequence_parallel", "--sequence-parallel", "switch"),
    ("model.recompute_granularity", "--recompute-granularity", "str"),
    ("model.recompute_method", "--recompute-method", "str"),
    ("model.recompute_num_layers", "--recompute-num-layers", "int"),
    ("model.recompute_modules", "--recompute-modules", "list"),
    ("model.cpu_offloading_num_layers", "--cpu-offloading-num-layers", "int"),
    ("model.gradient_accumulation_fusion", "--no-gradient-accumulation-fusion", "negated"),
    ("model.cuda_graph_impl", "--cuda-graph-impl", "str"),
    ("model.cuda_graph_modules", "--cuda-graph-modules", "list"),
    ("train.micro_batch_size", "--micro-batch-size", "int"),
    ("train.global_batch_size", "--global-batch-size", "int"),
    ("ddp.use_distributed_optimizer", "--use-distributed-optimizer", "switch"),
    ("ddp.num_distributed_optimizer_instances", "--num-distributed-optimizer-instances", "int"),
    ("ddp.use_megatron_fsdp", "--use-megatron-fsdp", "switch"),
    ("ddp.data_parallel_sharding_strategy", "--data-parallel-sharding-strategy", "str"),
    ("ddp.overlap_grad_reduce", "--overlap-grad-reduce", "switch"),
    ("ddp.overlap_param_gather", "--overlap-param-gather", "switch"),
    ("dist.use_tp_pp_dp_mapping", "--use-tp-pp-dp-mapping", "switch"),
    ("checkpoint.ckpt_format", "--ckpt-format", "str"),
    ("comm_overlap.tp_comm_overlap", "--tp-comm-overlap", "switch"),
    ("comm_overlap.overlap_moe_expert_parallel_comm", "--overlap-moe-expert-parallel-comm", "switch"),
)
"""(ConfigContainer field, the Megatron-LM flag it stands for, kind): ``int`` / ``str`` the flag's
value, ``list`` its words, ``switch`` true when the flag is given, ``negated`` false when it is
(``--disable-bias-linear`` is ``add_bias_linear: false``). Handled apart, by :func:`overrides`:
query groups, the window, the MoE layer pattern, the activation, sequence length, virtual stages,
CPU offloading, the overlaps comm_overlap repeats, precision."""

MIXED_PRECISION = {
    "bf16": "bf16_mixed",
    "fp16": "fp16_mixed",
    "fp8:delayed": "bf16_with_fp8_delayed_scaling_mixed",
    "fp8:tensorwise": "bf16_with_fp8_current_scaling_mixed",
    "fp8:blockwise": "bf16_with_fp8_subchannel_scaling_mixed",
    "fp8:mxfp8": "bf16_with_mxfp8_mixed",
    "nvfp4": "bf16_with_nvfp4_mixed",
}
"""The mixed-precision recipe (training/mixed_precision.py, ``MIXED_PRECISION_RECIPES``) of each
planner precision: FP8 recipes by their ``fp8_recipe`` (delayed, tensorwise = current scaling,
blockwise = subchannel, mxfp8), NVFP4 ``fp4 = e2m1``, all with BF16 parameters. Each sets
``ddp.grad_reduce_in_fp32`` itself (``MixedPrecisionConfig.setup`` writes it over the DDP config):
true for the BF16 recipes, false for ``fp16_mixed``."""

RECIPES = {
    "llama3-8b": "megatron.bridge.recipes.llama:llama3_8b_pretrain_config",
    "llama3-70b": "megatron.bridge.recipes.llama:llama3_70b_pretrain_config",
    "llama3.1-405b": "megatron.bridge.recipes.llama:llama31_405b_pretrain_config",
}
"""The recipe function Megatron-Bridge ships for a planner preset (``recipes/llama/__init__.py``);
any other model starts from ``vanilla_gpt_pretrain_config`` (:data:`GENERIC_RECIPE`, a
``GPTModelProvider``). Either way the file writes every architecture field, so the recipe gives
only what planning does not price (tokenizer, data, optimizer schedule)."""
GENERIC_RECIPE = "megatron.bridge.recipes.gpt:vanilla_gpt_pretrain_config"
COMM_OVERLAP_TARGET = "megatron.bridge.training.comm_overlap.CommOverlapConfig"
"""``comm_overlap`` is None in most recipes; a mapping with ``_target_`` is instantiated by
``_apply_overrides`` (omegaconf_utils.py) instead of being set as a plain dict."""


def refuse(inputs: PlanInputs) -> None:
    """SpecError (one line) for what this export cannot write as the plan is priced (beyond what
    Megatron-LM's export refuses, :func:`planner.launch.megatron.export_args.refuse_unlaunchable`)."""
    m, c, job = inputs.model, inputs.config, inputs.job
    if job.is_lora:
        raise SpecError(
            "a LoRA plan (finetune lora): this export writes pretraining overrides; Megatron-Bridge runs "
            "LoRA through a PEFT recipe (its peft section), which planner does not write"
        )
    if m.is_hybrid or m.linear_attention_freq:
        raise SpecError(
            "a hybrid (Mamba or gated DeltaNet) model: Megatron-Bridge builds it with its hybrid model "
            "provider, whose fields this export does not write; use planner export megatron"
        )
    if m.multi_latent_attention:
        raise SpecError(
            "multi-latent attention: its fields belong to Megatron-Bridge's MLA model providers, not "
            "GPTModelProvider, which this export writes; use planner export megatron"
        )
    if job.attention_impl == "unfused":
        raise SpecError(
            "unfused attention: GPTModelProvider's attention_backend is a megatron-core AttnBackend enum, "
            "which an override file cannot set; use planner export megatron"
        )
    if job.optimizer_below_fp32:
        raise SpecError(
            "optimizer dtypes below fp32: OptimizerConfig's main_params_dtype and exp_avg_dtype are "
            "torch dtypes, which an override file does not carry; use planner export megatron"
        )
    from planner.inputs.jobs import default_grad_dtype

    if job.grad_dtype != default_grad_dtype(job.precision):
        raise SpecError(
            f"gradient reduction in {job.grad_dtype}: Megatron-Bridge's mixed-precision recipe sets "
            "ddp.grad_reduce_in_fp32 itself (MixedPrecisionConfig.setup), fp32 under bf16 and fp16 under "
            "fp16; use planner export megatron"
        )
    if m.position_embedding_type == "learned_absolute" and m.max_position_embeddings > job.seq_length:
        raise SpecError(
            f"learned position embeddings for {m.max_position_embeddings} positions: GPTModelProvider sizes "
            f"the table by seq_length ({job.seq_length}; max_sequence_length=self.seq_length)"
        )
    del c


def _words(value: str | None) -> list[str]:
    return str(value or "").split()


def overrides(inputs: PlanInputs) -> dict:
    """The override document of a plan: every section and field :data:`FIELDS` names, each
    written out (false, null or the megatron-core default where the plan leaves a feature off),
    so that no recipe default changes what was priced."""
    refuse(inputs)
    args = megatron_args(inputs)  # Megatron-LM's refusals first
    flags = dict(args)
    m, c, job = inputs.model, inputs.config, inputs.job
    doc: dict = {s: {} for s in ("model", "train", "dataset", "ddp", "optimizer", "dist")}
    for path, value in _field_values(flags).items():
        section, key = path.split(".")
        doc.setdefault(section, {})[key] = value
    model = doc["model"]
    _architecture(model, m, flags)
    model["seq_length"] = job.seq_length
    doc["dataset"]["seq_length"] = job.seq_length
    model.setdefault("context_parallel_size", 1)
    # Virtual stages: a layout fixes them itself (validate_args forbids both); else the count.
    model["virtual_pipeline_model_parallel_size"] = (
        c.vpp if c.vpp > 1 and "--pipeline-model-parallel-layout" not in flags else None
    )
    for key in (
        "pipeline_model_parallel_layout",
        "num_layers_in_first_pipeline_stage",
        "num_layers_in_last_pipeline_stage",
        "recompute_granularity",
        "recompute_method",
        "recompute_num_layers",
        "recompute_modules",
    ):
        model.setdefault(key, None)
    model["cpu_offloading"] = c.offload_layers > 0
    model.setdefault("cpu_offloading_num_layers", 0)
    model.setdefault("cuda_graph_impl", "none")
    model.setdefault("mtp_num_layers", None)
    ddp = doc["ddp"]
    ddp.setdefault("num_distributed_optimizer_instances", 1)
    if ddp["use_megatron_fsdp"]:
        ddp["use_distributed_optimizer"] = True  # ConfigContainer forces it for Megatron-FSDP
    ddp["grad_reduce_in_fp32"] = job.precision != "fp16"
    doc["optimizer"]["use_distributed_optimizer"] = ddp["use_distributed_optimizer"]
    comm = doc.pop("comm_overlap")
    # CommOverlapConfig.setup writes its overlaps over the DDP config (defaults: on with dp > 1),
    # so they are repeated here with the plan's values.
    doc["comm_overlap"] = {
        "_target_": COMM_OVERLAP_TARGET,
        "tp_comm_overlap": comm["tp_comm_overlap"],
        "overlap_grad_reduce": ddp["overlap_grad_reduce"],
        "overlap_param_gather": ddp["overlap_param_gather"],
        "overlap_moe_expert_parallel_comm": comm["overlap_moe_expert_parallel_comm"],
    }
    precision = f"fp8:{job.fp8_recipe}" if job.precision == "fp8" else job.precision
    doc["mixed_precision"] = MIXED_PRECISION[precision]
    if "--ckpt-format" not in flags:
        doc.pop("checkpoint", None)
    return doc


def _field_values(flags: dict) -> dict:
    """``{section.field: value}`` of every :data:`FIELDS` entry the Megatron flags ``flags`` give
    (switches both ways)."""
    out: dict = {}
    for path, flag, kind in FIELDS:
        if kind == "switch":
            out[path] = flag in flags
        elif kind == "set_switch":  # written only when on (exports of models without it unchanged)
            if flag in flags:
                out[path] = True
        elif kind == "negated":
            out[path] = flag not in flags
        elif flag not in flags:
            continue
        elif kind == "int":
            out[path] = int(flags[flag])
        elif kind == "list":
            out[path] = _words(flags[flag])
        else:
            out[path] = flags[flag]
    return out


def _architecture(model: dict, m: ModelSpec, flags: dict) -> None:
    """The model fields :data:`FIELDS` does not carry: query groups, head width, the activation,
    the window, the softmax, the vocabulary's padding and the MoE layer pattern."""
    model["num_query_groups"] = m.num_query_groups
    model["kv_channels"] = m.kv_channels
    model["gated_linear_unit"] = m.activation == "swiglu"
    model["activation_func"] = {"swiglu": "silu", "squared_relu": "squared_relu"}.get(m.activation, "gelu")
    model["window_size"] = [m.window_size - 1, 0] if m.window_size else None
    model.setdefault("softmax_type", "vanilla")
    model["should_pad_vocab"] = False  # the plan's vocabulary is the embedding's, as priced
    if m.is_moe and "--moe-layer-freq" in flags:
        text = flags["--moe-layer-freq"]
        model["moe_layer_freq"] = parse_pattern(text) if "[" in text else int(text)
    elif m.is_moe:
        model["moe_layer_freq"] = 1


ARCHITECTURE = (
    "num_layers",
    "hidden_size",
    "ffn_hidden_size",
    "num_attention_heads",
    "kv_channels",
    "window_attn_skip_freq",
    "softmax_type",
    "normalization",
    "add_bias_linear",
    "add_qkv_bias",
    "qk_layernorm",
    "share_embeddings_and_output_weights",
    "position_embedding_type",
    "rotary_base",
    "vocab_size",
    "num_moe_experts",
    "moe_router_topk",
    "moe_ffn_hidden_size",
    "moe_shared_expert_intermediate_size",
    "moe_shared_expert_gate",
    "moe_grouped_gemm",
    "mtp_num_layers",
)
"""The model fields of :data:`FIELDS` that :func:`.megatron.export_args.model_args` writes for the model
itself (not the job's degrees, dispatcher or sequence length)."""


def architecture_fields(m: ModelSpec) -> dict:
    """The model section's architecture fields for ``m`` (``{field: value}``), as :func:`overrides`
    writes them: what a Bridge model provider fixes for a model (the recipe import,
    :mod:`.recipe`, starts a provider named by a Hugging Face id from its preset with these).
    SpecError for what this export refuses (hybrid, multi-latent attention)."""
    if m.is_hybrid or m.linear_attention_freq or m.multi_latent_attention:
        raise SpecError(
            f"model {m.name}: hybrid and multi-latent-attention models are built by other Megatron-Bridge "
            "model providers, whose fields planner does not read"
        )
    job = JobSpec(global_batch_size=1, seq_length=m.max_position_embeddings)
    # model_args reads the model, the job's sequence length and attention and the expert degrees
    # (here 1); the cluster is not read.
    plan = PlanInputs(model=m, cluster=None, job=job, config=ParallelConfig())  # type: ignore[arg-type]
    flags = dict(model_args(plan))
    model = {
        p.split(".")[1]: v
        for p, v in _field_values(flags).items()
        if p.startswith("model.") and p.split(".")[1] in ARCHITECTURE
    }
    _architecture(model, m, flags)
    return model


def recipe_for(inputs: PlanInputs) -> str:
    """``module:function`` of the recipe the override applies to (:data:`RECIPES`)."""
    return RECIPES.get(inputs.model.name, GENERIC_RECIPE)


RECIPE_COMMENT = "# recipe: "


class _Dumper(yaml.SafeDumper):
    """Block mappings, one field a line; lists of values (a layer pattern, module names) on one."""


_Dumper.add_representer(list, lambda d, v: d.represent_sequence("tag:yaml.org,2002:seq", v, flow_style=True))


def overrides_yaml(inputs: PlanInputs) -> str:
    """:data:`OVERRIDES_FILE`: a header naming the recipe (``# recipe: module:function``, read by
    scripts/validate_bridge_exports.py), then the sections of :func:`overrides`."""
    doc = overrides(inputs)
    body = yaml.dump(doc, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100_000)
    return (
        f"# Generated by planner: ConfigContainer overrides for {VERSION} (plan: {inputs.model.name}, "
        f"{inputs.cluster.num_gpus} GPUs).\n"
        f"{RECIPE_COMMENT}{recipe_for(inputs)}\n"
        "# Applied with process_config_with_overrides(config, config_filepath=THIS_FILE) by "
        f"{DRIVER_FILE}.\n" + body
    )


DRIVER = '''"""Generated by planner: load a Megatron-Bridge recipe, apply the override file, pretrain.

The pattern of Megatron-Bridge's own YAML-override examples (examples/quantization/
pretrain_quantized_llama3_8b.py): recipe ConfigContainer, then the YAML merged by
process_config_with_overrides, then pretrain(config, forward_step).
"""

import argparse
import importlib

from megatron.bridge.training.gpt_step import forward_step
from megatron.bridge.training.pretrain import pretrain
from megatron.bridge.training.utils.omegaconf_utils import process_config_with_overrides

parser = argparse.ArgumentParser()
parser.add_argument("--recipe", required=True, help="module:function of the recipe")
parser.add_argument("--config-file", required=True, help="the ConfigContainer override YAML")
args, cli_overrides = parser.parse_known_args()
module, function = args.recipe.split(":")
config = getattr(importlib.import_module(module), function)()
config = process_config_with_overrides(config, config_filepath=args.config_file, cli_overrides=cli_overrides)
pretrain(config=config, forward_step_func=forward_step)
'''


def launch_script(inputs: PlanInputs) -> str:
    """A torchrun launch of :data:`DRIVER_FILE` with :data:`OVERRIDES_FILE` (run it on every node
    with NODE_RANK set); the CUDA_DEVICE_MAX_CONNECTIONS rule of the Megatron-LM export."""
    groups = inputs.cluster.groups
    gpn, nodes = groups[0].gpus_per_node, sum(g.num_nodes for g in groups)
    queues = a2a_overlap_connections(inputs)
    if needs_single_connection(inputs):
        env = "export CUDA_DEVICE_MAX_CONNECTIONS=1\n"
    elif queues:
        env = f"export CUDA_DEVICE_MAX_CONNECTIONS={queues}\n"
    else:
        env = "unset CUDA_DEVICE_MAX_CONNECTIONS\n"
    return f"""#!/bin/bash
# Generated by planner: torchrun launch of {VERSION} (recipe {recipe_for(inputs)} with {OVERRIDES_FILE}).
# World size {gpn * nodes} = {nodes} nodes x {gpn} GPUs; run on every node with NODE_RANK=0..{nodes - 1}.
set -euo pipefail
{env}
# --- PLACEHOLDERS: replace before launching --------------------------------------------
# Hydra-style overrides applied after the file: data, tokenizer (its vocabulary must have the
# plan's {inputs.model.vocab_size} entries, model.vocab_size), run length, checkpoints, e.g.
# (train.train_iters=1000 checkpoint.save=/ckpt).
EXTRA_OVERRIDES=()
# -----------------------------------------------------------------------------------------
HERE=$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)
GPUS_PER_NODE={gpn}
NUM_NODES={nodes}
NODE_RANK=${{NODE_RANK:-0}}
MASTER_ADDR=${{MASTER_ADDR:-localhost}}
MASTER_PORT=${{MASTER_PORT:-29500}}

torchrun --nproc-per-node "$GPUS_PER_NODE" --nnodes "$NUM_NODES" --node-rank "$NODE_RANK" \\
    --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT" \\
    "$HERE/{DRIVER_FILE}" --recipe {recipe_for(inputs)} --config-file "$HERE/{OVERRIDES_FILE}" \\
    ${{EXTRA_OVERRIDES[@]+"${{EXTRA_OVERRIDES[@]}}"}}
"""


def export_files(inputs: PlanInputs) -> dict[str, str]:
    """Every file of the export by name; SpecError (one line) when it cannot be written."""
    text = overrides_yaml(inputs)
    if len(inputs.cluster.groups) > 1:
        raise SpecError(
            "a mixed-GPU cluster: this export writes a single torchrun launch; use planner export megatron "
            "--launcher slurm (a heterogeneous job)"
        )
    return {OVERRIDES_FILE: text, DRIVER_FILE: DRIVER, "launch_torchrun.sh": launch_script(inputs)}
