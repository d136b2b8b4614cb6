#!/bin/bash
# A launch that gives Megatron-LM its arguments in a YAML file: the other flags are ignored by
# load_yaml, which replaces the parsed namespace.
SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CONFIG=${CONFIG:-configs/gpt_1p3b.yaml}
export CUDA_DEVICE_MAX_CONNECTIONS=1

torchrun --nproc-per-node 8 pretrain_gpt.py \
    --yaml-cfg ${CONFIG} \
    --tensor-model-parallel-size 8
