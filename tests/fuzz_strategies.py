"""Hypothesis strategies for the fuzz suite (tests/test_fuzz.py): every preset and fixture file,
mutated (keys deleted, wrong types, NaN/inf, huge, negative and tiny values, unicode, unknown keys).

A seed is a parsed input document; :func:`mutated` draws 1-3 edits anywhere in its tree.
"""

from __future__ import annotations

import copy
import json
from functools import cache
from pathlib import Path

import yaml
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).parent / "data"

NASTY = [
    float("nan"),
    float("inf"),
    float("-inf"),
    0,
    -1,
    -1e-16,
    1e-300,
    2**31,
    2**63,
    10**30,
    1e308,
    "",
    "x",
    "4096",
    "1e30",
    "é☃\u202e名",
    True,
    False,
    None,
    [],
    {},
    [1, 2],
    {"a": 1},
]
"""Values that broke or could break a typed field."""

values = st.one_of(
    st.sampled_from(NASTY),
    st.integers(min_value=-(2**64), max_value=2**64),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
)


@cache
def seeds() -> dict[str, dict[str, object]]:
    """Seed documents by input kind: name -> parsed document (YAML/JSON)."""
    presets = ROOT / "planner" / "presets" / "models"
    models, graphs = {}, {}
    for p in sorted(presets.glob("*.yaml")):
        doc = yaml.safe_load(p.read_text())
        (graphs if doc.get("kind") == "graph_model" else models)[p.stem] = doc
    return {
        "model": models,
        "graph_model": graphs,
        "hf": {p.parent.name: json.loads(p.read_text()) for p in sorted((DATA / "hf").glob("*/config.json"))},
        "gpu": {
            p.stem: yaml.safe_load(p.read_text())
            for p in sorted((ROOT / "hardware_profiles" / "gpus").glob("*.yaml"))
        },
        "cluster": {
            "cluster-a100-h100": yaml.safe_load((ROOT / "examples" / "cluster-a100-h100.yaml").read_text()),
            "dgx-h100-file": {
                "schema_version": 1,
                "kind": "cluster",
                "groups": [{"template": "dgx-h100", "num_nodes": 1}],
            },
        },
        "fill_job": {
            "llama3-8b-inference": yaml.safe_load(
                (ROOT / "examples" / "fill-job-llama3-8b-inference.yaml").read_text()
            )
        },
    }


def _paths(doc, prefix=()):
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:8]):
            yield from _paths(v, (*prefix, i))


def _parent(doc, path):
    for k in path[:-1]:
        doc = doc[k]
    return doc


@st.composite
def mutated(draw, doc):
    """``doc`` with 1-3 random edits: delete, replace with a nasty value, scale a number, add a key."""
    doc = copy.deepcopy(doc)
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in _paths(doc) if p]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent, key = _parent(doc, path), path[-1]
        op = draw(st.sampled_from(["delete", "replace", "replace", "scale", "add"]))
        if op == "delete":
            del parent[key]
        elif op == "replace":
            parent[key] = draw(values)
        elif op == "scale":
            old = parent[key]
            if isinstance(old, (int, float)) and not isinstance(old, bool):
                factor = draw(st.sampled_from([-1, 0, 1e-9, 1e6, 2**31, 0.5]))
                parent[key] = (
                    type(old)(old * factor)
                    if isinstance(old, float) or factor == int(factor)
                    else old * factor
                )
            else:
                parent[key] = draw(values)
        elif isinstance(parent, dict):
            parent[draw(st.sampled_from(["width", "é", "num_layers_x", "0"]))] = draw(values)
        else:
            parent.append(draw(values))
    return doc


MEGATRON_ARGS = """--num-layers 24
--vocab-size 32000
--hidden-size 2048
--num-attention-heads 16
--seq-length 2048
--max-position-embeddings 2048
--micro-batch-size 1
--global-batch-size 64
--tensor-model-parallel-size 2
--pipeline-model-parallel-size 2
--use-distributed-optimizer
--sequence-parallel
--recompute-granularity selective
--recompute-modules core_attn layernorm
--bf16
"""

TOKENS = ["0", "-1", "nan", "inf", "1e30", "2147483648", "x", "", "é", "--", "--hidden-size", "3.5"]


@st.composite
def megatron_text(draw):
    """The Megatron args above with 1-3 edits: a value replaced, a token dropped, a flag repeated
    or left without its value."""
    words = MEGATRON_ARGS.split()
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(words) - 1))
        op = draw(st.sampled_from(["replace", "drop", "dangling", "repeat"]))
        if op == "replace":
            words[i] = draw(st.one_of(st.sampled_from(TOKENS), st.integers(-(2**40), 2**40).map(str)))
        elif op == "drop":
            del words[i]
        elif op == "dangling":
            words.append(draw(st.sampled_from([w for w in words if w.startswith("--")] or ["--num-layers"])))
        else:
            words.insert(i, words[i])
        if not words:
            words = ["--bf16"]
    return "\n".join(words) + "\n"
