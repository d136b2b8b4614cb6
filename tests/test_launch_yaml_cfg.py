"""Megatron-LM's ``--yaml-cfg FILE`` (planner/launch/megatron/yaml_cfg.py): the file's keys in place
of the command line's flags, as the pinned release's ``load_yaml`` replaces the parsed namespace;
its sections, renamed TransformerConfig fields, the findings of ``planner check``, and each way it
fails as a one-line error naming the file, the line and the key. The fixture tree
tests/data/megatron/yaml_cfg/ is written in the pattern of Megatron's experimental YAML configs, with
every TransformerConfig field; Megatron's rules for the file are tests/test_launch_yaml_rules.py."""

from pathlib import Path

import pytest

from planner.inputs.errors import SpecError
from planner.launch.check import check_file
from planner.launch.megatron.importer import parse_megatron
from planner.profiles.hardware import load_cluster

TREE = Path(__file__).parent / "data" / "megatron" / "yaml_cfg"
CONFIG = (TREE / "configs" / "gpt_1p3b.yaml").read_text()


def _line(needle: str) -> int:
    return next(n for n, line in enumerate(CONFIG.splitlines(), 1) if line.strip().startswith(needle))


def _read(path: Path, variables=None):
    return parse_megatron(path.read_text(), str(path), 8, variables=variables, path=path)


def test_the_yaml_file_replaces_the_command_line():
    imported = _read(TREE / "train.sh")
    c, m = imported.config, imported.model
    assert (c.tp, c.pp, c.micro_batch_size, c.recompute) == (2, 2, 2, "selective")  # not the flag's tp 8
    assert c.sequence_parallel and c.optimizer_sharding != "none"
    assert (m.num_layers, m.hidden_size, m.num_query_groups, m.vocab_size) == (24, 2048, 8, 32000)
    assert m.ffn_hidden_size == 5632 and imported.job.global_batch_size == 128
    assert "--swiglu" in imported.flags and "--disable-bias-linear" in imported.flags
    assert "--no-gradient-accumulation-fusion" not in imported.flags  # true: Megatron's default
    assert imported.yaml_cfg.overridden == ("--tensor-model-parallel-size",)
    assert set(imported.flag_lines.values()) == {8}  # annotated on the --yaml-cfg line


def test_check_reports_the_ignored_flags_and_unread_keys(tmp_path):
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "gpt_1p3b.yaml").write_text(CONFIG + "moe_expert_capacity_factor: 1.5\n")
    (tmp_path / "train.sh").write_text((TREE / "train.sh").read_text())
    verdict = check_file(str(tmp_path / "train.sh"), load_cluster("dgx-h100", 1))
    text = {f.message: f.level for f in verdict.findings}
    ignored = [m for m in text if "not read: --tensor-model-parallel-size" in m]
    assert len(ignored) == 1 and text[ignored[0]] == "warning"
    # an accepted flag planner does not model, named by its key and line; the fields at their
    # TransformerConfig defaults are not reported
    end = len(CONFIG.splitlines()) + 1
    unread = [m for m in text if "is not interpreted by planner" in m]
    assert unread == [
        f"configs/gpt_1p3b.yaml: line {end}: key moe_expert_capacity_factor is not interpreted by planner"
    ]


def test_an_args_file_finds_the_yaml_beside_it(tmp_path):
    (tmp_path / "gpt.yaml").write_text(CONFIG)
    args = tmp_path / "megatron_args.txt"
    args.write_text("--yaml-cfg gpt.yaml\n")
    assert _read(args).config.tp == 2


def _error(tmp_path: Path, config: str, launch: str = "python pretrain_gpt.py --yaml-cfg cfg.yaml\n") -> str:
    (tmp_path / "cfg.yaml").write_text(config)
    (tmp_path / "launch.sh").write_text(launch)
    with pytest.raises(SpecError) as exc:
        _read(tmp_path / "launch.sh")
    assert "\n" not in str(exc.value)
    return str(exc.value)


def test_environment_variables_are_not_substituted(tmp_path):
    msg = _error(
        tmp_path, CONFIG.replace("tensor_model_parallel_size: 2", "tensor_model_parallel_size: ${TP}")
    )
    assert msg.startswith(
        f"cfg.yaml: line {_line('tensor_model_parallel_size')}: model_parallel.tensor_model_parallel_size is '${{TP}}'"
    )
    assert "safe_load" in msg


def test_a_missing_section_is_an_error(tmp_path):
    msg = _error(tmp_path, CONFIG.replace("model_parallel:", "parallel:"))
    assert "no model_parallel section" in msg and "validate_yaml" in msg


def test_a_value_error_names_the_key(tmp_path):
    msg = _error(tmp_path, CONFIG.replace("micro_batch_size: 2", "micro_batch_size: two"))
    assert (
        msg == f"cfg.yaml: line {_line('micro_batch_size')}: micro_batch_size expects an integer, got 'two'"
    )
    msg = _error(tmp_path, CONFIG.replace("activation_func: swiglu", "activation_func: relu"))
    assert msg.startswith(
        f"cfg.yaml: line {_line('activation_func')}: language_model.activation_func is 'relu'"
    )


def test_the_file_must_be_beside_the_launch(tmp_path):
    (tmp_path / "launch.sh").write_text("python pretrain_gpt.py --yaml-cfg gone.yaml\n")
    with pytest.raises(
        SpecError, match=r"launch.sh: line 1: --yaml-cfg gone.yaml: .*gone.yaml does not exist"
    ):
        _read(tmp_path / "launch.sh")
    with pytest.raises(SpecError, match="inside the launch's directory"):
        (tmp_path / "launch.sh").write_text("python pretrain_gpt.py --yaml-cfg /etc/hostname\n")
        _read(tmp_path / "launch.sh")


def test_a_rejected_command_line_word_is_still_an_error(tmp_path):
    (tmp_path / "cfg.yaml").write_text(CONFIG)
    (tmp_path / "launch.sh").write_text("python pretrain_gpt.py --yaml-cfg cfg.yaml --tensor-parallel 2\n")
    assert "--tensor-parallel" in _read(tmp_path / "launch.sh").rejected
