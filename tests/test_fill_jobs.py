"""PipeFill's fill jobs given by their model (issue 57): pieces priced by the cost model, resident or
offloaded state, greedy placement across windows, the main-job slowdown computed and only capped
when asked; the examples' fill job fits the README plan's bubbles."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from cost_models.parallel import ParallelConfig
from cost_models.stage_terms import table_for
from planner import api
from planner.inputs.errors import SpecError
from planner.inputs.models import load_model
from planner.outputs.bubbles import budget, fit_fill_job, load_fill_job
from planner.outputs.fill_jobs import ModelFillJob, place_stage, price, single_gpu_node, stage_gpu

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

README_PLAN = ParallelConfig(tp=2, pp=8, cp=2, vpp=10, micro_batch_size=1, schedule="interleaved")
"""The plan of the README's tour (`planner search -m llama3-70b -c dgx-h100 -n 8 -b 256 -s 4096
--pp 4,8`): tp 2, pp 8, cp 2, dp 2, 10 chunks per rank; its bubbles are at most 0.1 s long."""


@pytest.fixture(scope="module")
def readme_budget():
    problem = api.load_problem("llama3-70b", "dgx-h100", 8, 256, 4096)
    return budget(api.estimate(problem, README_PLAN))


def test_inference_pieces_are_the_layer_tables_forwards():
    job = ModelFillJob(
        name="x", model=load_model("llama3-8b"), mode="inference", batch_size=8, seq_length=2048
    )
    gpu = stage_gpu("h100-sxm5-80gb")
    p = price(job, gpu)
    m = job.model
    assert len(p.pieces) == m.num_layers + 2  # embedding, 32 layers, output
    from planner.inputs.jobs import make_job

    spec = make_job(global_batch_size=8, seq_length=2048)
    c = ParallelConfig(
        tp=1, pp=1, dp=1, micro_batch_size=8, sequence_parallel=False, optimizer_sharding="none"
    )
    t = table_for(m, spec, c, single_gpu_node(gpu))
    assert p.pieces[1].time_s == t.decoder(m, 0).forward_s
    assert p.state_bytes == pytest.approx(m.params_total * 2 + 8 * 2048 * m.hidden_size * 2)
    # an 8B forward over 16,384 tokens on an H100: 2 x 8.03e9 x 16384 FLOP at most at its dense peak
    assert p.task_time_s > 2 * 8.03e9 * 16384 / 989e12
    assert p.offloadable and p.transfer_s(p.pieces[1]) == pytest.approx(
        m.layer_params(0) * 2 / gpu.host_link_bytes_per_s
    )


def test_training_pieces_recompute_each_layer_and_step():
    job = ModelFillJob(name="t", model=load_model("gpt-1.7b"), mode="training", batch_size=1, seq_length=2048)
    p = price(job, stage_gpu("h100-sxm5-80gb"))
    L = job.model.num_layers
    kinds = [x.kind for x in p.pieces]
    assert len(p.pieces) == 2 * L + 4 and kinds[-1] == "optimizer step"
    assert kinds[L + 2] == f"layer {L - 1} backward"  # backward runs in reverse after the output layer
    fwd, bwd = p.pieces[1], p.pieces[L + 2]
    assert bwd.time_s > 2 * fwd.time_s  # recompute (F) + backward (about 2F)
    # weights (2) + fp32 gradients (4) + master weights and moments (12) per parameter, + layer inputs
    assert p.state_bytes > 18 * job.model.params_total and not p.offloadable


def test_example_fill_job_fits_the_readme_plan(readme_budget):
    """The example (Llama-3-8B inference given by its model) fits bubbles of at most 0.1 s: one piece
    per layer; as one 0.45 s unit it fit none (issue 57)."""
    job = load_fill_job(str(EXAMPLES / "fill-job-llama3-8b-inference.yaml"))
    assert isinstance(job, ModelFillJob)
    assert max(w.duration_s for st in readme_budget.stages for w in st.windows) < 0.11
    fill = fit_fill_job(readme_budget, job, max_slowdown=None)
    assert fill.units_per_iteration > 0 and fill.tasks_per_s > 0 and not fill.reason
    assert 0 < fill.bubble_time_used_fraction <= 1
    # every placement is within its window's usable time and memory
    for st, row in zip(readme_budget.stages, fill.units_per_window):
        placement = place_stage(st, job, readme_budget.assumptions)
        assert placement.pieces_per_window == row
        for w, busy, k in zip(st.windows, placement.busy_per_window, row):
            assert (
                (busy <= w.usable_s + readme_budget.assumptions.switch_overhead_s + 1e-9) if k else busy == 0
            )
    # stage 0 holds the embedding and the most activations: the 16 GB of weights stream from the host
    assert fill.memory_modes[0] == "offloaded" and "resident" in fill.memory_modes


def test_slowdown_is_computed_not_capped(readme_budget):
    job = load_fill_job(str(EXAMPLES / "fill-job-llama3-8b-inference.yaml"))
    free = fit_fill_job(readme_budget, job, max_slowdown=None)
    assert free.slowdown_bound > 0  # 5% margin < 10% duration error: some windows could overrun
    capped = fit_fill_job(readme_budget, job, max_slowdown=free.slowdown_bound / 4)
    assert capped.slowdown_bound <= free.slowdown_bound / 4 + 1e-12
    assert capped.units_per_iteration < free.units_per_iteration
    zero = fit_fill_job(readme_budget, job, max_slowdown=0.0)
    assert zero.slowdown_bound == 0.0


def test_training_job_that_fits_nowhere_says_so(readme_budget):
    big = ModelFillJob(
        name="big", model=load_model("llama3-8b"), mode="training", batch_size=1, seq_length=2048
    )
    fill = fit_fill_job(readme_budget, big, max_slowdown=None)
    assert fill.units_per_iteration == 0 and set(fill.memory_modes) == {"none"}
    assert "state fits beside the main job's peak on no stage" in fill.reason
    small = replace(big, model=load_model("amp-gpt2-345m"))  # 6 GB of state beside the peak
    assert fit_fill_job(readme_budget, small, max_slowdown=None).units_per_iteration > 0


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("mode", "serving", "key 'mode': 'serving' is not allowed; allowed values: inference, training"),
        ("model", "no-such-model", "key 'model': unknown model 'no-such-model'"),
        ("batch_size", 0, "batch_size"),
        ("extra", 1, "extra"),
    ],
)
def test_bad_model_fill_job_is_one_line(tmp_path, key, value, message):
    doc = {
        "schema_version": 1,
        "kind": "fill_job",
        "name": "x",
        "model": "llama3-8b",
        "mode": "inference",
        "batch_size": 8,
        "seq_length": 2048,
        key: value,
    }
    f = tmp_path / "fill.yaml"
    f.write_text(json.dumps(doc))
    with pytest.raises(SpecError, match=message) as err:
        load_fill_job(str(f))
    assert "\n" not in str(err.value)


def test_cli_bubbles_with_the_model_fill_job(run_cli):
    r = run_cli(
        "bubbles", "-m", "llama3-70b", "-c", "dgx-h100", "-n", "8", "-b", "256", "-s", "4096", "--tp", "2",
        "--pp", "8", "--cp", "2", "--vpp", "10", "--schedule", "interleaved",
        "--fill-job", str(EXAMPLES / "fill-job-llama3-8b-inference.yaml"), "--json",
    )  # fmt: skip
    assert r.exit_code == 0, r.stderr
    fill = json.loads(r.stdout)["fill"]
    assert fill["units_per_iteration"] > 0 and fill["tasks_per_s"] > 0
    assert len(fill["memory_modes"]) == 8


def test_executor_fits_fill_work_to_measured_bubbles(readme_budget):
    # Placed in the predicted windows, the work overruns windows 10% shorter; run as PipeFill's
    # executor runs it (each piece only if it ends within the bubble as measured to within 1.9%,
    # less the 5% margin), it overruns none and loses some fill work instead.
    from planner.outputs.fill_jobs import fit_model_fill_job, run_time_limits

    job = load_fill_job(str(EXAMPLES / "fill-job-llama3-8b-inference.yaml"))
    b, a = readme_budget, readme_budget.assumptions
    planned = fit_model_fill_job(b, job, max_slowdown=None)
    run = fit_model_fill_job(b, job, max_slowdown=None, run_time_error=0.019)
    assert planned.slowdown_bound > 0.0 and run.slowdown_bound == 0.0
    assert 0 < run.tasks < planned.tasks
    # the allowance: the window 10% shorter, measured 1.9% long, 5% margin, 2 ms switch
    st = b.stages[0]
    limits = run_time_limits(st, a, 0.019)
    for w, lim in zip(st.windows, limits):
        expect = w.duration_s * 0.9 * 1.019 * 0.95 - 0.002
        assert lim == (pytest.approx(min(w.usable_s, expect)) if expect >= a.min_slice_s else 0.0)
    # a measurement worse than the margin leaves overruns again
    assert fit_model_fill_job(b, job, None, run_time_error=0.2).slowdown_bound > 0.0
