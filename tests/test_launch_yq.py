"""The YAML a launch reads with ``yq`` and ``envsubst`` (planner/launch/megatron/yq.py, shell.py),
in the pattern of the Megatron MoE Model Zoo's ``sbatch_benchmarking.sh``: the model YAML filled in
from the environment by ``envsubst < F > F.tmp``, its ``MODEL_ARGS`` turned into flags by the Zoo's
yq program, one value read by a path; each construct, and each way it fails as a one-line error
naming the line. The fixture tree tests/data/megatron/zoo/ is written in the Zoo's pattern."""

from pathlib import Path

import pytest

from planner.inputs.errors import SpecError
from planner.launch.megatron.arguments import megatron_words
from planner.launch.megatron.importer import parse_megatron
from planner.launch.megatron.yq import evaluate

ZOO = Path(__file__).parent / "data" / "megatron" / "zoo" / "sbatch_benchmarking.sh"
PROGRAM = (
    '... comments="" | .MODEL_ARGS | to_entries | .[] | select(.value != "false") | '
    'with(select(.value == "true"); .value = "") | [.key + " " + .value] | join("")'
)


def _words(files: dict, tmp_path: Path, preset: dict | None = None) -> list[str]:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    script = tmp_path / "launch.sh"
    return [w for w, _ in megatron_words(script.read_text(), preset, script)[0]]


def test_the_zoo_launch_reads_its_model_yaml():
    imported = parse_megatron(ZOO.read_text(), str(ZOO), 32, path=ZOO)
    c = imported.config
    assert (c.tp, c.pp, c.ep, c.etp, c.vpp, c.micro_batch_size) == (1, 4, 8, 1, 2, 1)
    assert imported.model.num_layers == 32 and imported.model.num_experts == 8
    assert imported.job.global_batch_size == 256 and imported.job.seq_length == 4096
    assert c.sequence_parallel and c.optimizer_sharding != "none"
    # `--qk-layernorm: false` is left out by select(.value != "false"); true values are switches.
    assert "--qk-layernorm" not in imported.flags and imported.flags["--bf16"] is None
    assert imported.flags["--moe-grouped-gemm"] is None  # ${MOE_GROUPED_GEMM} = true, then a switch
    assert imported.flag_lines["--num-layers"] == 40  # the line that runs ${TRAINING_CMD}


def test_set_reaches_the_yaml_through_envsubst():
    imported = parse_megatron(ZOO.read_text(), str(ZOO), 32, variables={"TP": "2", "VPP": "1"}, path=ZOO)
    assert (imported.config.tp, imported.config.vpp) == (2, 1)
    assert "--num-layers-per-virtual-pipeline-stage" not in imported.flags  # LAYERS_PER_VP=false


@pytest.mark.parametrize(
    "program, expected",
    [
        (".a.b", ["7"]),
        ('.a."--c-d"', ["1e-2"]),
        ('.a["--c-d"]', ["1e-2"]),
        (".a.missing", ["null"]),
        (".s", ["two words"]),
        (PROGRAM.replace("MODEL_ARGS", "m"), ["--x 1", "--on "]),
        ('.m | to_entries | .[] | [.key + "=" + .value] | join(" ")', ["--x=1", "--on=true", "--off=false"]),
    ],
)
def test_yq_programs(program, expected):
    text = "a:\n  b: 7\n  --c-d: 1e-2\ns: 'two words'\nm:\n  --x: 1\n  --on: true\n  --off: false\n"
    assert evaluate(program, text) == expected


def test_a_program_not_read_is_not_evaluated():
    assert evaluate(".a | keys", "a: {b: 1}\n") is None
    assert evaluate('.a | select(.b == "1")', "a: {b: 1}\n") is None


@pytest.mark.parametrize(
    "form", ["yq -r '.m.layers' m.yaml", "yq e '.m.layers' m.yaml", "yq eval .m.layers m.yaml"]
)
def test_yq_forms(form, tmp_path):
    files = {
        "m.yaml": "m:\n  layers: 24\n",
        "launch.sh": f"L=$({form})\npython pretrain_gpt.py --num-layers $L\n",
    }
    assert _words(files, tmp_path) == ["--num-layers", "24"]


def test_envsubst_uses_the_environment_only(tmp_path):
    files = {
        "m.yaml": "MODEL_ARGS:\n  --num-layers: ${LAYERS}\n  --hidden-size: x${HIDDEN}\n",
        "launch.sh": (
            "export LAYERS=12\nHIDDEN=4096\nenvsubst < m.yaml > m.yaml.tmp\n"
            f"ARGS=$(yq '{PROGRAM}' m.yaml.tmp | tr '\\n' ' ')\npython pretrain_gpt.py $ARGS\n"
        ),
    }
    # HIDDEN is set but not exported: envsubst(1) does not see it.
    assert _words(files, tmp_path) == ["--num-layers", "12", "--hidden-size", "x"]


def test_nested_default_in_a_default(tmp_path):
    files = {"launch.sh": 'ROOT=/opt/m\nS=${S:-"${ROOT}/pretrain_gpt.py"}\npython $S --num-layers 2\n'}
    assert _words(files, tmp_path) == ["--num-layers", "2"]


def _error(files: dict, tmp_path: Path) -> str:
    with pytest.raises(SpecError) as exc:
        _words(files, tmp_path)
    return str(exc.value)


def test_a_variable_nobody_exports_is_named_with_the_line(tmp_path):
    files = {
        "m.yaml": "MODEL_ARGS:\n  --tensor-model-parallel-size: ${TP}\n",
        "launch.sh": (
            f"envsubst < m.yaml > m.tmp\nARGS=$(yq '{PROGRAM}' m.tmp)\npython pretrain_gpt.py $ARGS\n"
        ),
    }
    msg = _error(files, tmp_path)
    assert msg.startswith("line 2: yq: m.tmp:") and "--tensor-model-parallel-size needs TP" in msg
    assert "--set TP=VALUE" in msg and "\n" not in msg


def test_a_missing_yaml_is_an_error_naming_the_line(tmp_path):
    msg = _error({"launch.sh": "X=1\nL=$(yq '.a' gone.yaml)\n"}, tmp_path)
    assert msg.startswith("line 2: yq reads gone.yaml") and "does not exist" in msg


def test_a_mapping_result_and_bad_yaml_are_errors(tmp_path):
    files = {"m.yaml": "a:\n  b: 1\n", "launch.sh": "L=$(yq '.a' m.yaml)\n"}
    assert "scalar values" in _error(files, tmp_path)
    files = {"m.yaml": "a: [1\n", "launch.sh": "L=$(yq '.a' m.yaml)\n"}
    assert _error(files, tmp_path).startswith("line 1: m.yaml: not valid YAML")


def test_a_flag_from_an_unread_program_names_the_command(tmp_path):
    files = {
        "m.yaml": "a: 1\n",
        "launch.sh": "L=$(yq '.a | keys' m.yaml)\npython pretrain_gpt.py --num-layers $L "
        + "--hidden-size 8\n",
    }
    (tmp_path / "m.yaml").write_text("a: 1\n")
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    script = tmp_path / "launch.sh"
    with pytest.raises(SpecError, match=r"line 2: --num-layers takes its value from \$\(yq"):
        parse_megatron(script.read_text(), "launch.sh", 8, path=script)


def test_a_file_outside_the_script_directory_is_not_read(tmp_path):
    outside = tmp_path / "elsewhere.yaml"
    outside.write_text("a: 3\n")
    (tmp_path / "d").mkdir()
    files = {"d/launch.sh": f"L=$(yq '.a' {outside})\npython pretrain_gpt.py --num-layers $L\n"}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    script = tmp_path / "d" / "launch.sh"
    words = [w for w, _ in megatron_words(script.read_text(), None, script)[0]]
    assert words[0] == "--num-layers" and "unresolved" in words[1]
