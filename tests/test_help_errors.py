"""Help and errors: case-insensitive names with suggestions, Hugging Face snapshot directories,
"nothing fits" naming the constraint that left out the most candidates, grouped help, completion."""

from __future__ import annotations

import json

import pytest

from planner.inputs.documents import did_you_mean, preset_name
from planner.inputs.errors import SpecError
from planner.inputs.models import load_model
from planner.profiles.hardware import load_cluster, load_gpu

HF_CONFIG = {
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 32,
    "vocab_size": 32000,
    "max_position_embeddings": 4096,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False,
}


def test_names_ignore_case():
    assert load_model("Llama3-70B") == load_model("llama3-70b")
    assert load_gpu("H100-SXM5-80GB") == load_gpu("h100-sxm5-80gb")
    assert load_cluster("DGX-H100", 2) == load_cluster("dgx-h100", 2)
    assert preset_name("LLAMA3-8B", ["llama3-8b", "llama3-70b"]) == "llama3-8b"
    assert preset_name("llama3", ["llama3-8b"]) is None


def test_unknown_names_suggest_the_closest():
    with pytest.raises(SpecError, match=r"did you mean llama3-70b or llama3-8b"):
        load_model("llama3-7b")
    with pytest.raises(SpecError, match=r"did you mean dgx-h100"):
        load_cluster("dgx-h10", 1)
    with pytest.raises(SpecError, match=r"did you mean h100-sxm5-80gb"):
        load_gpu("h100-sxm5-80")
    assert did_you_mean("zzzz", ["llama3-8b"]) == ""


def test_cli_models_show_any_case(run_cli):
    r = run_cli("models", "show", "Llama3-70B", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["name"] == "llama3-70b"
    r = run_cli("models", "show", "llama3-7b")
    assert r.exit_code == 1 and "did you mean llama3-70b or llama3-8b" in r.stderr
    r = run_cli("hardware", "show", "DGX-H100", "--json")
    assert r.exit_code == 0
    r = run_cli("hardware", "show", "dgx-h10")
    assert r.exit_code == 1 and "did you mean dgx-h100" in r.stderr


def test_hf_snapshot_directories(tmp_path, run_cli):
    snap = (
        tmp_path
        / "models--meta-llama--Llama-2-7b-hf"
        / "snapshots"
        / "8cca527612d856d7d32bd94f8103728d614eb852"
    )
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(HF_CONFIG))
    direct = load_model(str(snap / "config.json"))
    for arg in (snap, snap.parent.parent):  # the snapshot, or the repository folder with one snapshot
        m = load_model(str(arg))
        assert m.num_layers == direct.num_layers == 32 and m.name == "Llama-2-7b-hf"
    r = run_cli("models", "show", str(snap.parent.parent), "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["num_layers"] == 32
    other = snap.parent / "0000000000000000000000000000000000000000"
    other.mkdir()
    (other / "config.json").write_text(json.dumps(HF_CONFIG))
    with pytest.raises(SpecError, match="2 snapshots"):
        load_model(str(snap.parent.parent))
    with pytest.raises(SpecError, match="without config.json"):
        load_model(str(tmp_path))


SEARCH = ["search", "-m", "llama3-70b", "-c", "dgx-h100", "-n", "32", "-b", "512", "-s", "4096"]


@pytest.mark.parametrize(
    "flags,reason",
    [
        (["--tp", "3"], "tp=3 does not divide heads 64 / the world size 256"),
        # 256 GPUs have no factor 3: every (tp, cp) leaves pp=3 out, not the tp/NVLink rule
        (["--pp", "3"], "constraints: pp=3 does not divide the world size 256 ("),
        (["--tp", "16"], "tp=16 would leave the NVLink domain"),
        (
            ["--micro-batch-size", "3"],
            "constraints: micro-batch size 3 does not divide the batch per replica",
        ),
        (["--pp", "81"], "pp=81 exceeds the layers (80)"),
    ],
)
def test_nothing_fits_names_the_constraint(run_cli, flags, reason):
    r = run_cli(*SEARCH, *flags)
    assert r.exit_code == 3 and reason in r.stderr and "left out" in r.stderr
    assert "Traceback" not in r.stderr


def test_nothing_fits_in_memory_counts_the_shapes(run_cli):
    r = run_cli("search", "-m", "llama3.1-405b", "-c", "dgx-a100", "-n", "1", "-b", "8", "-s", "2048")
    assert r.exit_code == 3
    assert "nothing fits" in r.stderr and "shapes do not fit" in r.stderr


@pytest.mark.parametrize(
    "command,panels",
    [
        (["search"], ["Model & cluster", "Parallel space", "Memory", "Time, cost & energy", "Output"]),
        (["estimate"], ["Model & cluster", "Parallel layout", "Output"]),
        (["timeline"], ["Model & cluster", "Parallel layout", "Output"]),
        (["bubbles"], ["Model & cluster", "Parallel layout", "Bubble fill", "Output"]),
        (["check"], ["Model & cluster", "Memory", "Checks", "Output"]),
        (["export", "megatron"], ["Output"]),
        (["export", "torchtitan"], ["Output"]),
        (["sweep"], ["Model & cluster", "Parallel space", "Memory", "Output"]),
    ],
)
def test_help_groups_options_in_panels(run_cli, monkeypatch, command, panels):
    monkeypatch.setenv("COLUMNS", "200")
    r = run_cli(*command, "--help")
    assert r.exit_code == 0
    for panel in panels:
        assert f"─ {panel} ─" in r.stdout, panel
    assert "<bool>" not in r.stdout  # flags take no value
    # every option but --help sits in a named panel
    generic = r.stdout.split("─ Options ─", 1)[1].split("╰", 1)[0] if "─ Options ─" in r.stdout else ""
    assert generic.count("--") <= 1 and ("--help" in generic or not generic)


def test_help_documents_defaults_and_max_micro_batch_size(run_cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    out = run_cli("search", "--help").stdout
    line = next(x for x in out.splitlines() if "--max-micro-batch-size" in x)
    assert "Largest micro-batch searched, in sequences" in line
    assert "[default: 16]" in out and "in GiB" in out
    assert run_cli("search", *SEARCH[1:], "--max-micro-batch-size", "0").exit_code == 2


def test_shell_completion_is_offered(run_cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    out = run_cli("--help").stdout
    assert "--install-completion" in out and "--show-completion" in out
