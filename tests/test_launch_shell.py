"""The bash a Megatron launch script is written in, read as bash reads it (planner/launch/megatron/
shell.py): word splitting of unquoted expansions, quoted arrays kept whole, and a value bash splits
refused as Megatron's parser refuses it. Each construct is a small fixture script written here; where
bash is installed the words are compared with the argv bash itself gives a stub torchrun."""

import os
import shutil
import subprocess

import pytest

from planner.inputs.errors import SpecError
from planner.launch.megatron.arguments import megatron_words
from planner.launch.megatron.importer import parse_megatron
from planner.launch.megatron.rules import megatron_findings
from planner.profiles.hardware import load_cluster

BASH = shutil.which("bash")
SHAPE = (
    "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 "
    "--max-position-embeddings 4096 --micro-batch-size 1 --global-batch-size 64"
)

# Each fixture: (script, the words pretrain_gpt.py gets, as bash gives them).
FIXTURES = {
    "unquoted_array_elements_are_split": (
        'MODEL=(\n    "--num-layers 32"\n    "--vocab-size 128256"\n    --bf16\n)\n'
        "torchrun --nproc-per-node 8 pretrain_gpt.py ${MODEL[@]}\n",
        ["--num-layers", "32", "--vocab-size", "128256", "--bf16"],
    ),
    "unquoted_star_is_split_too": (
        'PREC=("--fp8-format hybrid" "--fp8-recipe delayed")\ntorchrun pretrain_gpt.py ${PREC[*]}\n',
        ["--fp8-format", "hybrid", "--fp8-recipe", "delayed"],
    ),
    "quoted_array_keeps_elements_whole": (
        'ARGS=("--lr" "1e-4" "--tokenizer-model" "/my models/tok")\ntorchrun pretrain_gpt.py "${ARGS[@]}"\n',
        ["--lr", "1e-4", "--tokenizer-model", "/my models/tok"],
    ),
    "quoted_star_is_one_word": (
        'A=(--x "y z")\ntorchrun pretrain_gpt.py "${A[*]}"\n',
        ["--x y z"],
    ),
    "unquoted_string_variable_is_split": (
        'GPT_ARGS="--num-layers 32\n  --hidden-size 4096"\ntorchrun pretrain_gpt.py $GPT_ARGS\n',
        ["--num-layers", "32", "--hidden-size", "4096"],
    ),
    "quoted_string_variable_is_one_word": (
        'S="0:16 2.4B:320"\ntorchrun pretrain_gpt.py --step-batch-size-schedule "$S"\n',
        ["--step-batch-size-schedule", "0:16 2.4B:320"],
    ),
    "empty_unquoted_expansion_is_no_word": (
        'EXTRA=""\ntorchrun pretrain_gpt.py --bf16 $EXTRA ${EXTRA} --fp16\n',
        ["--bf16", "--fp16"],
    ),
    "assignment_is_not_split": (
        'A="--x  1"\nB=$A\ntorchrun pretrain_gpt.py "$B"\n',
        ["--x  1"],
    ),
    "adjacent_text_joins_the_first_field": (
        'V="1 2"\ntorchrun pretrain_gpt.py --a=$V\n',
        ["--a=1", "2"],
    ),
    "array_of_split_strings_inside_an_array": (
        'BASE="--bf16 --swiglu"\nALL=($BASE "--seq-length 4096")\ntorchrun pretrain_gpt.py "${ALL[@]}"\n',
        ["--bf16", "--swiglu", "--seq-length 4096"],
    ),
}


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_words_as_bash_splits_them(name):
    script, expected = FIXTURES[name]
    words, _, is_script = megatron_words("#!/bin/bash\n" + script)
    assert is_script and [w for w, _ in words] == expected


@pytest.mark.skipif(BASH is None, reason="bash is not installed")
@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_fixtures_agree_with_bash(name, tmp_path):
    """The expected words are what bash passes (a stub torchrun prints its argv after the .py)."""
    script, expected = FIXTURES[name]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stub = bin_dir / "torchrun"
    stub.write_text('#!/bin/bash\nwhile [[ "$1" != *.py ]]; do shift; done\nshift\nprintf "%s\\0" "$@"\n')
    stub.chmod(0o755)
    (tmp_path / "launch.sh").write_text("#!/bin/bash\n" + script)
    env = {"PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    proc = subprocess.run(
        [BASH, str(tmp_path / "launch.sh")], capture_output=True, text=True, env=env, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\0")[:-1] == expected


def test_fp8_array_is_read_as_fp8():
    """NVIDIA's Llama 3 FP8 pattern: two-word array elements expanded unquoted."""
    text = (
        "#!/bin/bash\n"
        f'MODEL=({" ".join(repr(x) for x in SHAPE.split())} "--vocab-size 128256")\n'
        'PREC=("--bf16" "--fp8-format hybrid" "--fp8-amax-history-len 1024")\n'
        "torchrun pretrain_gpt.py ${MODEL[@]} ${PREC[@]} --tensor-model-parallel-size 8\n"
    )
    back = parse_megatron(text, "x.sh", 8)
    assert back.model.vocab_size == 128256 and back.job.precision == "fp8" and back.rejected == ()


def test_a_value_bash_splits_is_refused_as_megatrons_parser_refuses_it():
    """A quoted array element expanded unquoted is split: its second word is no flag's value."""
    text = (
        f'#!/bin/bash\nOPTS=({SHAPE} --vocab-size 32000 --step-batch-size-schedule "0:16 2.4B:320" --bf16)\n'
        "torchrun pretrain_gpt.py ${OPTS[@]}\n"
    )
    back = parse_megatron(text, "x.sh", 8)
    assert back.rejected == ("2.4B:320",) and back.flags["--step-batch-size-schedule"] == "0:16"
    findings = list(megatron_findings(back, load_cluster("dgx-h100", 1)))
    msg = [m for level, m, flags in findings if flags == ("2.4B:320",) and level == "error"]
    assert msg and "unrecognized arguments" in msg[0] and "${ARR[@]}" in msg[0]
    # expanded quoted, the element reaches Megatron whole and its parser takes it
    fixed = parse_megatron(text.replace("${OPTS[@]}", '"${OPTS[@]}"'), "x.sh", 8)
    assert fixed.rejected == () and fixed.flags["--step-batch-size-schedule"] == "0:16 2.4B:320"


def test_stray_words_in_an_args_file_are_not_judged():
    """An arguments file is not argv: only a launch script's words after the .py are."""
    assert parse_megatron(f"{SHAPE} --vocab-size 32000 stray", "args.txt", 8).rejected == ()


def test_unresolved_variable_word_is_not_judged_a_stray():
    text = f'#!/bin/bash\ntorchrun pretrain_gpt.py {SHAPE} --vocab-size 32000 $EXTRA_ARGS "$@"\n'
    assert parse_megatron(text, "x.sh", 8).rejected == ()


def test_split_value_needing_an_unset_variable_names_it():
    text = f'#!/bin/bash\nPAR="--tensor-model-parallel-size $TP"\ntorchrun pretrain_gpt.py {SHAPE} $PAR\n'
    with pytest.raises(SpecError, match="'TP'"):
        parse_megatron(text, "x.sh", 8)
