"""The CLI: JSON on stdout, one-line errors on stderr, documented exit codes, stable output."""

import json

import pytest

EST = ["estimate", "-m", "llama3-70b", "-c", "dgx-h100", "-n", "8", "-b", "64", "-s", "4096"]


def test_version(run_cli):
    res = run_cli("--version")
    assert res.exit_code == 0 and res.stdout.startswith("planner ")


def test_models_show_json(run_cli):
    res = run_cli("models", "show", "llama3-70b", "--json")
    assert res.exit_code == 0
    d = json.loads(res.stdout)
    assert d["num_layers"] == 80 and d["hidden_size"] == 8192
    assert d["params_total"] == pytest.approx(70.6e9, rel=0.002)
    moe = json.loads(run_cli("models", "show", "mixtral-8x7b", "--json").stdout)
    assert moe["params_active"] == pytest.approx(12.9e9, rel=0.01)


def test_models_list_and_hardware(run_cli):
    d = json.loads(run_cli("models", "list", "--json").stdout)
    assert {"llama3-70b", "gpt3-175b", "mixtral-8x22b"} <= {m["name"] for m in d["models"]}
    h = json.loads(run_cli("hardware", "show", "dgx-h100", "--json").stdout)
    assert h["gpus_per_node"] == 8 and h["gpu"]["name"] == "h100-sxm5-80gb"
    assert h["gpu"]["memory_bytes"] == 80 * 2**30
    g = json.loads(run_cli("hardware", "show", "b200", "--json").stdout)
    assert g["peak_flop_per_s"]["fp8"] == pytest.approx(4.5e15)
    lst = json.loads(run_cli("hardware", "list", "--json").stdout)
    assert len(lst["gpus"]) >= 10 and len(lst["clusters"]) >= 9
    assert run_cli("models", "list").exit_code == 0
    table = run_cli("hardware", "list").stdout
    v100 = next(line for line in table.splitlines() if "v100-sxm2-32gb" in line)
    # V100 has fp16 tensor cores only: its bf16 and fp8 cells say '-', not a peak of 0.
    assert [c.strip() for c in v100.strip("│ ").split("│")][2:5] == ["-", "125", "-"]


def test_command_listing_one_line_summaries(run_cli):
    """``planner --help`` lists each command by its first docstring paragraph, joined: a docstring
    wrapped in the source does not break the listing mid-sentence."""
    from planner.cli import app

    def commands(typer_app):
        yield from typer_app.registered_commands
        for group in typer_app.registered_groups:
            yield from commands(group.typer_instance)

    infos = list(commands(app))
    assert len(infos) >= 15 and all(i.short_help and "\n" not in i.short_help for i in infos)
    calibrate = next(i for i in infos if i.callback.__name__ == "calibrate")
    assert calibrate.short_help.startswith(
        "Fit GEMM/attention/memory efficiency, NVLink and network bandwidth"
    )
    assert run_cli("--help").exit_code == 0


@pytest.mark.parametrize(
    "content, fragment",
    [
        ("schema_version: 1\nkind: model\nname: x\n  bad: [\n", "malformed YAML"),
        (
            "schema_version: 1\nkind: model\nname: x\nnum_layers: -2\nhidden_size: 64\nnum_attention_heads: 2\n"
            "vocab_size: 10\nmax_position_embeddings: 8\n",
            "'num_layers': must be positive",
        ),
        (
            "schema_version: 1\nkind: model\nname: x\nnum_layers: 2\nhidden_size: 64\nnum_attention_heads: 2\n"
            "vocab_size: 10\nmax_position_embeddings: 8\nwidth: 3\n",
            "unknown key 'width'",
        ),
        (
            "schema_version: 1\nkind: model\nname: x\nnum_layers: 2\nhidden_size: 64\nnum_attention_heads: 2\n"
            "vocab_size: 10\nmax_position_embeddings: 8\nnum_experst: 8\n",
            "unknown key 'num_experst' (did you mean num_experts",
        ),
    ],
)
def test_bad_files_exit_1_without_traceback(run_cli, tmp_path, content, fragment):
    p = tmp_path / "model.yaml"
    p.write_text(content)
    res = run_cli("models", "show", str(p), "--json")
    assert res.exit_code == 1
    assert fragment in res.stderr and str(p) in res.stderr
    assert "Traceback" not in res.stderr and res.stdout == ""
    assert len(res.stderr.strip().splitlines()) == 1


def test_unknown_preset_and_usage_errors(run_cli):
    res = run_cli("models", "show", "gpt-9000")
    assert res.exit_code == 1 and "unknown model 'gpt-9000'" in res.stderr
    res = run_cli("hardware", "show", "tpu")
    assert res.exit_code == 1 and "unknown hardware 'tpu'" in res.stderr
    res = run_cli("estimate", "-m", "llama3-70b")
    assert res.exit_code == 2
    res = run_cli(*EST, "--recompute", "sometimes")
    assert res.exit_code == 2 and "allowed values: none, selective, op, full" in res.stderr


def test_estimate_json(run_cli):
    res = run_cli(*EST, "--tp", "8", "--pp", "4", "--vpp", "5", "--json")
    assert res.exit_code == 0, res.stderr
    d = json.loads(res.stdout)
    for key in (
        "step_time_s",
        "tokens_per_s",
        "tokens_per_s_per_gpu",
        "mfu",
        "peak_memory_bytes",
        "fits",
        "memory",
        "time",
    ):
        assert key in d
    assert d["config"]["schedule"] == "interleaved" and d["config"]["dp"] == 2
    assert 0 < d["mfu"] < 1 and d["fits"] is True
    assert d["tokens_per_s"] == pytest.approx(64 * 4096 / d["step_time_s"], rel=1e-3)  # 4 significant digits
    # same inputs, same bytes
    assert run_cli(*EST, "--tp", "8", "--pp", "4", "--vpp", "5", "--json").stdout == res.stdout
    human = run_cli(*EST, "--tp", "8", "--pp", "4")
    assert human.exit_code == 0 and "step time" in human.stdout


def test_estimate_that_does_not_fit_exits_0(run_cli):
    res = run_cli(*EST, "--tp", "1", "--pp", "1", "--optimizer-sharding", "none", "--json")
    assert res.exit_code == 0
    d = json.loads(res.stdout)
    assert d["fits"] is False and d["memory"]["shortfall_bytes"] > 0
    assert d["memory"]["per_stage"][d["memory"]["worst_stage"]]["fits"] is False
    human = run_cli(*EST, "--tp", "1", "--pp", "1", "--optimizer-sharding", "none")
    assert human.exit_code == 0 and "does not fit" in human.stderr


def test_invalid_configuration_exits_1(run_cli):
    res = run_cli(*EST, "--tp", "8", "--pp", "3")
    assert res.exit_code == 1 and "not divisible by tp*pp*cp" in res.stderr
    res = run_cli(*EST, "--tp", "8", "--pp", "1", "--micro-batch-size", "3")
    assert (
        res.exit_code == 1 and "global batch size 64 is not divisible by micro-batch size x dp" in res.stderr
    )
    res = run_cli(
        "estimate",
        "-m",
        "llama3-70b",
        "-c",
        "dgx-a100",
        "-n",
        "8",
        "-b",
        "64",
        "-s",
        "4096",
        "--tp",
        "8",
        "--precision",
        "fp8",
    )
    assert res.exit_code == 1 and "FP8" in res.stderr


def test_debug_shows_traceback(run_cli):
    from planner.inputs.errors import SpecError

    with pytest.raises(SpecError):
        run_cli("--debug", "models", "show", "nope")


def test_cli_option_set_is_pinned(run_cli):
    # The interface cannot drift unnoticed (torchtitan pins its CLI options the same way).
    import typer

    from planner.cli import app

    cmd = typer.main.get_command(app)
    est = cmd.commands["estimate"]
    names = sorted(o for p in est.params if type(p).__name__.endswith("Option") for o in p.opts)
    assert names == sorted(
        [
            "--model",
            "-m",
            "--cluster",
            "-c",
            "--global-batch-size",
            "-b",
            "--seq-len",
            "-s",
            "--nodes",
            "-n",
            "--tp",
            "--pp",
            "--cp",
            "--ep",
            "--fsdp-shard",
            "--offload-layers",
            "--optimizer-instances",
            "--rank-order",
            "--vpp",
            "--micro-batch-size",
            "--recompute",
            "--recompute-num-layers",
            "--recompute-modules",
            "--sequence-parallel",
            "--optimizer-sharding",
            "--schedule",
            "--layers-per-stage",
            "--decoder-first-pipeline-num-layers",
            "--decoder-last-pipeline-num-layers",
            "--precision",
            "--plan",
            "--profile",
            "--software",
            "--framework",
            "--tp-comm-overlap",
            "--moe-dispatcher",
            "--grad-dtype",
            "--optimizer-state-dtype",
            "--no-gradient-accumulation-fusion",
            "--fp8-recipe",
            "--attention-impl",
            "--moe-a2a-overlap",
            "--cuda-graph-scope",
            "--eager-ops",
            "--finetune",
            "--lora-rank",
            "--lora-targets",
            "--frozen-weight-dtype",
            "--packed-avg-doc-len",
            "--json",
            "--quiet",
            "-q",
        ]
    )


def test_timeline_and_bubbles_take_every_estimate_option():
    """The three commands describe one configuration the same way (their lists had drifted once:
    --fsdp-shard was estimate's only); each adds only its own output options."""
    import typer

    from planner.cli import app

    cmd = typer.main.get_command(app)

    def options(name):
        return {o for p in cmd.commands[name].params if type(p).__name__.endswith("Option") for o in p.opts}

    assert options("estimate") <= options("timeline")
    assert options("estimate") <= options("bubbles")


def test_grad_dtype_flag(run_cli, tmp_path):
    """--grad-dtype: bf16 gradient reduction halves the data-parallel traffic (faster step), shows
    in --json and the table; a bad value and --plan together with it are clear errors; a framework
    that cannot reduce in that dtype refuses it."""
    import json

    args = ("--model", "llama3-8b", "--cluster", "dgx-h100", "--nodes", "2", "--global-batch-size", "64")
    layout = ("--seq-len", "4096", "--tp", "2", "--pp", "1", "--micro-batch-size", "1")
    base = run_cli("estimate", *args, *layout, "--json")
    bf16 = run_cli("estimate", *args, *layout, "--grad-dtype", "bf16", "--json")
    assert base.exit_code == 0 and bf16.exit_code == 0, bf16.stderr
    a, b = json.loads(base.stdout), json.loads(bf16.stdout)
    assert (a["job"]["grad_dtype"], b["job"]["grad_dtype"]) == ("fp32", "bf16")
    assert b["step_time_s"] < a["step_time_s"]
    assert "gradient reduction dtype" in run_cli("estimate", *args, *layout, "--grad-dtype", "bf16").stdout
    assert "gradient reduction dtype" not in run_cli("estimate", *args, *layout).stdout
    bad = run_cli("estimate", *args, *layout, "--grad-dtype", "int8")
    assert bad.exit_code == 1
    assert "grad_dtype 'int8' is not allowed; allowed values: fp32, bf16, fp16" in bad.stderr
    titan = run_cli("search", *args, "--seq-len", "4096", "--grad-dtype", "bf16", "--framework", "torchtitan")
    assert titan.exit_code != 0 and "does not reduce bf16 gradients in bf16" in titan.stderr, titan.stderr
    plan = tmp_path / "p.yaml"
    found = run_cli("search", *args, "--seq-len", "4096", "--grad-dtype", "bf16", "--out", str(plan))
    assert found.exit_code == 0, found.stderr
    assert "grad_dtype: bf16" in plan.read_text()
    res = run_cli("estimate", "--plan", str(plan), "--grad-dtype", "fp32")
    assert res.exit_code == 2 and "--plan) gives the model" in res.stderr


def test_plan_file_as_argument(run_cli, tmp_path):
    """estimate, timeline and bubbles take a plan file as their argument, as check, export, report
    and whatif do: the same output as --plan; both at once is a usage error naming the two."""
    plan = tmp_path / "p.yaml"
    args = ["-m", "llama3-8b", "-c", "dgx-h100", "-n", "1", "-b", "32", "-s", "2048", "--out", str(plan)]
    assert run_cli("search", *args).exit_code == 0
    for command in ("estimate", "timeline", "bubbles"):
        positional = run_cli(command, str(plan), "--json")
        assert positional.exit_code == 0, positional.stderr
        assert positional.stdout == run_cli(command, "--plan", str(plan), "--json").stdout
    other = tmp_path / "q.yaml"
    other.write_text(plan.read_text())
    both = run_cli("timeline", str(plan), "--plan", str(other))
    assert both.exit_code == 2 and "p.yaml" in both.stderr and "q.yaml" in both.stderr, both.stderr
    # the same file twice is one plan, not two
    assert run_cli("bubbles", str(plan), "--plan", str(plan), "--json").exit_code == 0
    # a positional plan with configuration flags: the usage error names the argument as well
    mixed = run_cli("estimate", str(plan), "--tp", "2")
    assert mixed.exit_code == 2 and "a plan file (the argument, or --plan) gives" in mixed.stderr
