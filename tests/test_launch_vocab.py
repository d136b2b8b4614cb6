"""The vocabulary of a Megatron-LM launch without --vocab-size: `planner check --vocab-size N`, and
the cited tokenizer table (hardware_profiles/tokenizers.yaml) padded as Megatron's
_vocab_size_with_padding pads it."""

import pytest

from planner.inputs.errors import SpecError
from planner.launch.megatron.importer import parse_megatron
from planner.launch.megatron.tokenizers import known_vocabulary, padded_vocabulary

SHAPE = (
    "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 "
    "--max-position-embeddings 4096 --micro-batch-size 1 --global-batch-size 64"
)


@pytest.mark.parametrize(
    "tokenizer, tp, vocab",
    [
        ("--tokenizer-type HuggingFaceTokenizer --tokenizer-model meta-llama/Meta-Llama-3-8B", 1, 128256),
        ("--tokenizer-type HuggingFaceTokenizer --tokenizer-model /ckpt/Meta-Llama-3-8B/", 2, 128256),
        # 128256 = 1002 * 128 is not a multiple of 128 * 4 = 512: Megatron pads it to 251 * 512
        ("--tokenizer-type HuggingFaceTokenizer --tokenizer-model meta-llama/Llama-3.1-8B", 4, 128512),
        ("--tokenizer-type GPT2BPETokenizer --vocab-file v.json --merge-file m.txt", 1, 50304),
        ("--tokenizer-type GPT2BPETokenizer --make-vocab-size-divisible-by 64", 2, 50304),
        ("--tokenizer-type GPT2BPETokenizer", 8, 51200),
        ("--tokenizer-type HuggingFaceTokenizer --tokenizer-model meta-llama/Llama-2-7b-hf", 1, 32000),
        ("--tokenizer-type HuggingFaceTokenizer --tokenizer-model mistralai/Mistral-7B-v0.3", 1, 32768),
        ("--tokenizer-type HuggingFaceTokenizer --tokenizer-model Qwen/Qwen3-8B", 1, 151936),
        ("--tokenizer-type HuggingFaceTokenizer --tokenizer-model Qwen/Qwen2.5-7B", 8, 152576),
        ("--tokenizer-type HuggingFaceTokenizer --tokenizer-model deepseek-ai/DeepSeek-V3", 1, 129280),
    ],
)
def test_known_tokenizer_needs_no_vocab_size(tokenizer, tp, vocab):
    text = f"{SHAPE} {tokenizer} --tensor-model-parallel-size {tp}"
    assert parse_megatron(text, "args.txt", 8).model.vocab_size == vocab


def test_table_vocabulary_is_noted():
    text = f"{SHAPE} --tokenizer-type GPT2BPETokenizer --tensor-model-parallel-size 8"
    assert parse_megatron(text, "a", 8).notes == (
        "vocabulary 51,200 from --tokenizer-type GPT2BPETokenizer (50,257 tokens in tokenizers.yaml, "
        "padded as Megatron pads to a multiple of --make-vocab-size-divisible-by times tp)",
    )
    assert parse_megatron(f"{SHAPE} --vocab-size 32000", "a", 8).notes == ()


def test_padding_is_megatrons():
    # megatron/training/tokenizer/tokenizer.py _vocab_size_with_padding: ceil to divisible_by * tp
    assert padded_vocabulary(50257, 128, 1) == 50304
    assert padded_vocabulary(50304, 128, 1) == 50304
    assert padded_vocabulary(32000, 128, 8) == 32768


@pytest.mark.parametrize(
    "tokenizer_type, model", [(None, None), ("HuggingFaceTokenizer", "/m/custom"), ("Llama2Tokenizer", None)]
)
def test_unknown_tokenizer_is_not_guessed(tokenizer_type, model):
    assert known_vocabulary(tokenizer_type, model) is None


def test_given_vocab_size_is_used_as_given():
    text = f"{SHAPE} --tokenizer-type HuggingFaceTokenizer --tokenizer-model /m/custom --tensor-model-parallel-size 8"
    assert parse_megatron(text, "a", 8, vocab_size=100000).model.vocab_size == 100000
    with pytest.raises(SpecError, match="planner check --vocab-size"):
        parse_megatron(text, "a", 8)


def test_given_vocab_size_disagreeing_with_the_launch_is_an_error():
    text = f"{SHAPE} --vocab-size 128256"
    assert parse_megatron(text, "a", 8, vocab_size=128256).model.vocab_size == 128256
    with pytest.raises(
        SpecError, match=r"line 1: the launch sets --vocab-size 128256, but --vocab-size 32000"
    ):
        parse_megatron(text, "a", 8, vocab_size=32000)


def test_check_cli_vocab_size(run_cli, tmp_path):
    path = tmp_path / "custom.sh"
    path.write_text(
        f"#!/bin/bash\nexport CUDA_DEVICE_MAX_CONNECTIONS=1\ntorchrun pretrain_gpt.py {SHAPE} --bf16 --tensor-model-parallel-size 8 --tokenizer-type HuggingFaceTokenizer "
        "--tokenizer-model /models/custom\n"
    )
    res = run_cli("check", str(path), "-c", "dgx-h100", "-n", "1")
    assert res.exit_code == 1 and "planner check --vocab-size N" in res.stdout
    res = run_cli("check", str(path), "-c", "dgx-h100", "-n", "1", "--vocab-size", "128256")
    assert res.exit_code == 0 and res.stdout.startswith("PASS"), res.stdout
    res = run_cli("check", str(path), "-c", "dgx-h100", "-n", "1", "--vocab-size", "0")
    assert res.exit_code == 2
