"""Adam's state dtypes (``JobSpec.master_dtype``, ``JobSpec.optimizer_state_dtype``): the bytes they
keep and move, the plan file, what each framework can launch, the Megatron export, import and
checker rules (``--use-precision-aware-optimizer``), the CLI, and the calibration records whose
recipes keep bf16 moments."""

import json

import pytest

from cost_models.constraints import resolve
from cost_models.estimate import adam_bytes_per_param, estimate
from cost_models.memory import bytes_per_param
from cost_models.parallel import ParallelConfig
from planner.frameworks import get_framework
from planner.inputs.errors import SpecError
from planner.inputs.jobs import job_from_mapping, make_job
from planner.inputs.models import load_model
from planner.launch.megatron.export_args import argv, megatron_args
from planner.launch.megatron.importer import parse_megatron
from planner.launch.megatron.rules import megatron_findings
from planner.plans.plan_file import PlanInputs, job_to_mapping
from planner.profiles.hardware import load_cluster


def _job(**kw):
    return make_job(global_batch_size=256, seq_length=4096, **kw)


def test_bytes_per_parameter_follow_the_dtypes():
    # fp32 master (4) + two fp32 moments (8) = 12, sharded over 8 by the distributed optimizer
    assert bytes_per_param(_job(), "distributed", 8) == pytest.approx((2.0, 4.0, 12 / 8))
    # bf16 moments: 4 + 2 x 2 = 8 (Megatron-Bridge's DeepSeek-V3 recipe)
    assert bytes_per_param(_job(optimizer_state_dtype="bf16"), "distributed", 8) == pytest.approx(
        (2.0, 4.0, 8 / 8)
    )
    # fp16 master weights with bf16 moments: 2 + 4 = 6, unsharded
    assert bytes_per_param(_job(master_dtype="fp16", optimizer_state_dtype="bf16"), "none", 8) == (
        pytest.approx((2.0, 4.0, 6.0))
    )
    # the step's traffic (adam_bytes_per_param): grad norm reads the fp32 main gradient (4); Adam
    # reads it (4), reads and writes master (2 m) and moments (4 s); the 16-bit weight is copied
    # from the master (read m, write 2)
    assert adam_bytes_per_param(_job()) == 4 + 28 + 6
    # bf16 moments select the precision-aware optimizer: FusedAdam writes the weight itself (2)
    assert adam_bytes_per_param(_job(optimizer_state_dtype="bf16")) == 4 + 20 + 2
    assert adam_bytes_per_param(_job(master_dtype="fp16", optimizer_state_dtype="bf16")) == 4 + 16 + 2


@pytest.mark.parametrize(
    "dtypes, expected",
    [
        # bf16 gradients without the precision-aware optimizer: copied to fp32 (read 2, write 4)
        ({"grad_dtype": "bf16"}, 6 + 4 + 28 + 6),
        # ... and read in place by it (the DeepSeek-V3 recipe: bf16 gradients and moments)
        ({"grad_dtype": "bf16", "optimizer_state_dtype": "bf16"}, 2 + 2 + 8 + 8 + 2),
        # fp16: fp16 gradients copied, then unscaled and checked for inf (read and write 4)
        ({"precision": "fp16"}, 6 + 8 + 4 + 28 + 6),
    ],
)
def test_optimizer_step_traffic_follows_its_kernels(dtypes, expected):
    assert adam_bytes_per_param(_job(**dtypes)) == expected


def _inputs(job, sharding="distributed", framework="megatron"):
    m = load_model("llama3-8b")
    cluster = load_cluster("dgx-h100", 2)
    c = resolve(m, cluster, job, ParallelConfig(tp=2, pp=1, micro_batch_size=1, optimizer_sharding=sharding))
    return PlanInputs(m, cluster, job, c, (), get_framework(framework))


def test_lower_moments_lower_the_optimizer_memory_and_step():
    fp32, bf16 = _inputs(_job()), _inputs(_job(optimizer_state_dtype="bf16"))
    e32, e16 = (estimate(i.model, i.cluster, i.job, i.config) for i in (fp32, bf16))
    s32, s16 = e32.stages[0], e16.stages[0]
    assert s16.memory.optimizer_bytes == pytest.approx(s32.memory.optimizer_bytes * 8 / 12)
    assert s16.memory.weights_bytes == s32.memory.weights_bytes
    assert s16.optimizer_s == pytest.approx(s32.optimizer_s * 26 / 38)


def test_plan_file_writes_the_moment_dtype_only_when_set():
    assert "optimizer_state_dtype" not in job_to_mapping(_job())
    data = job_to_mapping(_job(optimizer_state_dtype="bf16"))
    assert data["optimizer_state_dtype"] == "bf16"
    assert job_from_mapping(data, "plan.yaml").optimizer_state_dtype == "bf16"
    with pytest.raises(SpecError, match="optimizer_state_dtype.*allowed values: fp32, bf16, fp16"):
        job_from_mapping({**data, "optimizer_state_dtype": "fp8"}, "plan.yaml")


def test_frameworks_launch_only_the_dtypes_they_have():
    megatron, torchtitan = get_framework("megatron"), get_framework("torchtitan")

    def refusals(fw, job, sharding="distributed"):
        i = _inputs(job, sharding)
        return fw.violations(i.model, i.cluster, i.job, i.config)

    assert not refusals(megatron, _job(optimizer_state_dtype="bf16"))
    assert not refusals(megatron, _job(master_dtype="fp16", optimizer_state_dtype="fp16"))
    assert any("keeps no bf16 master weights" in v for v in refusals(megatron, _job(master_dtype="bf16")))
    # OptimizerConfig: the precision-aware optimizer needs the distributed optimizer
    assert any(
        "only with optimizer sharding distributed, not 'none'" in v
        for v in refusals(megatron, _job(optimizer_state_dtype="bf16"), "none")
    )
    assert any(
        "keeps no fp32 master weights with bf16 Adam moments" in v
        for v in refusals(torchtitan, _job(optimizer_state_dtype="bf16"), "full")
    )
    assert not refusals(torchtitan, _job(), "full")


def test_megatron_export_sets_the_precision_aware_optimizer_and_imports_back():
    plain = argv(megatron_args(_inputs(_job())))
    assert "--use-precision-aware-optimizer" not in plain
    words = argv(megatron_args(_inputs(_job(master_dtype="fp16", optimizer_state_dtype="bf16"))))
    i = words.index("--use-precision-aware-optimizer")
    assert words[i : i + 7] == [
        "--use-precision-aware-optimizer",
        "--main-params-dtype",
        "fp16",
        "--exp-avg-dtype",
        "bf16",
        "--exp-avg-sq-dtype",
        "bf16",
    ]
    back = parse_megatron(" ".join(words), "args.txt", 16)
    assert (back.job.master_dtype, back.job.optimizer_state_dtype) == ("fp16", "bf16")
    assert not {"--use-precision-aware-optimizer", "--exp-avg-dtype", "--main-params-dtype"} & set(
        back.unknown
    )
    assert not [m for level, m, _ in megatron_findings(back, load_cluster("dgx-h100", 2)) if level == "error"]
    # without the switch Megatron keeps fp32 (and its OptimizerConfig refuses the dtype flags)
    bare = [w for w in words if w != "--use-precision-aware-optimizer"]
    imp = parse_megatron(" ".join(bare), "args.txt", 16)
    assert (imp.job.master_dtype, imp.job.optimizer_state_dtype) == ("fp32", "fp32")
    errors = [m for level, m, _ in megatron_findings(imp, load_cluster("dgx-h100", 2)) if level == "error"]
    assert any("can only be fp32 without --use-precision-aware-optimizer" in e for e in errors), errors


def test_megatron_import_refusals():
    base = argv(megatron_args(_inputs(_job(optimizer_state_dtype="bf16"))))
    mixed = [
        *base[: base.index("--exp-avg-sq-dtype") + 1],
        "fp32",
        *base[base.index("--exp-avg-sq-dtype") + 2 :],
    ]
    with pytest.raises(SpecError, match="--exp-avg-dtype bf16 with --exp-avg-sq-dtype fp32"):
        parse_megatron(" ".join(mixed), "args.txt", 16)
    no_dist = [w for w in base if w != "--use-distributed-optimizer"]
    imp = parse_megatron(" ".join(no_dist), "args.txt", 16)
    errors = [m for level, m, _ in megatron_findings(imp, load_cluster("dgx-h100", 2)) if level == "error"]
    assert any("only supported with the distributed optimizer" in e for e in errors), errors


def test_cli_estimate_takes_the_moment_dtype(run_cli):
    args = ["estimate", "-m", "llama3-8b", "-c", "dgx-h100", "-n", "2", "-b", "256", "-s", "4096"]
    args += ["--tp", "2", "--json"]
    fp32 = json.loads(run_cli(*args).stdout)
    res = run_cli(*args, "--optimizer-state-dtype", "bf16")
    assert res.exit_code == 0, res.stderr
    bf16 = json.loads(res.stdout)
    assert bf16["job"]["optimizer_state_dtype"] == "bf16"
    opt = [s["optimizer_bytes"] for s in bf16["memory"]["per_stage"]]
    assert opt[0] == pytest.approx(fp32["memory"]["per_stage"][0]["optimizer_bytes"] * 8 / 12, rel=1e-3)
    bad = run_cli(*args, "--optimizer-state-dtype", "fp8")
    assert bad.exit_code == 2 and "--optimizer-state-dtype 'fp8' is not allowed" in bad.stderr
    # a search for a framework that cannot keep them finds no configuration, and says why
    search = ["search", "-m", "llama3-8b", "-c", "dgx-h100", "-n", "2", "-b", "64", "-s", "4096"]
    titan = run_cli(*search, "--optimizer-state-dtype", "bf16", "--framework", "torchtitan")
    assert titan.exit_code != 0
    assert "keeps no fp32 master weights with bf16 Adam moments" in titan.stderr
    plans = json.loads(run_cli(*search, "--optimizer-state-dtype", "bf16", "--json").stdout)["plans"]
    assert plans and {p["optimizer_sharding"] for p in plans} == {"distributed"}


def test_calibration_records_with_bf16_moments():
    from planner.calibration import cases as calibration

    by_id = {c.run_id: c for c in calibration.cases()}
    bf16 = sorted(i for i, c in by_id.items() if c.job is not None and c.job.optimizer_state_dtype == "bf16")
    # Megatron-Bridge's DeepSeek-V3 recipes (25.11, 26.04.01, 26.06, 26.08); Kimi-K2's keeps fp32
    assert len(bf16) == 9 and all("dsv3" in i for i in bf16)
    assert by_id["mbridge2606_gb300_mxfp8_kimi_k2_256gpu"].job.optimizer_state_dtype == "fp32"
    assert all("Adam moments in bf16 (recipe)" in by_id[i].assumptions for i in bf16)


def test_the_precision_aware_optimizer_reads_16bit_gradients_in_place():
    """Megatron-Core's precision-aware optimizer hands FusedAdam a view of the 16-bit gradient shard
    (``decoupled_grad``), so no fp32 copy joins the optimizer states, except with fp32 master weights
    under an FP8 recipe other than delayed scaling, where the shard is copied as without it."""
    from cost_models.memory import step_reads_16bit_grads

    # bf16 gradients, fp32 Adam: the fp32 copy for the step (4) joins master + moments (12)
    assert bytes_per_param(_job(grad_dtype="bf16"), "none", 1) == pytest.approx((2.0, 2.0, 16.0))
    # bf16 moments (precision-aware): no copy, 4 + 2 x 2 = 8
    aware = _job(grad_dtype="bf16", optimizer_state_dtype="bf16")
    assert step_reads_16bit_grads(aware)
    assert bytes_per_param(aware, "distributed", 4) == pytest.approx((2.0, 2.0, 8 / 4))
    # FP8 current scaling (or MXFP8) with fp32 master weights: copied again
    fp8 = _job(grad_dtype="bf16", optimizer_state_dtype="bf16", precision="fp8", fp8_recipe="tensorwise")
    assert not step_reads_16bit_grads(fp8)
    assert bytes_per_param(fp8, "none", 1) == pytest.approx((2.0, 2.0, 12.0))
    # ... but not under delayed scaling, nor with 16-bit master weights
    assert step_reads_16bit_grads(_job(optimizer_state_dtype="bf16", precision="fp8", fp8_recipe="delayed"))
    assert step_reads_16bit_grads(_job(master_dtype="fp16", precision="fp8", fp8_recipe="mxfp8"))
    # fp32 gradients never had a copy; plain fp32 Adam is not the precision-aware optimizer
    assert not step_reads_16bit_grads(_job(grad_dtype="bf16"))
    assert bytes_per_param(_job(optimizer_state_dtype="bf16"), "none", 1) == pytest.approx((2.0, 4.0, 8.0))


def test_megatron_main_grads_dtype_sets_the_gradient_dtype():
    """``--main-grads-dtype bf16`` under ``--bf16`` leaves Megatron's gradients in bf16 (validate_args
    does not turn on fp32 accumulation), so the import prices bf16 gradients; with
    ``--accumulate-allreduce-grads-in-fp32`` validate_args asserts, and the checker says so."""
    words = argv(megatron_args(_inputs(_job(optimizer_state_dtype="bf16"))))
    assert "--grad-reduce-in-bf16" not in words
    base = parse_megatron(" ".join(words), "args.txt", 16)
    assert base.job.grad_dtype == "fp32"
    lowered = parse_megatron(" ".join([*words, "--main-grads-dtype", "bf16"]), "args.txt", 16)
    assert lowered.job.grad_dtype == "bf16" and "--main-grads-dtype" not in lowered.unknown
    cluster = load_cluster("dgx-h100", 2)
    assert not [m for level, m, _ in megatron_findings(lowered, cluster) if level == "error"]
    e32 = estimate(base.model, cluster, base.job, resolve(base.model, cluster, base.job, base.config))
    e16 = estimate(
        lowered.model, cluster, lowered.job, resolve(lowered.model, cluster, lowered.job, lowered.config)
    )
    assert e16.stages[0].memory.gradients_bytes == pytest.approx(e32.stages[0].memory.gradients_bytes / 2)
    assert e16.stages[0].memory.optimizer_bytes == pytest.approx(e32.stages[0].memory.optimizer_bytes)
    both = parse_megatron(
        " ".join([*words, "--main-grads-dtype", "bf16", "--accumulate-allreduce-grads-in-fp32"]),
        "args.txt",
        16,
    )
    assert both.job.grad_dtype == "fp32"
    errors = [m for level, m, _ in megatron_findings(both, cluster) if level == "error"]
    assert any(
        "--main-grads-dtype can only be fp32 when --accumulate-allreduce-grads-in-fp32" in e for e in errors
    )
