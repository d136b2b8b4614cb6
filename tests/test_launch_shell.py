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
from tests.conftest import TORCHRUN_STUB

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
    stub.write_text(TORCHRUN_STUB)
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


# --- if/elif/else, command substitution, launchers ----------------------------------------------

CHOOSE = """#!/bin/bash
SIZE=${SIZE:-8b}
if [ "$SIZE" == "8b" ]; then
    LAYERS=32
elif [[ $SIZE = 70b ]]; then
    LAYERS=80
else
    LAYERS=16
fi
if [ "$SIZE" != "8b" ]; then echo "large" >&2; fi
torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers $LAYERS --hidden-size 4096 \\
    --num-attention-heads 32 --seq-length 4096 --max-position-embeddings 4096 --micro-batch-size 1 --vocab-size 32000
"""


@pytest.mark.parametrize("preset, layers", [(None, 32), ({"SIZE": "70b"}, 80), ({"SIZE": "1b"}, 16)])
def test_if_elif_else_follows_the_branch_bash_runs(preset, layers):
    assert parse_megatron(CHOOSE, "x.sh", 8, variables=preset).model.num_layers == layers


@pytest.mark.skipif(BASH is None, reason="bash is not installed")
@pytest.mark.parametrize("size, layers", [("8b", "32"), ("70b", "80"), ("1b", "16")])
def test_if_branches_agree_with_bash(size, layers, tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "torchrun").write_text('#!/bin/bash\nprintf "%s\\0" "$@"\n')
    (bin_dir / "torchrun").chmod(0o755)
    (tmp_path / "x.sh").write_text(CHOOSE)
    env = {"PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}", "SIZE": size}
    proc = subprocess.run([BASH, str(tmp_path / "x.sh")], capture_output=True, text=True, env=env, timeout=60)
    argv = proc.stdout.split("\0")
    assert argv[argv.index("--num-layers") + 1] == layers


def test_nested_if_and_integer_tests():
    text = (
        "#!/bin/bash\nNODES=4\nTP=1\n"
        'if [ "$NODES" -ge 2 ]; then\n  if [ $NODES -lt 4 ]; then TP=2; else TP=8; fi\nfi\n'
        f"torchrun pretrain_gpt.py {SHAPE} --vocab-size 32000 --tensor-model-parallel-size $TP\n"
    )
    assert parse_megatron(text, "x.sh", 32).config.tp == 8


def test_undeterminable_branch_is_an_error_naming_the_variable():
    text = CHOOSE.replace("SIZE=${SIZE:-8b}\n", "")
    with pytest.raises(
        SpecError,
        match=r"--num-layers takes its value from a branch of the if/case on line 2.*'SIZE'.*--set SIZE=",
    ):
        parse_megatron(text, "x.sh", 8)


def test_training_command_inside_an_undeterminable_branch_is_an_error():
    text = f'#!/bin/bash\nif [ "$MODE" = train ]; then\n  torchrun pretrain_gpt.py {SHAPE} --vocab-size 32000\nfi\n'
    with pytest.raises(
        SpecError, match=r"line 3: the training command runs in a branch of the if/case on line 2.*MODE"
    ):
        parse_megatron(text, "x.sh", 8)
    assert parse_megatron(text, "x.sh", 8, variables={"MODE": "train"}).model.num_layers == 32


def test_undeterminable_if_that_sets_nothing_used_is_harmless():
    text = (
        '#!/bin/bash\nif [ -f "$HOME/.env" ]; then source "$HOME/.env"; fi\n'
        f"torchrun pretrain_gpt.py {SHAPE} --vocab-size 32000\n"
    )
    assert parse_megatron(text, "x.sh", 8).model.num_layers == 32


@pytest.mark.parametrize(
    "line",
    [
        'MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        'export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        "MASTER_ADDR=`scontrol show hostnames $SLURM_JOB_NODELIST | head -n 1`",
    ],
)
def test_command_substitution_that_does_not_matter_is_harmless(line):
    """Even passed through a bash -c string, whose inner shell would otherwise see its | and (."""
    text = (
        f'#!/bin/bash\n{line}\nDIST="--nnodes 2 --master-addr $MASTER_ADDR"\n'
        f'srun bash -c "torchrun $DIST pretrain_gpt.py {SHAPE} --vocab-size 32000"\n'
    )
    back = parse_megatron(text, "x.sh", 16)
    assert back.model.num_layers == 32 and back.rejected == ()


def test_command_substitution_a_flag_needs_is_an_error_naming_it():
    text = f"#!/bin/bash\nTP=$(nvidia-smi -L | wc -l)\ntorchrun pretrain_gpt.py {SHAPE} --vocab-size 32000 --tensor-model-parallel-size $TP\n"
    with pytest.raises(
        SpecError, match=r"takes its value from \$\(nvidia-smi -L \| wc -l\), which planner cannot evaluate"
    ):
        parse_megatron(text, "x.sh", 8)


@pytest.mark.parametrize(
    "launcher",
    [
        "torchrun --nproc_per_node 8 --nnodes 1 --standalone --master-port=29500",
        "python -m torch.distributed.run --nproc-per-node 8 --rdzv-backend c10d",
    ],
)
def test_launcher_arguments_are_not_megatrons(launcher):
    """A training script named by a variable the script never sets: torchrun's own options are
    told from the script's by torchrun's parser's table."""
    text = f"#!/bin/bash\n{launcher} $TRAIN_SCRIPT {SHAPE} --vocab-size 32000\n"
    back = parse_megatron(text, "x.sh", 8)
    assert back.rejected == () and back.is_script and "--nnodes" not in back.flags


def test_check_cli_set(run_cli, tmp_path):
    path = tmp_path / "choose.sh"
    path.write_text(
        "#!/bin/bash\nexport CUDA_DEVICE_MAX_CONNECTIONS=1\n"
        + CHOOSE.replace("#!/bin/bash\nSIZE=${SIZE:-8b}\n", "")
    )
    res = run_cli("check", str(path), "-c", "dgx-h100", "-n", "1")
    assert res.exit_code == 1 and "--set SIZE=VALUE" in res.stdout
    res = run_cli("check", str(path), "-c", "dgx-h100", "-n", "1", "--set", "SIZE=1b", "--json")
    assert res.exit_code == 0 and '"passed": true' in res.stdout, res.stdout
    res = run_cli("check", str(path), "-c", "dgx-h100", "-n", "1", "--set", "1SIZE")
    assert res.exit_code == 2


def test_nested_if_under_an_undeterminable_one_is_unknown_too():
    text = (
        '#!/bin/bash\nTP=1\nif [ "$BIG" = 1 ]; then\n  if [ 1 -eq 1 ]; then TP=8; fi\nfi\n'
        f"torchrun pretrain_gpt.py {SHAPE} --vocab-size 32000 --tensor-model-parallel-size $TP\n"
    )
    with pytest.raises(SpecError, match="if/case on line 3, which depends on 'BIG'"):
        parse_megatron(text, "x.sh", 8)
    assert parse_megatron(text, "x.sh", 8, variables={"BIG": "1"}).config.tp == 8
    assert parse_megatron(text, "x.sh", 8, variables={"BIG": "0"}).config.tp == 1


def test_unbalanced_if_is_an_error_not_a_traceback():
    for text in ("#!/bin/bash\nfi\n", "#!/bin/bash\nif [ 1 = 1 ]; then\nA=1\n", "#!/bin/bash\nelse\n"):
        with pytest.raises(SpecError, match="x.sh: "):
            parse_megatron(text + f"torchrun pretrain_gpt.py {SHAPE}\n", "x.sh", 8)


def test_unclosed_quote_is_an_error_naming_its_line():
    text = f'#!/bin/bash\nTP=2\nX="never closed\ntorchrun pretrain_gpt.py {SHAPE}\n'
    with pytest.raises(SpecError, match="x.sh: line 3: a quote opened here is never closed"):
        parse_megatron(text, "x.sh", 8)


CASE = """#!/bin/bash
case ${SIZE:-8b} in
    8b|8B)
        LAYERS=32
        TP=1
        ;;
    70*) LAYERS=80; TP=8 ;;
    *)
        LAYERS=16; TP=2
esac
torchrun pretrain_gpt.py --num-layers $LAYERS --tensor-model-parallel-size $TP --hidden-size 4096 \\
    --num-attention-heads 32 --seq-length 4096 --max-position-embeddings 4096 --micro-batch-size 1 \\
    --vocab-size 32000
"""


@pytest.mark.parametrize("size, layers, tp", [(None, 32, 1), ("8B", 32, 1), ("70b", 80, 8), ("1b", 16, 2)])
def test_case_runs_the_first_matching_arm(size, layers, tp, tmp_path):
    back = parse_megatron(CASE, "x.sh", 8, variables={"SIZE": size} if size else None)
    assert (back.model.num_layers, back.config.tp) == (layers, tp)
    if BASH is None:
        return
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "torchrun").write_text('#!/bin/bash\nprintf "%s\\0" "$@"\n')
    (bin_dir / "torchrun").chmod(0o755)
    (tmp_path / "x.sh").write_text(CASE)
    env = {"PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}", **({"SIZE": size} if size else {})}
    proc = subprocess.run([BASH, str(tmp_path / "x.sh")], capture_output=True, text=True, env=env, timeout=60)
    argv = proc.stdout.split("\0")
    assert argv[argv.index("--num-layers") + 1] == str(layers)
    assert argv[argv.index("--tensor-model-parallel-size") + 1] == str(tp)


def test_case_on_an_unset_variable_is_an_error_naming_it():
    text = CASE.replace("${SIZE:-8b}", "$SIZE")
    with pytest.raises(SpecError, match=r"if/case on line 2, which depends on 'SIZE'.*--set SIZE="):
        parse_megatron(text, "x.sh", 8)
