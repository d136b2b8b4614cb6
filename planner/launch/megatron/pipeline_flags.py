"""The pipeline split of a Megatron-LM launch (split from :mod:`.importer`): virtual stages and the
layers of each (virtual) stage, from ``--num-layers-per-virtual-pipeline-stage``,
``--num-virtual-stages-per-pipeline-rank``, the embedding/loss accounting, first/last stage counts
or ``--pipeline-model-parallel-layout``, with Megatron's own rules and messages naming the flags."""

from __future__ import annotations

import re

from cost_models.parallel import account_for_split, first_last_split
from planner.inputs.errors import ConfigError, SpecError
from planner.launch.megatron import hybrid
from planner.launch.megatron.arguments import Arguments


def parse_layout(text: str) -> list[str]:
    """The stages of a ``--pipeline-model-parallel-layout`` string, as Megatron-LM unrolls it
    (megatron/core/transformer/pipeline_parallel_layer_layout.py ``parse_str_to_list``: commas
    dropped, ``(...)*n`` and ``x*n`` repeated, stages split on |)."""
    s = text.replace(",", "")
    s = re.sub(r"\(([^)]+)\)\*(\d+)", lambda m: m.group(1) * min(int(m.group(2)), 100_000), s)
    s = re.sub(r"(.)\*(\d+)", lambda m: m.group(1) * min(int(m.group(2)), 100_000), s)
    return s.split("|")


def pipeline_split(args: Arguments, num_layers: int, pp: int) -> tuple[int, tuple[int, ...]]:
    """Virtual stages and the layers of each virtual stage, with validate_args' own rules and
    messages naming the flags (megatron/training/arguments.py, "Uneven virtual pipeline
    parallelism"; TransformerConfig for first/last)."""
    flags, num, at = args.flags, args.num, args.at
    staged = hybrid.pipeline(args, num_layers, pp)
    if staged is not None:
        return staged
    given = [
        f
        for f in (
            "--num-layers-per-virtual-pipeline-stage",
            "--num-virtual-stages-per-pipeline-rank",
            "--pipeline-model-parallel-layout",
        )
        if flags.get(f) is not None
    ]
    if len(given) > 1:
        raise SpecError(
            f"{at(given[1])}: {' and '.join(given)} exclude each other (Megatron accepts one of them)"
        )
    first_last = [
        f for f in ("--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers") if f in flags
    ]
    emb = "--account-for-embedding-in-pipeline-split" in flags
    loss = "--account-for-loss-in-pipeline-split" in flags
    account = [
        f
        for f, on in (
            ("--account-for-embedding-in-pipeline-split", emb),
            ("--account-for-loss-in-pipeline-split", loss),
        )
        if on
    ]
    if flags.get("--pipeline-model-parallel-layout") is not None:
        if account or first_last:
            raise SpecError(
                f"{at('--pipeline-model-parallel-layout')}: --pipeline-model-parallel-layout with "
                f"{(account + first_last)[0]}: Megatron's TransformerConfig sets the layout with no other "
                "pipeline layout argument"
            )
        return _layout_stages(args, num_layers, pp)
    if account and first_last:
        raise SpecError(
            f"{at(account[0])}: {account[0]} with {first_last[0]}: Megatron accepts one way of "
            "splitting uneven stages"
        )
    nlpvs = num("--num-layers-per-virtual-pipeline-stage")
    if nlpvs is not None:
        if first_last:
            raise SpecError(
                f"{at(first_last[0])}: {first_last[0]} with --num-layers-per-virtual-pipeline-stage: Megatron "
                "asks for --num-virtual-stages-per-pipeline-rank with uneven stages"
            )
        # validate_args: the embedding and the loss, when accounted, count as one layer each.
        units = num_layers + emb + loss
        counted = f"--num-layers {num_layers}" + "".join(f" + 1 ({f})" for f in account)
        if units % pp:
            raise SpecError(
                f"{at('--pipeline-model-parallel-size')}: {counted} is not divisible by "
                f"--pipeline-model-parallel-size {pp}"
            )
        per_stage = units // pp
        if per_stage % nlpvs:
            raise SpecError(
                f"{at('--num-layers-per-virtual-pipeline-stage')}: --num-layers-per-virtual-pipeline-stage "
                f"{nlpvs} does not divide the {per_stage} layers of each pipeline stage ({counted} / "
                f"--pipeline-model-parallel-size {pp})"
            )
        vpp = per_stage // nlpvs
    else:
        vpp = num("--num-virtual-stages-per-pipeline-rank", 1) or 1
    if account:
        try:
            return vpp, account_for_split(num_layers, pp * vpp, emb, loss)
        except ConfigError as exc:
            raise SpecError(
                f"{at(account[0])}: {' and '.join(account)}: {exc} (--num-layers {num_layers}, "
                f"--pipeline-model-parallel-size {pp}, virtual stages per rank {vpp})"
            ) from None
    if first_last:
        return vpp, _first_last_stages(args, num_layers, pp, vpp, first_last)
    return vpp, ()


def _first_last_stages(args: Arguments, num_layers: int, pp: int, vpp: int, given: list) -> tuple[int, ...]:
    """Layers of each virtual stage under --decoder-first/last-pipeline-num-layers, as Megatron
    builds them (megatron/core/transformer/transformer_block.py ``get_num_layers_to_build``: a
    rank's layers, first/last as given and the rest split evenly over the middle ranks, then divided
    evenly over its ``vpp`` model chunks), in chunk-major order; TransformerConfig's checks: with
    virtual stages, first, last and each middle rank's count divisible by ``vpp``."""
    flags, num, at = args.flags, args.num, args.at
    first = num("--decoder-first-pipeline-num-layers")
    last = num("--decoder-last-pipeline-num-layers")
    named = " and ".join(f"{f} {flags[f]}" for f in given)
    try:
        ranks = first_last_split(num_layers, pp, first, last)
    except ConfigError as exc:
        raise SpecError(
            f"{at(given[0])}: {named}: {exc} (--num-layers {num_layers}, --pipeline-model-parallel-size {pp})"
        ) from None
    if vpp == 1:
        return ranks
    for rank, n in enumerate(ranks):
        if n % vpp:
            which = "first" if rank == 0 and first else "last" if rank == pp - 1 and last else "each middle"
            raise SpecError(
                f"{at(given[0])}: {named}: the {n} layers of the {which} pipeline stage are not divisible by "
                f"--num-virtual-stages-per-pipeline-rank {vpp} (Megatron's TransformerConfig)"
            )
    return tuple(ranks[r] // vpp for _ in range(vpp) for r in range(pp))


def _layout_stages(args: Arguments, num_layers: int, pp: int) -> tuple[int, tuple[int, ...]]:
    """Virtual stages and layers per virtual stage of ``--pipeline-model-parallel-layout``
    (:func:`parse_layout`), with the stages planner models: E first, L last, at least one decoder
    layer in every stage between."""
    at = args.at("--pipeline-model-parallel-layout")
    stages = parse_layout(args.flags["--pipeline-model-parallel-layout"])
    bad = sorted(set("".join(stages)) - set("EtLm"))
    if bad:
        raise SpecError(
            f"{at}: --pipeline-model-parallel-layout has {bad[0]!r}; "
            "its letters are E (embedding), t (decoder layer), L (loss), m (MTP) and | between stages"
        )
    if len(stages) % pp:
        raise SpecError(
            f"{at}: --pipeline-model-parallel-layout has {len(stages)} "
            f"stages, not a multiple of --pipeline-model-parallel-size {pp}"
        )
    layers = tuple(s.count("t") for s in stages)
    if sum(layers) != num_layers:
        raise SpecError(
            f"{at}: --pipeline-model-parallel-layout holds "
            f"{sum(layers)} decoder layers (t), --num-layers is {num_layers}"
        )
    if not stages[0].startswith("E") or not stages[-1].endswith("L"):
        raise SpecError(
            f"{at}: --pipeline-model-parallel-layout must start with E (embedding) and end with L (loss)"
        )
    if 0 in layers[1:-1]:
        raise SpecError(
            f"{at}: planner models stages of at least one decoder "
            "layer, except an embedding-only first and a loss-only last stage; stage "
            f"{layers[1:-1].index(0) + 1} of the layout holds none"
        )
    return len(stages) // pp, layers
