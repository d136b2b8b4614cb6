"""``planner models`` and ``planner hardware``: the built-in model presets, GPU types, node templates
and software profiles, listed or shown one at a time; load, render."""

from __future__ import annotations

from typing import Annotated

import typer

from planner.cli import render
from planner.cli.common import emit_json, print_rich
from planner.cli.options import JsonOpt
from planner.cli.root import hardware_app, models_app
from planner.outputs import views


@models_app.command("list")
def models_list(as_json: JsonOpt = False) -> None:
    """List the built-in model presets."""
    from planner.inputs.graph_model import graph_preset_names, load_graph_model
    from planner.inputs.models import load_model, model_preset_names

    graphs = set(graph_preset_names())
    rows = [
        views.model_dict(load_graph_model(n) if n in graphs else load_model(n)) for n in model_preset_names()
    ]
    if as_json:
        emit_json({"models": rows})
    else:
        print_rich(render.models_table(rows))


@models_app.command("show")
def models_show(
    name: Annotated[str, typer.Argument(help="Preset name, YAML file or HF config.json.")],
    as_json: JsonOpt = False,
) -> None:
    """Show one model with its derived parameter counts."""
    from planner.inputs.graph_model import is_graph_model, load_graph_model
    from planner.inputs.models import load_model

    if is_graph_model(name):
        data = views.model_dict(load_graph_model(name))
        if as_json:
            emit_json(data)
        else:
            print_rich(*render.graph_model_tables(data))
        return
    data = views.model_dict(load_model(name))
    if as_json:
        emit_json(data)
    else:
        print_rich(render.kv_table(f"model {data['name']}", data))


@hardware_app.command("list")
def hardware_list(as_json: JsonOpt = False) -> None:
    """List GPU types and node templates."""
    from planner.profiles.hardware import cluster_template_names, gpu_names, load_gpu, load_template
    from planner.profiles.software import profile_rows

    gpus = [views.gpu_dict(load_gpu(n)) for n in gpu_names()]
    templates = [load_template(n) for n in cluster_template_names()]
    software = profile_rows()
    if as_json:
        emit_json(
            {
                "gpus": gpus,
                "clusters": [{"name": t["name"], "node": t["node"]} for t in templates],
                "software": software,
            }
        )
    else:
        print_rich(*render.hardware_tables(gpus, templates), render.software_table(software))


@hardware_app.command("software")
def hardware_software(as_json: JsonOpt = False) -> None:
    """List the software profiles: per GPU efficiency family, the efficiencies a framework release
    class changes and how many published runs they were fitted on (see --software)."""
    from planner.profiles.software import profile_rows

    rows = profile_rows()
    if as_json:
        emit_json({"schema_version": views.SCHEMA_VERSION, "software": rows})
    else:
        print_rich(render.software_table(rows))


@hardware_app.command("show")
def hardware_show(
    name: Annotated[str, typer.Argument(help="GPU type or node template name.")], as_json: JsonOpt = False
) -> None:
    """Show a GPU type, or a node template with its GPU's fields."""
    from planner.inputs.documents import did_you_mean, preset_name
    from planner.inputs.errors import SpecError
    from planner.profiles.hardware import cluster_template_names, gpu_names, load_gpu, load_template
    from planner.profiles.software import efficiency_family, profile_rows

    name = preset_name(name, [*cluster_template_names(), *gpu_names()]) or name
    if name in cluster_template_names():
        t = load_template(name)
        node = dict(t["node"])
        data = {
            "name": t["name"],
            "kind": "cluster_template",
            "source": t.get("source", ""),
            "gpus_per_node": node["gpus_per_node"],
            "node": node,
            "gpu": views.gpu_dict(load_gpu(node["gpu"])),
        }
    elif name in gpu_names():
        data = {"kind": "gpu", **views.gpu_dict(load_gpu(name))}
    else:
        raise SpecError(
            f"unknown hardware '{name}'{did_you_mean(name, [*gpu_names(), *cluster_template_names()])}; "
            f"GPU types: {', '.join(gpu_names())}; "
            f"node templates: {', '.join(cluster_template_names())}"
        )
    family = efficiency_family(data["gpu"]["name"] if "node" in data else data["name"])
    data["efficiency_family"] = family
    data["software_profiles"] = profile_rows(family)
    if as_json:
        emit_json(data)
    else:
        software = data.pop("software_profiles")
        flat = {k: v for k, v in data.items() if not isinstance(v, dict)}
        tables = [render.kv_table(name, flat)]
        if "node" in data:
            tables.append(render.kv_table("node", data["node"]))
            tables.append(
                render.kv_table(f"gpu {data['gpu']['name']}", {k: v for k, v in data["gpu"].items()})
            )
        else:
            tables[0] = render.kv_table(name, data)
        if software:
            tables.append(render.software_table(software, f"software profiles for family {family}"))
        else:
            tables.append(f"no software profile has an entry for family {family}: base values only")
        print_rich(*tables)
