#!/bin/bash
# A launch in the pattern of the MoE Model Zoo's sbatch_benchmarking.sh: the model's YAML filled in
# from the environment with envsubst, its MODEL_ARGS turned into flags with yq.
set -euo pipefail

export WORKSPACE=$(dirname "$(readlink -f "$0")")
export MODEL=${MODEL:-"Mixtral-8x7B"}
export MEGATRON_PATH=${MEGATRON_PATH:-"/opt/megatron-lm"}

source "${WORKSPACE}/runtime_configs/common.conf"

TRAINING_PARAMS=${TRAINING_PARAMS:-""}

if [[ -f ${TRAINING_PARAMS_PATH} ]]; then
    envsubst < ${TRAINING_PARAMS_PATH} > ${TRAINING_PARAMS_PATH}.tmp
    TRAINING_PARAMS_PATH=${TRAINING_PARAMS_PATH}.tmp
else
    echo "Error: TRAINING_PARAMS_PATH does not exist: ${TRAINING_PARAMS_PATH}."
    exit 1
fi

TRAINING_PARAMS_FROM_CONFIG=$(yq '... comments="" | .MODEL_ARGS | to_entries | .[] |
    select(.value != "false") |
    with(select(.value == "true"); .value = "") |
    [.key + " " + .value] | join("")' ${TRAINING_PARAMS_PATH} | tr '\n' ' ')
TRAINING_PARAMS="${TRAINING_PARAMS} ${TRAINING_PARAMS_FROM_CONFIG}"

MAX_POSITION_EMBEDDINGS_FROM_CONFIG=$(yq '.MODEL_ARGS."--max-position-embeddings"' ${TRAINING_PARAMS_PATH})
if [[ ${SEQ_LEN} -gt ${MAX_POSITION_EMBEDDINGS_FROM_CONFIG} ]]; then
    TRAINING_PARAMS="${TRAINING_PARAMS} --max-position-embeddings ${SEQ_LEN}"
fi

DISPATCHER=${DISPATCHER:-"alltoall"}
if [[ ${DISPATCHER} == "flex" ]]; then
    TRAINING_PARAMS="${TRAINING_PARAMS} --moe-token-dispatcher-type flex --moe-flex-dispatcher-backend deepep"
fi

export CUDA_DEVICE_MAX_CONNECTIONS=1
export TRAINING_CMD="python ${TRAINING_SCRIPT_PATH} ${TRAINING_PARAMS}"
${TRAINING_CMD}
