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
            parent[key] = copy.deepcopy(draw(values))  # NASTY's lists and mappings are shared
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
                parent[key] = copy.deepcopy(draw(values))
        elif isinstance(parent, dict):
            parent[draw(st.sampled_from(["width", "é", "num_layers_x", "0"]))] = copy.deepcopy(draw(values))
        else:
            parent.append(copy.deepcopy(draw(values)))
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


LAUNCH_PIECES = (
    "export TP=2",
    "TP=",
    "LOCAL=1",
    "export SBATCH_EXPORT=NONE",
    "#SBATCH --export=NONE",
    "#SBATCH -D /run",
    "sbatch job.sh 2",
    "sbatch --export=TP job.sh",
    "sbatch -D sub job.sh",
    "sbatch --chdir=/x job.sh 1",
    "sbatch --wrap 'torchrun pretrain_gpt.py --tp $TP'",
    "sbatch --wrap",
    "sbatch <<EOF",
    "bash -s 4 <<'EOF'",
    "EOF",
    "./job.sh 4",
    "srun -N 2 ./job.sh",
    '"$(dirname "$0")"/job.sh',
    "bash job.sh",
    "cat ./job.sh",
    "env CUDA_DEVICE_MAX_CONNECTIONS=1",
    "env -u CUDA_DEVICE_MAX_CONNECTIONS",
    "env -i",
    "srun --export=ALL,X=1",
    "srun --export",
    "mpirun -x X=1",
    "mpiexec -genv X",
    'f() { [ "$1" = a ]; }',
    "f() {",
    "}",
    "if f a; then",
    "elif ! f b; then",
    "else",
    "fi",
    "return",
    "return 1",
    "f || exit 1",
    'S=a.b.sh; X=${S%".sh"}',
    "X=${S#'a'*}",
    'X=${S%"}"}',
    "X=${S%$UNSET}",
    "exec ./job.sh 4",
    "exec > log 2>&1",
    "exec -a name",
    "exec > >(tee log)",
    "while f a; do",
    "until ! f b; do",
    "done",
    "break",
    "sbatch -N 2 job.sh",
    "#SBATCH --nodes=3",
    "&&",
    "||",
    ";",
    "|",
    "&",
    "'",
    '"',
    "\\",
    "`",
    "$(",
    ")",
    "[[",
    "]]",
    "torchrun --nproc-per-node 8 pretrain_gpt.py $SHAPE --tensor-model-parallel-size $TP",
    "torchrun --nnodes 2 --nproc-per-node 8 pretrain_gpt.py $SHAPE",
    "#SBATCH -N 2",
    "srun -N 1-2",
    "--nnodes=1:2",
)
"""Pieces of launch scripts for the shell readers (child scripts and jobs, sbatch's options, the
training command's environment, function statuses, patterns), joined at random by
:func:`launch_text`."""


@st.composite
def launch_text(draw):
    """A launch script of 1-8 lines, each 1-6 :data:`LAUNCH_PIECES`."""
    lines = draw(
        st.lists(st.lists(st.sampled_from(LAUNCH_PIECES), min_size=1, max_size=6), min_size=1, max_size=8)
    )
    return f"#!/bin/bash\nSHAPE='{LAUNCH_SHAPE}'\n" + "\n".join(" ".join(line) for line in lines) + "\n"


LAUNCH_SHAPE = (
    "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 --max-position-embeddings 4096 "
    "--micro-batch-size 1 --global-batch-size 64 --bf16 --vocab-size 32000 --lr 1e-4 --train-iters 10"
)
"""A whole Llama-like launch (``$SHAPE`` in :func:`launch_text`'s scripts and their job script)."""


# ------------------------------------------------------------------------------------------------
# Issue 55: alias bombs, special-file targets, extreme finite values, empty and zero values


@st.composite
def alias_bomb(draw):
    """A YAML text whose aliases stand for ``width ** levels`` values (2..12 levels of 2..12
    aliases of the list before), under a header of the drawn kind (model, plan, gpu, cluster,
    fill job, profile or runs file, or a Megatron MODEL_ARGS config), nested or flat."""
    levels, width = draw(st.integers(2, 12)), draw(st.integers(2, 12))
    kind = draw(st.sampled_from(["model", "plan", "gpu", "cluster", "fill_job", "profile", "model_args"]))
    lines = ["a0: &a0 [" + ",".join(["x"] * width) + "]"]
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels)]
    use = draw(st.sampled_from(["runs", "groups", "blocks", "extra"]))
    if kind == "model_args":  # a Megatron MODEL_ARGS config whose flag takes the bomb
        lines.append(f'MODEL_ARGS: {{"--num-layers": *a{levels - 1}}}')
    else:
        lines.append(f"{use}: *a{levels - 1}")
    return kind, f"schema_version: {2 if kind == 'plan' else 1}\nkind: {kind}\n" + "\n".join(lines) + "\n"


SPECIAL_KINDS = ("fifo", "directory", "socket", "char-device", "link-to-fifo", "link-to-directory")
"""Targets a writer must never replace (tests/test_reliability.py makes them the same way)."""

EXTREMES = [5e-324, 1e-320, 1e-300, 1e-30, 1e30, 1e300, 1.7976931348623157e308, 2**63, 10**40, 0.0, -0.0]
"""Finite numbers no physical quantity of a real system takes (zero: only where it means none)."""

PHYSICAL_FIELDS = {
    "gpu": [
        (("memory_gib",), False),
        (("hbm_bandwidth_gb_per_s",), False),
        (("host_link_gb_per_s",), False),
        (("peak_tflops", "bf16"), True),
        (("peak_tflops", "fp16"), True),
        (("sm_count",), True),
        (("tdp_w",), True),
        (("efficiency", "gemm_efficiency_max"), False),
        (("efficiency", "attention_efficiency"), False),
        (("efficiency", "hbm_efficiency"), False),
        (("efficiency", "gemm_half_efficiency_gflop"), False),
        (("efficiency", "kernel_overhead_us"), True),
        (("efficiency", "host_launch_us"), True),
    ],
    "cluster": [
        (("groups", 0, "intra_node_bandwidth_gb_per_s"), False),
        (("groups", 0, "inter_node_bandwidth_gb_per_s"), False),
        (("groups", 0, "intra_node_latency_us"), True),
        (("groups", 0, "inter_node_latency_us"), True),
        (("groups", 0, "intra_node_efficiency"), False),
        (("groups", 0, "inter_node_efficiency"), False),
        (("groups", 0, "host_memory_gb"), False),
    ],
    "profile": [
        (("parameters", "nvlink_bus_bandwidth_gb_per_s", "value"), False),
        (("parameters", "network_bus_bandwidth_gb_per_s", "value"), False),
        (("parameters", "gemm_efficiency_max", "value"), False),
        (("parameters", "hbm_efficiency", "value"), False),
        (("parameters", "nvlink_latency_us", "value"), False),
    ],
}
"""(key path, zero allowed) of physical quantities per file kind. A value of :data:`EXTREMES` in
any of them is no real system's (a latency of 1e-300 us aside, which prices as zero: latencies
are left out below 1e-30), so a command given one must refuse it; zero is refused where the
quantity is positive and allowed where it means "none" (a peak of 0: no such tensor core)."""

TINY_OK = {"intra_node_latency_us", "inter_node_latency_us", "kernel_overhead_us", "host_launch_us",
           "nvlink_latency_us"}  # fmt: skip
"""Fields where a tiny positive value is merely zero to the cost model, not nonsense."""


def must_refuse(path: tuple, zero_ok: bool, value) -> bool:
    """Whether a command given ``value`` at ``path`` must fail (see :data:`PHYSICAL_FIELDS`)."""
    if value == 0:
        return not zero_ok
    if path[-1] in TINY_OK or (path[-1] == "value" and path[-2] in TINY_OK):
        return abs(value) > 1e20
    return True


FLAG_VALUES = {
    "estimate": [
        ("--tp", True),
        ("--pp", True),
        ("--cp", True),
        ("--ep", True),
        ("--vpp", True),
        ("--micro-batch-size", True),
        ("--recompute-num-layers", False),
        ("--fsdp-shard", True),
        ("--optimizer-instances", True),
        ("--framework", True),
        ("--recompute", True),
        ("--optimizer-sharding", True),
        ("--schedule", True),
        ("--layers-per-stage", True),
        ("--nodes", True),
        ("--global-batch-size", True),
        ("--seq-len", True),
        ("--software", True),
        ("--precision", True),
        ("--moe-dispatcher", True),
        ("--attention-impl", True),
    ],
    "timeline": [("--width", True), ("--svg", False), ("--trace", False)],
    "goodput": [
        ("--run-days", True),
        ("--gpu-failure-rate", True),
        ("--storage-write-gbps", True),
        ("--storage-read-gbps", True),
        ("--restart-s", False),
        ("--repair-hours", True),
        ("--checkpoint-interval-s", True),
        ("--spares", False),
    ],
    "search": [("--top", True), ("--tp", True), ("--pp", True), ("--framework", True), ("--out", False)],
    "sweep": [("--jobs", True), ("--cluster", True), ("--nodes", True)],
    "export": [("--out", False), ("--launcher", True)],
    "calibrate": [("--nodes", True), ("--out", False)],
}
"""(flag, zero refused) per command: every flag refuses an empty value and an empty list item;
those marked also refuse 0 and -0 (the others document 0: every layer, no restart, no spares; or
take a path, and ``0`` is a file name)."""

EMPTY_AND_ZERO = ["", " ", "0", "-0", "0.0", "-0.0", ",", "1,,2", "x,"]
"""Values a flag must refuse: empty ones always, zeros where :data:`FLAG_VALUES` says so."""


def is_empty_value(value: str) -> bool:
    """An empty value or a comma-separated list with an empty item (refused by every flag)."""
    return not value.strip() or ("," in value and any(not item.strip() for item in value.split(",")))
