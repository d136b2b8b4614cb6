"""``planner check``: plan files or Megatron-LM args/launch files checked for CI (constraints, memory,
throughput, distance from the best plan; :mod:`planner.launch.check`); exit 1 on failure."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Annotated

import typer

from planner.calibration.memory_validation import HEADROOM_GIB_DEFAULT
from planner.cli.common import emit_json, require_finite
from planner.cli.options import (
    PANEL_MEMORY,
    PANEL_OUTPUT,
    ClusterOptional,
    JsonOpt,
    NodesOpt,
    ProfileOpt,
    SoftwareOpt,
)
from planner.cli.root import app
from planner.inputs.errors import SpecError, UsageError
from planner.inputs.validation import check_flag, read_text_capped
from planner.outputs import views

ConfigsArg = Annotated[
    list[Path],
    typer.Argument(help="Plan files, Megatron-LM args/launch files or Megatron-Bridge recipes."),
]
HeadroomGibOpt = Annotated[
    float,
    typer.Option(
        "--headroom-gib",
        help="Memory each GPU must keep free beyond the modelled reserve, in GiB (search's default).",
        rich_help_panel=PANEL_MEMORY,
    ),
]
MaxSlowdownOpt = Annotated[
    float | None,
    typer.Option(
        "--max-slowdown",
        help="Fail when slower than the best plan found by more than this fraction.",
        rich_help_panel="Checks",
    ),
]
FormatOpt = Annotated[
    str,
    typer.Option("--format", help="text or github (Actions annotations).", rich_help_panel=PANEL_OUTPUT),
]
VocabSizeOpt = Annotated[
    int | None,
    typer.Option(
        "--vocab-size",
        help="Vocabulary of a Megatron-LM launch that gives no --vocab-size and names no known tokenizer.",
        rich_help_panel="Checks",
    ),
]
SetVarsOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        help="NAME=VALUE: a shell variable a launch script starts with (repeatable), as if exported; "
        "for a Megatron-Bridge recipe (.py), section.field=VALUE overrides a field after the recipe "
        "and NAME=VALUE sets a parameter of the recipe function.",
        rich_help_panel="Checks",
    ),
]
ScriptArgsOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--arg",
        help="An argument the launch script is run with (repeatable, in order: $1, $2, ...), as in "
        "bash SCRIPT ARG ...; default none ($# is 0).",
        rich_help_panel="Checks",
    ),
]
RecipeOpt = Annotated[
    str | None,
    typer.Option(
        "--recipe",
        help="The recipe function of a Megatron-Bridge recipe file (.py); default: its only *_config.",
        rich_help_panel="Checks",
    ),
]


@app.command()
def check(
    configs: ConfigsArg,
    cluster: ClusterOptional = None,
    nodes: NodesOpt = None,
    headroom_gib: HeadroomGibOpt = HEADROOM_GIB_DEFAULT,
    max_slowdown: MaxSlowdownOpt = None,
    fmt: FormatOpt = "text",
    vocab_size: VocabSizeOpt = None,
    set_vars: SetVarsOpt = None,
    script_args: ScriptArgsOpt = None,
    recipe: RecipeOpt = None,
    profile: ProfileOpt = None,
    software: SoftwareOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Check configs for CI: constraints, memory, throughput, distance from the best plan. Exit 1 on failure.

    Plan files record their cluster: --cluster then only confirms the world size (a node template without --nodes: the nodes the plan's GPUs fill). Megatron-LM args or launch files, torchtitan TOMLs and Megatron-Bridge recipes (.py, read without running them) need --cluster; with a node template, --nodes N, or a launch script's own node count (torchrun --nnodes, srun -N, sbatch -N, #SBATCH --nodes).
    """
    from planner.launch.check import check_file
    from planner.launch.verdict import Finding
    from planner.profiles.calibrated import read_profile
    from planner.profiles.software import check_software

    _check_limits(fmt, headroom_gib, max_slowdown)
    variables = _launch_inputs(configs, set_vars or [], script_args or [], recipe)
    if vocab_size is not None and vocab_size < 1:
        raise UsageError(f"--vocab-size must be a positive integer, got {vocab_size}")
    name = check_software(software) if software is not None else None
    prof = read_profile(profile) if profile is not None else None
    headroom = headroom_gib * 2**30
    verdicts = []
    for p, (spec, note) in zip(configs, _cluster_specs(configs, cluster, nodes, name, prof, variables)):
        verdict = check_file(
            str(p),
            spec,
            headroom,
            max_slowdown,
            prof,
            name,
            vocab_size,
            variables,
            recipe,
            tuple(set_vars or ()),
        )
        if note:
            verdict.add(Finding("notice", "cluster", note))
        verdicts.append(verdict)
    _write_verdicts(verdicts, fmt, as_json)
    if not all(v.passed for v in verdicts):
        raise typer.Exit(1)


def _check_limits(fmt: str, headroom_gib: float, max_slowdown: float | None) -> None:
    """``--format`` one of text and github; ``--headroom-gib`` and ``--max-slowdown`` finite, not
    negative and (the headroom) within search's bound."""
    if fmt not in ("text", "github"):
        raise UsageError(f"--format {fmt!r} is not allowed; allowed values: text, github")
    require_finite(headroom_gib=headroom_gib, max_slowdown=max_slowdown or 0.0)
    if headroom_gib < 0 or (max_slowdown is not None and max_slowdown < 0):
        raise UsageError("--headroom-gib and --max-slowdown must not be negative")
    check_flag(headroom_gib, "--headroom-gib", "headroom_gib", positive=False)  # <= 10,000 GiB, as search


def _launch_inputs(
    configs: list[Path], set_vars: list[str], script_args: list[str], recipe: str | None
) -> dict[str, str]:
    """The variables a launch script starts with (:func:`_launch_variables`), after checking that
    ``--recipe`` comes with a Megatron-Bridge recipe file."""
    from planner.launch.bridge.recipe import is_recipe_file

    recipes = {str(p) for p in configs if is_recipe_file(str(p))}
    if recipe is not None and not recipes:
        raise UsageError("--recipe names the function of a Megatron-Bridge recipe file (.py); none is given")
    return _launch_variables(set_vars, script_args, bool(recipes))


def _cluster_specs(
    configs: list[Path],
    cluster: str | None,
    nodes: int | None,
    software: str | None,
    profile,
    variables: dict,
) -> list[tuple]:
    """Per config, the cluster it is judged on (:func:`_cluster_spec`) and a note saying where its
    node count came from, or None. A node template without ``--nodes`` takes each launch script's
    own count (:func:`planner.launch.megatron.arguments.launch_nodes`: torchrun ``--nnodes``, srun
    ``-N``, the job an ``sbatch`` in it submits, ``#SBATCH --nodes``) and each plan file the nodes
    its recorded GPUs fill (:func:`_plan_nodes`); a config that gives none is a usage error naming
    it, and one that cannot be read is judged without a cluster (check_file reports why)."""
    from planner.launch.check import plan_kind
    from planner.launch.megatron.arguments import launch_nodes
    from planner.profiles.hardware import is_template

    if cluster is None or nodes is not None or not is_template(cluster):
        spec = _cluster_spec(configs, cluster, nodes, software, profile)
        return [(spec, None)] * len(configs)
    out = []
    for p in configs:
        found = None
        if not Path(p).is_file():
            out.append((None, None))  # check_file reports it (not found, a directory), as with --nodes
            continue
        kind = plan_kind(str(p))
        if kind:
            found = _plan_nodes(p, kind, cluster)
            if found is None:
                out.append((None, None))  # a plan it cannot read: check_file says why
                continue
        elif Path(p).suffix not in (".py", ".toml"):
            try:
                text = read_text_capped(Path(p), expected="a launch script")
            except SpecError:
                text = None
            found = launch_nodes(text, variables, p) if text is not None else None
        if found is None:
            raise UsageError(
                f"cluster template '{cluster}' needs a node count (--nodes N): {p} does not give one "
                "(torchrun --nnodes N, srun -N N, sbatch -N N or #SBATCH --nodes=N)"
            )
        count, where = found
        spec = _cluster_spec(configs, cluster, count, software, profile)
        out.append(
            (spec, f"judged on {cluster} x {count} nodes, the node count of {where}; --nodes N overrides")
        )
    return out


def _plan_nodes(path: Path, kind: str, template: str) -> tuple[int, str] | None:
    """The number of ``template`` nodes that hold the GPUs plan file ``path`` (of ``kind``) records,
    and what says so; None where the plan cannot be read (:func:`planner.launch.check.check_file`
    reports why). :class:`UsageError` where its GPUs are not whole nodes of the template."""
    from planner.inputs.errors import PlannerError
    from planner.plans.plan_file import open_plan
    from planner.profiles.hardware import cluster_from_mapping, load_cluster

    try:
        r, where = open_plan(path, kind)
        gpus = cluster_from_mapping(r.get("cluster", dict), f"{where} (cluster)").num_gpus
    except PlannerError:
        return None
    per_node = load_cluster(template, 1).num_gpus
    if gpus % per_node:
        raise UsageError(
            f"{path}: the plan's {gpus} GPUs are not whole nodes of '{template}' ({per_node} GPUs each): "
            "pass --nodes N, or leave out --cluster to check the plan on the cluster it records"
        )
    return gpus // per_node, f"the plan's {gpus} GPUs"


def _cluster_spec(configs: list[Path], cluster: str | None, nodes: int | None, software: str | None, profile):
    """The ``--cluster`` the configs are judged on, with the ``software`` profile (else the base
    values) and the calibrated ``profile`` applied; None without ``--cluster``, which only plan files
    (their own cluster recorded) may go without."""
    from planner.launch.check import is_plan_file
    from planner.profiles.hardware import load_cluster
    from planner.profiles.software import BASE, configure

    if cluster is None:
        if nodes is not None:
            raise UsageError("--nodes needs --cluster (a node template)")
        # A file that cannot be read is check_file's to report (FAIL, as with --cluster), not a
        # missing-flag error.
        others = [str(p) for p in configs if Path(p).is_file() and not is_plan_file(str(p))]
        if others:
            raise UsageError(
                f"missing --cluster: {others[0]} is not a plan file (only plan files record their cluster)"
            )
        return None
    spec = load_cluster(cluster, nodes)
    configure(spec, software or BASE, profile)  # a profile for another GPU type: an error here, exit 1
    return spec


def _write_verdicts(verdicts: list, fmt: str, as_json: bool) -> None:
    """The verdicts on stdout: ``--json``, GitHub Actions annotations, or a PASS/FAIL line per
    config with its findings."""
    from planner.launch.verdict import github_lines, verdict_dict

    if as_json:
        emit_json(
            {
                "schema_version": views.SCHEMA_VERSION,
                "passed": all(v.passed for v in verdicts),
                "configs": [verdict_dict(v) for v in verdicts],
            }
        )
    elif fmt == "github":
        for v in verdicts:
            sys.stdout.write("\n".join(github_lines(v)) + "\n")
    else:
        for v in verdicts:
            sys.stdout.write(f"{'PASS' if v.passed else 'FAIL'} {v.path}\n")
            for f in v.findings:
                where = f" (line {f.line})" if f.line else ""
                flags = f" [{', '.join(f.flags)}]" if f.flags else ""
                sys.stdout.write(f"  {f.level}: {f.check}: {f.message}{flags}{where}\n")


def _launch_variables(set_vars: list[str], script_args: list[str], recipes: bool) -> dict[str, str]:
    """What a launch script starts with: ``--set NAME=VALUE`` variables (a recipe's dotted
    ``section.field`` items are the recipe reader's) and ``--arg`` positional parameters, which a
    Megatron-Bridge recipe does not take."""
    from planner.launch.megatron.functions import positional_parameters

    variables = {}
    for item in set_vars:
        key, eq, value = item.partition("=")
        if recipes and "." in key:
            continue  # a Bridge override, read with the recipe
        if not eq or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise UsageError(f"--set {item!r}: expected NAME=VALUE with NAME a shell variable name")
        variables[key] = value
    if script_args:
        if recipes:
            raise UsageError(
                "--arg gives a launch script its arguments; a Megatron-Bridge recipe takes --set"
            )
        variables.update(positional_parameters(script_args))
    return variables
