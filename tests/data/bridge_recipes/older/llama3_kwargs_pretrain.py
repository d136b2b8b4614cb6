# A recipe written for planner's tests in the shape of Megatron-Bridge v0.2.0-v0.3.x pre-training
# recipes (v0.3.0, commit 21b02e0c, src/megatron/bridge/recipes/llama/llama3.py: a
# *_pretrain_config(**user_kwargs) merging its recommended keywords into the caller's and passing
# them to a common builder with defaults); not a copy of that file.
from megatron.bridge.models import AutoBridge
from megatron.bridge.recipes.utils.optimizer_utils import distributed_fused_adam_with_cosine_annealing
from megatron.bridge.training.config import (
    CheckpointConfig,
    ConfigContainer,
    DistributedDataParallelConfig,
    GPTDatasetConfig,
    TokenizerConfig,
    TrainingConfig,
)


def _common(
    hf_path: str,
    tensor_model_parallel_size: int = 1,
    pipeline_model_parallel_size: int = 1,
    context_parallel_size: int = 1,
    sequence_parallel: bool = False,
    global_batch_size: int = 512,
    micro_batch_size: int = 1,
    seq_length: int = 8192,
    lr: float = 3e-4,
    precision_config="bf16_mixed",
) -> ConfigContainer:
    model = AutoBridge.from_hf_pretrained(hf_path).to_megatron_provider(load_weights=False)
    model.tensor_model_parallel_size = tensor_model_parallel_size
    model.pipeline_model_parallel_size = pipeline_model_parallel_size
    model.context_parallel_size = context_parallel_size
    model.sequence_parallel = sequence_parallel
    model.seq_length = seq_length
    optimizer, scheduler = distributed_fused_adam_with_cosine_annealing(max_lr=lr)
    return ConfigContainer(
        model=model,
        train=TrainingConfig(global_batch_size=global_batch_size, micro_batch_size=micro_batch_size),
        optimizer=optimizer,
        scheduler=scheduler,
        ddp=DistributedDataParallelConfig(use_distributed_optimizer=True, overlap_grad_reduce=True),
        dataset=GPTDatasetConfig(seq_length=seq_length),
        tokenizer=TokenizerConfig(tokenizer_type="HuggingFaceTokenizer", tokenizer_model=hf_path),
        checkpoint=CheckpointConfig(ckpt_format="torch_dist"),
        mixed_precision=precision_config,
    )


def llama3_8b_pretrain_config(**user_kwargs) -> ConfigContainer:
    recommended = {
        "hf_path": "meta-llama/Meta-Llama-3-8B",
        "tensor_model_parallel_size": 2,
        "context_parallel_size": 2,
        "seq_length": 8192,
    }
    merged = {**recommended, **user_kwargs}
    return _common(**merged)


def llama3_8b_dict_pretrain_config(**user_kwargs) -> ConfigContainer:
    merged = dict(hf_path="meta-llama/Meta-Llama-3-8B", pipeline_model_parallel_size=2)
    merged.update(user_kwargs)
    merged["global_batch_size"] = 256
    if merged.get("tensor_model_parallel_size", 1) > 1:
        merged.setdefault("sequence_parallel", True)
    return _common(**merged)


def llama3_8b_misspelt_pretrain_config(**user_kwargs) -> ConfigContainer:
    combined = {"hf_path": "meta-llama/Meta-Llama-3-8B", "tensor_parallel_size": 2, **user_kwargs}
    return _common(**combined)
