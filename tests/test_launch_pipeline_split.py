"""Uneven pipeline splits read from a Megatron launch as Megatron builds them (issue 54): the
embedding and loss accounting flags with either way of giving virtual stages
(--num-layers-per-virtual-pipeline-stage, as the MoE Model Zoo's Qwen3-235B launch gives it, or
--num-virtual-stages-per-pipeline-rank), and --decoder-first/last-pipeline-num-layers with virtual
stages. The oracle is a transcription of Megatron-LM's own code (NVIDIA/Megatron-LM @ d98e8a64:
megatron/training/arguments.py validate_args "Uneven virtual pipeline parallelism",
megatron/core/transformer/transformer_config.py "Uneven PP" and the account-for checks,
megatron/core/transformer/transformer_block.py get_num_layers_to_build)."""

import itertools

import pytest

from cost_models.constraints import resolve
from planner.inputs.errors import ConfigError, SpecError
from planner.launch.check import check_file
from planner.launch.megatron.importer import parse_megatron
from planner.profiles.hardware import load_cluster

SHAPE = (
    "--hidden-size 1024 --num-attention-heads 16 --seq-length 2048 --max-position-embeddings 2048 "
    "--micro-batch-size 1 --global-batch-size 64 --vocab-size 32000"
)


def megatron_layers(num_layers, pp, nlpvs=None, vspr=None, emb=False, loss=False, first=None, last=None):
    """Layers Megatron builds on each virtual stage (chunk-major), or None where its validation
    (validate_args, TransformerConfig) or get_num_layers_to_build's asserts refuse the launch."""
    if nlpvs is not None and vspr is not None:
        return None
    if (first is not None or last is not None) and (emb or loss):
        return None  # TransformerConfig: first/last cannot be set with account_for_*
    vpp = None
    if nlpvs is not None:
        if first is not None or last is not None:
            return None  # "please use --num-virtual-stages-per-pipeline-rank ..."
        n = num_layers + emb + loss
        if n % pp or (n // pp) % nlpvs:
            return None
        vpp = (n // pp) // nlpvs
    elif vspr is not None:
        vpp = vspr
    elif first is None and last is None and (num_layers + emb + loss) % pp:
        return None
    if vpp == 1:
        vpp = None
    if first is not None or last is not None:  # TransformerConfig "Uneven PP"
        rest, stages = num_layers, pp
        for n in (first, last):
            if n is not None:
                if n <= 0 or (vpp and n % vpp):
                    return None
                rest, stages = rest - n, stages - 1
        if bool(rest) != bool(stages) or (stages and rest % stages):
            return None
        if stages and vpp and (rest // stages) % vpp:
            return None
    elif (emb or loss) and vpp and ((num_layers + emb + loss) // pp) % vpp:
        return None
    out = {}
    for rank in range(pp):
        for vp in range(vpp or 1):
            # get_num_layers_to_build
            if first is not None or last is not None:
                rest, stages = num_layers, pp
                if first is not None:
                    rest, stages = rest - first, stages - 1
                if last is not None:
                    rest, stages = rest - last, stages - 1
                per_rank = rest // stages if stages > 0 else 0
                if rank == 0 and first is not None:
                    per_rank = first
                if rank == pp - 1 and last is not None:
                    per_rank = last
            else:
                if (num_layers + emb + loss) % pp:
                    return None  # assert num_layers % pipeline_model_parallel_size == 0
                per_rank = (num_layers + emb + loss) // pp
            if vpp and pp > 1 and per_rank % vpp:
                return None  # assert num_layers_per_pipeline_rank % vp_size == 0
            build = per_rank // vpp if vpp and pp > 1 else per_rank
            if emb and vp == 0 and rank == 0:
                build -= 1
            if loss and vp == (vpp or 1) - 1 and rank == pp - 1:
                build -= 1
            if build < 0:
                return None
            out[(vp, rank)] = build
    return tuple(out[(vp, rank)] for vp in range(vpp or 1) for rank in range(pp))


def _launch(num_layers, pp, nlpvs=None, vspr=None, emb=False, loss=False, first=None, last=None):
    flags = [f"--num-layers {num_layers}", f"--pipeline-model-parallel-size {pp}"]
    flags += [f"--num-layers-per-virtual-pipeline-stage {nlpvs}"] if nlpvs is not None else []
    flags += [f"--num-virtual-stages-per-pipeline-rank {vspr}"] if vspr is not None else []
    flags += ["--account-for-embedding-in-pipeline-split"] if emb else []
    flags += ["--account-for-loss-in-pipeline-split"] if loss else []
    flags += [f"--decoder-first-pipeline-num-layers {first}"] if first is not None else []
    flags += [f"--decoder-last-pipeline-num-layers {last}"] if last is not None else []
    return f"pretrain_gpt.py {SHAPE} " + " ".join(flags)


def _planner_layers(**kw):
    """The split planner reads and then accepts (its shape constraints, as check applies them)."""
    try:
        got = parse_megatron(_launch(**kw), "x.sh", 8)
        config = resolve(got.model, load_cluster("dgx-h100", 1), got.job, got.config)
    except (SpecError, ConfigError):
        return None
    return config.stage_layers(got.model)


GRID = [
    dict(num_layers=n, pp=pp, **vp, emb=e, loss=lo)
    for n, pp, (e, lo) in itertools.product(
        (14, 22, 94), (2, 4, 8), ((False, False), (True, True), (True, False))
    )
    for vp in ({}, {"nlpvs": 1}, {"nlpvs": 3}, {"vspr": 2}, {"vspr": 4})
] + [
    dict(num_layers=n, pp=pp, vspr=v, first=f, last=la)
    for n, pp, v, f, la in itertools.product((22, 30, 61), (4, 8), (None, 2), (2, 4, 6), (None, 4, 5))
]


@pytest.mark.parametrize("kw", GRID, ids=lambda kw: "-".join(f"{k}{v}" for k, v in kw.items()))
def test_split_as_megatron_builds_it(kw):
    """Accepted exactly when Megatron accepts, with the layers it builds on each virtual stage
    (planner models at least one decoder layer in every stage between the first and the last, so a
    split Megatron accepts with an empty middle stage would be refused: none is in this grid)."""
    expected = megatron_layers(**kw)
    assert _planner_layers(**kw) == expected


def test_qwen3_235b_model_zoo_split():
    """94 layers, pp 8, 3 layers per virtual stage with the embedding and loss counted: (94 + 2) / 8
    = 12 per rank, 4 virtual stages; the first and last hold 2 decoder layers, the 30 others 3."""
    got = parse_megatron(_launch(num_layers=94, pp=8, nlpvs=3, emb=True, loss=True), "x.sh", 512).config
    assert got.vpp == 4 and got.schedule == "interleaved"
    assert got.layers_per_stage == (2,) + (3,) * 30 + (2,)
    with pytest.raises(
        SpecError, match=r"--num-layers 94 is not divisible by --pipeline-model-parallel-size 8"
    ):
        parse_megatron(_launch(num_layers=94, pp=8, nlpvs=3), "x.sh", 512)
    with pytest.raises(
        SpecError, match=r"--num-layers 94 \+ 1 \(--account-for-embedding-in-pipeline-split\) is"
    ):
        parse_megatron(_launch(num_layers=94, pp=8, nlpvs=3, emb=True), "x.sh", 512)


def test_accounting_flags_are_interpreted_without_virtual_stages(tmp_path):
    path = tmp_path / "args.txt"
    path.write_text(_launch(num_layers=14, pp=4, emb=True, loss=True) + " --bf16\n")
    verdict = check_file(str(path), load_cluster("dgx-h100", 1))
    text = " ".join(f.message for f in verdict.findings)
    assert "not interpreted" not in text and verdict.passed, text
    assert parse_megatron(path.read_text(), "x", 8).config.layers_per_stage == (3, 4, 4, 3)


def test_first_last_with_virtual_stages():
    got = parse_megatron(_launch(num_layers=30, pp=4, vspr=2, first=6, last=4), "x.sh", 64).config
    assert got.vpp == 2 and got.layers_per_stage == (3, 5, 5, 2, 3, 5, 5, 2)
    with pytest.raises(SpecError, match=r"the 5 layers of the first pipeline stage are not divisible by"):
        parse_megatron(_launch(num_layers=30, pp=4, vspr=2, first=5, last=5), "x.sh", 64)


def test_layout_with_another_split_argument_is_refused():
    text = _launch(num_layers=4, pp=2, emb=True) + " --pipeline-model-parallel-layout 'Ett|ttL'"
    with pytest.raises(SpecError, match="--pipeline-model-parallel-layout with --account-for-embedding"):
        parse_megatron(text, "x.sh", 8)
