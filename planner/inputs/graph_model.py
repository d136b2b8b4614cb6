"""Graph models: a model as a directed acyclic graph of blocks (GraphPipe's multi-branch DNNs).

A block is either a stack of transformer layers (described with the same keys as a planner model
file, plus the tokens it processes per sample) or a generic block given by its FLOPs, parameters
and activation bytes per sample. Edges carry the tensor one block hands to the next. GraphPipe
(Jeon et al. 2024, arXiv:2406.17145) evaluates multi-branch models of this kind (multi-modal
transformers, DLRM, CANDLE-Uno); planner's file format is its own (the paper's is not public).

File format (YAML or JSON, ``kind: graph_model``)::

    schema_version: 1
    kind: graph_model
    name: my-vlm
    blocks:
      - name: vision            # unique block name
        type: transformer       # transformer | generic
        seq_length: 1024        # tokens per sample (default: the job's --seq-len)
        causal: false           # bidirectional encoder attention (default true)
        num_layers: 32          # ... every key of a planner model file, except name/kind
        hidden_size: 1280
        num_attention_heads: 16
      - name: projector
        type: generic
        forward_flop_per_sample: 1.3e10
        params: 6557440
        activation_bytes_per_sample: 1.3e7
        output_bytes_per_sample: 1.05e7
      - name: decoder
        type: transformer
        embedding: true         # token embedding on its first layer (needs vocab_size)
        output_head: true       # output projection + loss on its last layer
        ...
    edges:
      - {from: vision, to: projector}
      - {from: projector, to: decoder, bytes_per_sample: 1.05e7}   # default: the source's output

A transformer block's output per sample is ``seq_length x hidden_size`` 16-bit values. A decoder
block with ``cross_attention_from: encoder`` adds a cross-attention sub-layer to every layer
(T5, Raffel et al. 2020, arXiv:1910.10683), attending over the named block's output; the source
may be a generic block with ``seq_length`` (a vision-language projector, whose width is then
``output_bytes_per_sample / (seq_length x 2)``). A block's layers may follow Megatron-Core's hybrid
layer pattern (``hybrid_layer_pattern``): ``-`` layers are MLP-only, so a one-layer ``-`` block
with ``cross_attention_from`` is a cross-attention + MLP layer without self-attention (Llama 3.2
Vision's cross-attention layers).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from planner.inputs.documents import Reader, check_header, preset_files, read_document
from planner.inputs.errors import SpecError
from planner.inputs.graph_spec import (
    BLOCK_TYPES,
    GRAPH_ACT_BYTES,
    Block,
    Edge,
    GraphModelSpec,
    cross_attention_params,
)
from planner.inputs.model_yaml import model_from_mapping
from planner.inputs.validation import path_exists, short_path

__all__ = [
    "BLOCK_TYPES",
    "Block",
    "Edge",
    "GraphModelSpec",
    "cross_attention_params",
    "graph_model_from_mapping",
    "graph_model_to_mapping",
    "graph_preset_names",
    "is_graph_model",
    "load_graph_model",
]

# ------------------------------------------------------------------------------------------------
# Loading

MAX_BLOCKS = 256
"""Most blocks in one graph model. GraphPipe's evaluated models have at most tens of branches and
blocks; the acyclicity check recurses once per block along a path, well within Python's limit."""

_BLOCK_KEYS = ("name", "type", "seq_length", "causal", "embedding", "output_head", "cross_attention_from")
_GENERIC_KEYS = (
    "forward_flop_per_sample",
    "params",
    "activation_bytes_per_sample",
    "output_bytes_per_sample",
)


def graph_model_from_mapping(data: dict, where: str) -> GraphModelSpec:
    """Build a :class:`GraphModelSpec`; every error names the file and the key path."""
    r = Reader(data, where)
    check_header(r, "graph_model")
    name = r.get("name", str)
    description = r.get("description", str, "")
    source = r.get("source", str, "")
    raw_blocks = r.get("blocks", list)
    raw_edges = r.get("edges", list, [])
    r.done()
    if not raw_blocks:
        raise SpecError(f"{where}: key 'blocks': needs at least one block")
    if len(raw_blocks) > MAX_BLOCKS:
        raise SpecError(f"{where}: key 'blocks': {len(raw_blocks)} blocks; at most {MAX_BLOCKS} are allowed")
    blocks: list[Block] = []
    for i, raw in enumerate(raw_blocks):
        blocks.append(_block(raw, where, f"blocks[{i}]", name))
    names = [b.name for b in blocks]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise SpecError(f"{where}: key 'blocks': block names must be unique, repeated: {', '.join(dupes)}")
    edges: list[Edge] = []
    for i, raw in enumerate(raw_edges):
        er = Reader(raw, where, f"edges[{i}]")
        src = er.get("from", str, choices=names)
        dst = er.get("to", str, choices=names)
        nbytes = er.get("bytes_per_sample", float, 0.0)
        er.done()
        if src == dst:
            raise SpecError(
                f"{where}: key 'edges[{i}]': an edge needs two different blocks, got {src} -> {dst}"
            )
        edges.append(Edge(src=src, dst=dst, bytes_per_sample=nbytes))
    pairs = [(e.src, e.dst) for e in edges]
    if len(set(pairs)) != len(pairs):
        raise SpecError(f"{where}: key 'edges': an edge is listed twice")
    spec = GraphModelSpec(
        name=name, blocks=tuple(blocks), edges=tuple(edges), description=description, source=source
    )
    _validate(spec, where)
    return spec


def _block(raw: object, where: str, path: str, model_name: str) -> Block:
    if not isinstance(raw, dict):
        raise SpecError(f"{where}: key '{path}': expected a mapping, got {type(raw).__name__}")
    r = Reader(raw, where, path)
    name = r.get("name", str)
    kind = r.get("type", str, choices=BLOCK_TYPES)
    seq = r.get("seq_length", int, 0)
    if kind == "generic":
        block = Block(
            name=name,
            type=kind,
            seq_length=seq,
            forward_flop_per_sample=r.get("forward_flop_per_sample", float, positive=True),
            params=r.get("params", int, 0),
            activation_bytes_per_sample=r.get("activation_bytes_per_sample", float, 0.0),
            output_bytes_per_sample=r.get("output_bytes_per_sample", float, positive=True),
        )
        r.done()
        return block
    for key in _GENERIC_KEYS:
        if key in raw:
            raise SpecError(
                f"{where}: key '{path}.{key}': only generic blocks take it (this block is a transformer)"
            )
    causal = r.get("causal", bool, True)
    embedding = r.get("embedding", bool, False)
    output_head = r.get("output_head", bool, False)
    cross = r.get("cross_attention_from", str, "")
    layer_keys = {k: v for k, v in raw.items() if k not in _BLOCK_KEYS}
    if not (embedding or output_head):
        layer_keys.setdefault("vocab_size", 1)  # unused: no embedding and no output layer
    if seq or not embedding:
        # the position table's length: the block's own tokens, or unused (no embedding here)
        layer_keys.setdefault("max_position_embeddings", seq or 1)
    mapping = {"schema_version": 1, "kind": "model", "name": f"{model_name}.{name}", **layer_keys}
    transformer = model_from_mapping(mapping, f"{where} ({path})")
    if transformer.is_moe:
        raise SpecError(
            f"{where}: key '{path}.num_experts': graph pipelines support dense blocks only (no expert parallelism)"
        )
    return Block(
        name=name,
        type=kind,
        transformer=transformer,
        seq_length=seq,
        causal=causal,
        embedding=embedding,
        output_head=output_head,
        cross_attention_from=cross,
    )


def _validate(spec: GraphModelSpec, where: str) -> None:
    names = [b.name for b in spec.blocks]
    for b in spec.blocks:
        if b.cross_attention_from:
            if b.cross_attention_from not in names or b.cross_attention_from == b.name:
                raise SpecError(
                    f"{where}: block '{b.name}': key 'cross_attention_from': {b.cross_attention_from!r} is not "
                    f"another block; blocks: {', '.join(names)}"
                )
            src = spec.block(b.cross_attention_from)
            if src.transformer is None and (
                not src.seq_length
                or src.output_width * src.seq_length * GRAPH_ACT_BYTES != src.output_bytes_per_sample
            ):
                raise SpecError(
                    f"{where}: block '{b.name}': key 'cross_attention_from': {b.cross_attention_from!r} is a generic "
                    "block without seq_length, or whose output_bytes_per_sample is not seq_length x width x 2 bytes"
                )
            if not any(e.src == b.cross_attention_from and e.dst == b.name for e in spec.edges):
                raise SpecError(
                    f"{where}: block '{b.name}' cross-attends to '{b.cross_attention_from}' but no edge "
                    f"'{b.cross_attention_from}' -> '{b.name}' is listed"
                )
    # acyclic, one connected graph
    succ = {n: [e.dst for e in spec.edges if e.src == n] for n in names}
    state: dict[str, int] = {}

    def visit(n: str, trail: list[str]) -> None:
        state[n] = 1
        for s in succ[n]:
            if state.get(s) == 1:
                raise SpecError(
                    f"{where}: key 'edges': the blocks form a cycle: {' -> '.join([*trail, n, s])}"
                )
            if s not in state:
                visit(s, [*trail, n])
        state[n] = 2

    for n in names:
        if n not in state:
            visit(n, [])
    seen, todo = {names[0]}, [names[0]]
    while todo:
        n = todo.pop()
        for e in spec.edges:
            for a, b in ((e.src, e.dst), (e.dst, e.src)):
                if a == n and b not in seen:
                    seen.add(b)
                    todo.append(b)
    if len(seen) != len(names):
        loose = [n for n in names if n not in seen]
        raise SpecError(f"{where}: key 'edges': blocks not connected to the rest: {', '.join(loose)}")
    sinks = [n for n in names if not succ[n]]
    heads = [b.name for b in spec.blocks if b.output_head]
    if len(sinks) != 1:
        raise SpecError(
            f"{where}: key 'edges': the graph needs exactly one final block, found {', '.join(sinks)}"
        )
    if heads and heads != sinks:
        raise SpecError(
            f"{where}: block '{heads[0]}' has output_head but is not the final block ({sinks[0]})"
        )


def is_graph_document(data: dict) -> bool:
    """Whether a parsed model document is a graph model."""
    return data.get("kind") == "graph_model"


def graph_preset_names() -> list[str]:
    """Names of the built-in graph-model presets, sorted."""
    out = []
    for name, path in preset_files("planner.presets", "models").items():
        if is_graph_document(yaml.safe_load(path.read_text()) or {}):
            out.append(name)
    return sorted(out)


def load_graph_model(name_or_path: str) -> GraphModelSpec:
    """A graph model from a preset name or a YAML/JSON file."""
    presets = preset_files("planner.presets", "models")
    if name_or_path in presets:
        data = yaml.safe_load(presets[name_or_path].read_text())
        where = f"preset {name_or_path}"
    else:
        path = Path(name_or_path)
        if not path_exists(path):
            raise SpecError(f"unknown model '{short_path(name_or_path)}': not a preset and no such file")
        data = read_document(path)
        where = str(path)
    if not is_graph_document(data):
        raise SpecError(f"{where}: key 'kind': expected graph_model, got {data.get('kind')!r}")
    return graph_model_from_mapping(data, where)


def is_graph_model(name_or_path: str) -> bool:
    """Whether ``name_or_path`` names a graph-model preset or file (False when unreadable)."""
    presets = preset_files("planner.presets", "models")
    if name_or_path in presets:
        return is_graph_document(yaml.safe_load(presets[name_or_path].read_text()) or {})
    path = Path(name_or_path)
    if path.suffix.lower() not in (".yaml", ".yml", ".json") or not path_exists(path) or not path.is_file():
        return False
    try:
        data = read_document(path)
    except SpecError:
        return False
    return is_graph_document(data)


def graph_model_to_mapping(g: GraphModelSpec) -> dict:
    """The graph model as its file's mapping (round-trips through :func:`graph_model_from_mapping`)."""
    from planner.inputs.model_yaml import MODEL_FIELDS, optional_model_fields

    blocks = []
    for b in g.blocks:
        out: dict = {"name": b.name, "type": b.type}
        if b.seq_length:
            out["seq_length"] = b.seq_length
        if b.transformer is not None:
            out.update(causal=b.causal, embedding=b.embedding, output_head=b.output_head)
            if b.cross_attention_from:
                out["cross_attention_from"] = b.cross_attention_from
            out.update(
                {
                    f: getattr(b.transformer, f)
                    for f in MODEL_FIELDS
                    if not f.startswith("moe_") and f != "num_experts"
                }
            )
            optional = optional_model_fields(b.transformer)
            out.update({k: v for k, v in optional.items() if not k.startswith("moe_")})
        else:
            out.update(
                forward_flop_per_sample=b.forward_flop_per_sample,
                params=b.params,
                activation_bytes_per_sample=b.activation_bytes_per_sample,
                output_bytes_per_sample=b.output_bytes_per_sample,
            )
        blocks.append(out)
    doc = {"schema_version": 1, "kind": "graph_model", "name": g.name}
    if g.description:
        doc["description"] = g.description
    if g.source:
        doc["source"] = g.source
    doc["blocks"] = blocks
    doc["edges"] = [
        {
            "from": e.src,
            "to": e.dst,
            **({"bytes_per_sample": e.bytes_per_sample} if e.bytes_per_sample else {}),
        }
        for e in g.edges
    ]
    return doc
