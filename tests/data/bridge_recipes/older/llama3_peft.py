# A recipe written for planner's tests in the shape of Megatron-Bridge v0.3.x fine-tuning recipes
# (v0.3.0, commit 21b02e0c, src/megatron/bridge/recipes/llama/llama3.py: *_finetune_config(**user_kwargs)
# popping the PEFT scheme, a common fine-tuning builder, default_peft_config from
# recipes/utils/finetune_utils.py with the adapter's dim set afterwards); not a copy of that file.
from megatron.bridge.models import AutoBridge
from megatron.bridge.peft.lora import LoRA
from megatron.bridge.recipes.utils.finetune_utils import default_peft_config, default_squad_config
from megatron.bridge.recipes.utils.optimizer_utils import distributed_fused_adam_with_cosine_annealing
from megatron.bridge.training.config import ConfigContainer, DistributedDataParallelConfig, TokenizerConfig, TrainingConfig


def _finetune_common(
    hf_path: str,
    global_batch_size: int | None = None,
    micro_batch_size: int = 1,
    seq_length: int | None = None,
    packed_sequence: bool = False,
    finetune_lr: float = 1e-4,
) -> ConfigContainer:
    if seq_length is None:
        seq_length = 4096 if packed_sequence else 2048
    if global_batch_size is None:
        global_batch_size = 8 if packed_sequence else 128
    model = AutoBridge.from_hf_pretrained(hf_path).to_megatron_provider(load_weights=False)
    model.seq_length = seq_length
    optimizer, scheduler = distributed_fused_adam_with_cosine_annealing(max_lr=finetune_lr)
    return ConfigContainer(
        model=model,
        train=TrainingConfig(global_batch_size=global_batch_size, micro_batch_size=micro_batch_size),
        optimizer=optimizer,
        scheduler=scheduler,
        ddp=DistributedDataParallelConfig(check_for_nan_in_grad=True),
        dataset=default_squad_config(seq_length, packed_sequence),
        tokenizer=TokenizerConfig(tokenizer_type="HuggingFaceTokenizer", tokenizer_model=hf_path),
        peft=None,
        mixed_precision="bf16_mixed",
    )


def llama3_8b_finetune_config(**user_kwargs) -> ConfigContainer:
    peft = user_kwargs.pop("peft", "lora")
    is_full_sft = peft is None or (isinstance(peft, str) and peft.lower() == "none")
    if "finetune_lr" not in user_kwargs:
        user_kwargs["finetune_lr"] = 5e-6 if is_full_sft else 1e-4
    config = _finetune_common(hf_path="meta-llama/Meta-Llama-3-8B", **user_kwargs)
    if is_full_sft:
        config.model.tensor_model_parallel_size = 2
        config.peft = None
    else:
        config.model.tensor_model_parallel_size = 1
        config.peft = default_peft_config(peft)
        config.peft.dim = 8
        config.peft.alpha = 16
        config.optimizer.use_distributed_optimizer = False
    return config


def llama3_8b_mlp_lora_config(**user_kwargs) -> ConfigContainer:
    config = _finetune_common(hf_path="meta-llama/Meta-Llama-3-8B", **user_kwargs)
    config.peft = LoRA(target_modules=["linear_fc1", "linear_fc2"], dim=32)
    return config


def llama3_8b_pattern_lora_config(**user_kwargs) -> ConfigContainer:
    config = _finetune_common(hf_path="meta-llama/Meta-Llama-3-8B", **user_kwargs)
    config.peft = LoRA(target_modules=["*.layers.0.*.linear_qkv"])
    return config
