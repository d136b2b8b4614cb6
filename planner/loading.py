"""Strict loading of models from YAML, JSON, HF config.json and presets, and the document reader
(:class:`Reader`) that planner.hardware and planner.jobs read GPUs, clusters and jobs with.

Every error names the file, the key path and the allowed values, and is a
:class:`~planner.errors.SpecError` (exit code 1, no traceback). Unknown keys are rejected.
Units are converted once here (GiB, GB/s, TFLOP/s, microseconds -> SI).
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from planner.errors import SpecError
from planner.layer_pattern import PatternError, parse_pattern
from planner.specs import (
    ACTIVATIONS,
    NORMALIZATIONS,
    POSITION_EMBEDDINGS,
    SOFTMAX_TYPES,
    WINDOW_TYPES,
    ModelSpec,
)
from planner.validation import check_number, limit, path_exists, read_text_capped, short_path

SCHEMA_VERSION = 1
"""The ``schema_version`` that model, cluster, job and graph-model files carry (the only one read)."""
GIB = 1024**3
GB = 1e9

MISSING = object()
"""Sentinel default of :meth:`Reader.get`: the key is required."""


class Reader:
    """Reads one mapping strictly: typed getters, then :meth:`done` rejects unknown keys."""

    def __init__(self, data: Any, where: str, path: str = "") -> None:
        if not isinstance(data, dict):
            raise SpecError(f"{where}: {path or 'top level'}: expected a mapping, got {type(data).__name__}")
        self.data, self.where, self.path, self.used = data, where, path, set()

    def _key(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def get(
        self,
        key: str,
        kind: type | tuple,
        default: Any = MISSING,
        *,
        choices=None,
        positive=False,
        maximum: float | None = None,
    ) -> Any:
        """Return ``data[key]`` checked against ``kind``, ``choices``, positivity, finiteness and the
        key's upper bound (``maximum``, default :data:`planner.validation.LIMITS`)."""
        self.used.add(key)
        if key not in self.data or self.data[key] is None:
            if default is MISSING:
                raise SpecError(f"{self.where}: missing required key '{self._key(key)}'")
            return default
        value = self.data[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if float in kinds and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if isinstance(value, bool) and bool not in kinds:
            raise SpecError(f"{self.where}: key '{self._key(key)}': expected {_names(kinds)}, got a boolean")
        if not isinstance(value, kinds):
            raise SpecError(
                f"{self.where}: key '{self._key(key)}': expected {_names(kinds)}, got {type(value).__name__} {value!r}"
            )
        if choices is not None and value not in choices:
            raise SpecError(
                f"{self.where}: key '{self._key(key)}': {value!r} is not allowed; allowed values: {', '.join(map(str, choices))}"
            )
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            # Finite, non-negative (positive if asked), under the key's realistic bound (validation.py).
            check_number(value, self.where, self._key(key), positive=positive, maximum=maximum)
        return value

    def optional_sub(self, key: str) -> Reader | None:
        """:meth:`sub` for an optional nested mapping: ``None`` when ``key`` is absent or null."""
        self.used.add(key)
        return None if self.data.get(key) is None else self.sub(key)

    def sub(self, key: str) -> Reader:
        """A reader over the nested mapping at ``key``."""
        self.used.add(key)
        if key not in self.data:
            raise SpecError(f"{self.where}: missing required key '{self._key(key)}'")
        return Reader(self.data[key], self.where, self._key(key))

    def done(self) -> None:
        """Reject keys that were never read."""
        unknown = sorted(set(self.data) - self.used)
        if unknown:
            raise SpecError(
                f"{self.where}: unknown key '{self._key(str(unknown[0]))}'{did_you_mean(str(unknown[0]), self.used)}; "
                f"allowed keys: {', '.join(sorted(self.used))}"
            )


def _names(kinds: tuple) -> str:
    return " or ".join(
        {
            int: "an integer",
            float: "a number",
            str: "a string",
            bool: "true/false",
            list: "a list",
            dict: "a mapping",
        }.get(k, k.__name__)
        for k in kinds
    )


def read_document(path: Path) -> dict:
    """Parse a YAML or JSON file into a mapping, with a one-line error on failure."""
    text = read_text_capped(path)
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except RecursionError:
        raise SpecError(f"{path}: nested too deeply to be a planner input") from None
    except (yaml.YAMLError, json.JSONDecodeError, ValueError) as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        detail = getattr(exc, "problem", None) or getattr(exc, "msg", None) or str(exc).splitlines()[0]
        raise SpecError(
            f"{path}: malformed {'JSON' if path.suffix == '.json' else 'YAML'}{where}: {detail}"
        ) from None
    if isinstance(data, dict) and _depth(data) > MAX_DEPTH:
        raise SpecError(f"{path}: nested more than {MAX_DEPTH} levels deep; not a planner input")
    if not isinstance(data, dict):
        raise SpecError(f"{path}: expected a mapping at the top level")
    return data


MAX_DEPTH = 32
"""Deepest nesting of an input (a graph plan nests about 6 levels); deeper data is refused before
any recursive code walks it."""


def _depth(data: Any, level: int = 1) -> int:
    """Nesting depth of ``data``, stopping just past :data:`MAX_DEPTH` (iterative: no recursion)."""
    deepest, stack = level, [(data, level)]
    while stack:
        item, d = stack.pop()
        deepest = max(deepest, d)
        if deepest > MAX_DEPTH:
            return deepest
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        stack.extend((c, d + 1) for c in children if isinstance(c, (dict, list)))
    return deepest


def check_header(r: Reader, kind: str) -> None:
    """The document's ``schema_version`` is this planner's and its ``kind`` is ``kind`` (SpecError
    naming the file otherwise)."""
    version = r.get("schema_version", int)
    if version != SCHEMA_VERSION:
        raise SpecError(f"{r.where}: schema_version {version} is not supported; supported: {SCHEMA_VERSION}")
    r.get("kind", str, choices=(kind,))


# ---------------------------------------------------------------------------------------------
# Models


def model_from_mapping(data: dict, where: str) -> ModelSpec:
    """Build a :class:`ModelSpec` from a planner model mapping (the preset/YAML schema)."""
    r = Reader(data, where)
    check_header(r, "model")
    r.get("source", str, "")
    r.get("description", str, "")
    hidden = r.get("hidden_size", int, positive=True)
    heads = r.get("num_attention_heads", int, positive=True)
    kv_default = hidden // heads
    num_experts = r.get("num_experts", int, 0)
    ffn = r.get("ffn_hidden_size", int, 4 * hidden, positive=True)
    spec = ModelSpec(
        name=r.get("name", str),
        num_layers=r.get("num_layers", int, positive=True),
        hidden_size=hidden,
        ffn_hidden_size=ffn,
        num_attention_heads=heads,
        num_query_groups=r.get("num_query_groups", int, heads, positive=True),
        kv_channels=r.get("kv_channels", int, kv_default, positive=True),
        vocab_size=r.get("vocab_size", int, positive=True),
        max_position_embeddings=r.get("max_position_embeddings", int, positive=True),
        activation=r.get("activation", str, "gelu", choices=ACTIVATIONS),
        normalization=r.get("normalization", str, "layernorm", choices=NORMALIZATIONS),
        position_embedding_type=r.get(
            "position_embedding_type", str, "learned_absolute", choices=POSITION_EMBEDDINGS
        ),
        rotary_base=r.get("rotary_base", int, 10000, positive=True),
        untie_embeddings_and_output_weights=r.get("untie_embeddings_and_output_weights", bool, False),
        add_bias_linear=r.get("add_bias_linear", bool, True),
        add_qkv_bias=r.get("add_qkv_bias", bool, False),
        qk_layernorm=r.get("qk_layernorm", bool, False),
        num_experts=num_experts,
        moe_router_topk=r.get("moe_router_topk", int, 2 if num_experts else 0),
        moe_ffn_hidden_size=r.get("moe_ffn_hidden_size", int, ffn if num_experts else 0),
        moe_shared_expert_intermediate_size=r.get("moe_shared_expert_intermediate_size", int, 0),
        moe_layer_freq=r.get("moe_layer_freq", int, 1, positive=True),
        moe_expert_capacity_factor=r.get("moe_expert_capacity_factor", float, 0.0),
        **_frontier_fields(r),
    )
    r.done()
    validate_model(spec, where)
    return spec


def _frontier_fields(r: Reader) -> dict[str, Any]:
    """MLA, layer patterns, local attention, sinks and MTP (all optional; docs/models.md)."""
    raw = r.get("moe_layer_pattern", (str, list), "")
    try:
        if isinstance(raw, list):
            if not all(isinstance(v, int) and not isinstance(v, bool) and v in (0, 1) for v in raw):
                raise PatternError("a list of 0 (dense) and 1 (MoE) entries")
            pattern = tuple(raw)
        else:
            pattern = parse_pattern(raw) if raw else ()
    except PatternError as exc:
        raise SpecError(f"{r.where}: key 'moe_layer_pattern': {exc}") from None
    return dict(
        moe_layer_pattern=pattern,
        multi_latent_attention=r.get("multi_latent_attention", bool, False),
        q_lora_rank=r.get("q_lora_rank", int, 0),
        kv_lora_rank=r.get("kv_lora_rank", int, 0),
        qk_head_dim=r.get("qk_head_dim", int, 0),
        qk_pos_emb_head_dim=r.get("qk_pos_emb_head_dim", int, 0),
        v_head_dim=r.get("v_head_dim", int, 0),
        window_size=r.get("window_size", int, 0),
        window_attn_skip_freq=r.get("window_attn_skip_freq", int, 0),
        window_type=r.get("window_type", str, "sliding", choices=WINDOW_TYPES),
        softmax_type=r.get("softmax_type", str, "vanilla", choices=SOFTMAX_TYPES),
        mtp_num_layers=r.get("mtp_num_layers", int, 0),
    )


def validate_model(m: ModelSpec, where: str) -> None:
    """Cross-field checks; each message names both fields."""
    if m.num_attention_heads % m.num_query_groups:
        raise SpecError(
            f"{where}: num_attention_heads ({m.num_attention_heads}) must be divisible by "
            f"num_query_groups ({m.num_query_groups})"
        )
    if m.num_experts and not (1 <= m.moe_router_topk <= m.num_experts):
        raise SpecError(
            f"{where}: moe_router_topk ({m.moe_router_topk}) must be in 1..num_experts ({m.num_experts})"
        )
    if not m.num_experts and m.moe_router_topk:
        raise SpecError(f"{where}: moe_router_topk is set but num_experts is 0")
    if m.moe_layer_pattern and len(m.moe_layer_pattern) != m.num_layers:
        raise SpecError(
            f"{where}: moe_layer_pattern has {len(m.moe_layer_pattern)} entries but num_layers is {m.num_layers}"
        )
    if m.moe_layer_pattern and not m.num_experts:
        raise SpecError(f"{where}: moe_layer_pattern is set but num_experts is 0")
    mla = (m.q_lora_rank, m.kv_lora_rank, m.qk_head_dim, m.qk_pos_emb_head_dim, m.v_head_dim)
    if m.multi_latent_attention and not all(mla[1:]):
        raise SpecError(
            f"{where}: multi_latent_attention needs kv_lora_rank, qk_head_dim, qk_pos_emb_head_dim "
            "and v_head_dim (q_lora_rank 0 = no query compression)"
        )
    if not m.multi_latent_attention and any(mla):
        raise SpecError(
            f"{where}: q_lora_rank/kv_lora_rank/qk_head_dim/qk_pos_emb_head_dim/v_head_dim "
            "are set but multi_latent_attention is false"
        )
    if m.window_attn_skip_freq and not m.window_size:
        raise SpecError(f"{where}: window_attn_skip_freq is set but window_size is 0")
    if m.mtp_num_layers and m.mtp_num_layers > m.num_layers:
        raise SpecError(f"{where}: mtp_num_layers ({m.mtp_num_layers}) exceeds num_layers ({m.num_layers})")


def _rope_theta(data: dict, where: str) -> int:
    """``rope_theta`` of a Hugging Face config (``transformers`` LlamaConfig & co., default 10000;
    newer configs nest it in ``rope_parameters``) as Megatron's integer ``--rotary-base``."""
    nested = data.get("rope_parameters")
    theta = data.get("rope_theta", nested.get("rope_theta") if isinstance(nested, dict) else None)
    if theta is None:
        return 10000
    if isinstance(theta, bool) or not isinstance(theta, (int, float)) or theta != theta or theta <= 0:
        raise SpecError(f"{where}: key 'rope_theta': expected a positive number, got {theta!r}"[:300])
    if theta != int(theta) or theta > 10**12:
        raise SpecError(
            f"{where}: key 'rope_theta': {theta!r} is not an integer; Megatron's --rotary-base takes an integer"[
                :300
            ]
        )
    return int(theta)


def load_hf_config(path: Path) -> ModelSpec:
    """Import a local Hugging Face ``config.json`` (no network).

    Supported ``model_type``: llama, mistral, mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe, gpt2,
    gpt_neox, gemma, gemma2, nemotron, and (:mod:`planner.hf_frontier`) deepseek_v2, deepseek_v3,
    kimi_k2, gpt_oss, llama4 (its ``text_config``), llama4_text, phi3. Field meanings follow the
    ``transformers`` configuration classes of the same names.
    """
    data = read_document(path)
    where = str(path)
    mt = data.get("model_type")
    if not isinstance(mt, str):
        raise SpecError(f"{where}: key 'model_type': expected a string, got {type(mt).__name__} {mt!r}"[:300])
    name = path.parent.name or path.stem
    if path.parent.parent.name == "snapshots" and path.parent.parent.parent.name.startswith("models--"):
        name = path.parent.parent.parent.name.split("--")[-1]  # hub cache: models--org--name/snapshots/rev
    from planner import hf_frontier  # imports this module: resolved at call time

    if mt in hf_frontier.MODEL_TYPES:
        return hf_frontier.load_frontier(data, where, name)

    def need(key: str, *alts: str) -> Any:
        """A required positive integer field (the first of ``key`` and ``alts`` present)."""
        for k in (key, *alts):
            if data.get(k) is not None:
                return check_number(data[k], where, k, integer=True, positive=True, maximum=_hf_limit(k))
        raise SpecError(f"{where}: missing required key '{key}' for model_type '{mt}'")

    def opt(key: str) -> Any:
        """An optional positive integer field (None when absent, null or 0)."""
        if not data.get(key):
            return None
        return check_number(data[key], where, key, integer=True, positive=True, maximum=_hf_limit(key))

    llama_like = {
        "llama",
        "mistral",
        "mixtral",
        "qwen2",
        "qwen2_moe",
        "qwen3",
        "qwen3_moe",
        "gemma",
        "gemma2",
        "nemotron",
    }
    if mt in llama_like:
        hidden = need("hidden_size")
        heads = need("num_attention_heads")
        act = data.get("hidden_act", data.get("hidden_activation", "silu"))
        if mt == "nemotron":
            activation = "squared_relu" if act in ("relu2", "squared_relu") else "gelu"
        else:
            # Llama-family MLPs are gated; Gemma's GeGLU has the cost and shape of SwiGLU.
            activation = "swiglu"
        kwargs: dict[str, Any] = dict(
            name=name,
            num_layers=need("num_hidden_layers"),
            hidden_size=hidden,
            ffn_hidden_size=need("intermediate_size"),
            num_attention_heads=heads,
            num_query_groups=opt("num_key_value_heads") or heads,
            kv_channels=opt("head_dim") or hidden // heads,
            vocab_size=need("vocab_size"),
            max_position_embeddings=need("max_position_embeddings"),
            activation=activation,
            normalization="layernorm" if mt == "nemotron" else "rmsnorm",
            position_embedding_type="rope",
            rotary_base=_rope_theta(data, where),
            untie_embeddings_and_output_weights=not data.get("tie_word_embeddings", mt.startswith("gemma")),
            add_bias_linear=bool(data.get("mlp_bias", False)) and bool(data.get("attention_bias", False)),
            add_qkv_bias=mt in ("qwen2", "qwen2_moe") or bool(data.get("attention_bias", False)),
            qk_layernorm=mt in ("qwen3", "qwen3_moe"),
        )
        if mt == "mixtral":
            kwargs.update(
                num_experts=need("num_local_experts"),
                moe_router_topk=need("num_experts_per_tok"),
                moe_ffn_hidden_size=need("intermediate_size"),
            )
        elif mt in ("qwen2_moe", "qwen3_moe"):
            kwargs.update(
                num_experts=need("num_experts"),
                moe_router_topk=need("num_experts_per_tok"),
                moe_ffn_hidden_size=need("moe_intermediate_size"),
                moe_layer_freq=opt("decoder_sparse_step") or 1,
                moe_shared_expert_intermediate_size=opt("shared_expert_intermediate_size") or 0,
            )
    elif mt == "gpt2":
        hidden = need("n_embd", "hidden_size")
        kwargs = dict(
            name=name,
            num_layers=need("n_layer", "num_hidden_layers"),
            hidden_size=hidden,
            ffn_hidden_size=opt("n_inner") or 4 * hidden,
            num_attention_heads=need("n_head"),
            num_query_groups=need("n_head"),
            kv_channels=hidden // need("n_head"),
            vocab_size=need("vocab_size"),
            max_position_embeddings=need("n_positions", "n_ctx"),
            activation="gelu",
            normalization="layernorm",
            position_embedding_type="learned_absolute",
            untie_embeddings_and_output_weights=False,
            add_bias_linear=True,
        )
    elif mt == "gpt_neox":
        hidden = need("hidden_size")
        heads = need("num_attention_heads")
        kwargs = dict(
            name=name,
            num_layers=need("num_hidden_layers"),
            hidden_size=hidden,
            ffn_hidden_size=need("intermediate_size"),
            num_attention_heads=heads,
            num_query_groups=heads,
            kv_channels=hidden // heads,
            vocab_size=need("vocab_size"),
            max_position_embeddings=need("max_position_embeddings"),
            activation="gelu",
            normalization="layernorm",
            position_embedding_type="rope",
            rotary_base=_rope_theta(data, where),
            untie_embeddings_and_output_weights=not data.get("tie_word_embeddings", False),
            add_bias_linear=True,
        )
    else:
        supported = (
            "deepseek_v2, deepseek_v3, gemma, gemma2, gpt2, gpt_neox, gpt_oss, kimi_k2, llama, llama4, "
            "llama4_text, mistral, mixtral, nemotron, phi3, qwen2, qwen2_moe, qwen3, qwen3_moe"
        )
        raise SpecError(f"{where}: key 'model_type': {mt!r} is not supported; allowed values: {supported}")
    for key, value in kwargs.items():
        if isinstance(value, (bool, str)):
            continue
        # Derived fields (hidden // heads, 4 * hidden) get the planner key's bound too.
        optional = key.startswith("moe_") or key == "num_experts"
        check_number(value, f"{where} (as planner's {key})", key, integer=True, positive=not optional)
    for key in ("tie_word_embeddings", "mlp_bias", "attention_bias"):
        if key in data and not isinstance(data[key], bool):
            raise SpecError(f"{where}: key '{key}': expected true/false, got {data[key]!r}"[:300])
    spec = ModelSpec(**kwargs)
    validate_model(spec, where)
    return spec


_HF_KEYS = {
    "n_routed_experts": "num_experts",
    "n_shared_experts": "num_experts",
    "first_k_dense_replace": "num_layers",
    "qk_nope_head_dim": "qk_head_dim",
    "qk_rope_head_dim": "qk_pos_emb_head_dim",
    "num_nextn_predict_layers": "mtp_num_layers",
    "sliding_window": "window_size",
    "attention_chunk_size": "window_size",
    "intermediate_size_mlp": "ffn_hidden_size",
    "interleave_moe_layer_step": "moe_layer_freq",
    "no_rope_layer_interval": "num_layers",
    "experts_per_token": "moe_router_topk",
    "num_hidden_layers": "num_layers",
    "n_layer": "num_layers",
    "n_embd": "hidden_size",
    "n_head": "num_attention_heads",
    "n_inner": "ffn_hidden_size",
    "intermediate_size": "ffn_hidden_size",
    "moe_intermediate_size": "moe_ffn_hidden_size",
    "shared_expert_intermediate_size": "moe_shared_expert_intermediate_size",
    "num_key_value_heads": "num_query_groups",
    "head_dim": "kv_channels",
    "num_local_experts": "num_experts",
    "num_experts_per_tok": "moe_router_topk",
    "decoder_sparse_step": "moe_layer_freq",
    "n_positions": "max_position_embeddings",
    "n_ctx": "max_position_embeddings",
}


def _hf_limit(hf_key: str) -> float | None:
    """The bound of the planner field an HF ``config.json`` key maps to."""
    return limit(_HF_KEYS.get(hf_key, hf_key))


def preset_files(package: str, folder: str) -> dict[str, Any]:
    """The YAML presets shipped in ``package``/``folder``, by name (file name less ``.yaml``)."""
    base = resources.files(package).joinpath(folder)
    return {
        p.name[: -len(".yaml")]: p
        for p in sorted(base.iterdir(), key=lambda p: p.name)
        if p.name.endswith(".yaml")
    }


def preset_or_path(name_or_path: str, files: Iterable[str]) -> str:
    """``name_or_path`` as a command line gives it, resolved: an existing file or an exact preset name
    stays as it is; otherwise the preset it names ignoring case (:func:`preset_name`), if one."""
    if name_or_path in files or path_exists(Path(name_or_path)):
        return name_or_path
    return preset_name(name_or_path, files) or name_or_path


def preset_name(name: str, names: Iterable[str]) -> str | None:
    """The built-in name ``name`` refers to: itself, or the one name equal to it ignoring case."""
    names = list(names)
    if name in names:
        return name
    folded = [n for n in names if n.lower() == name.lower()]
    return folded[0] if len(folded) == 1 else None


def did_you_mean(name: str, names: Iterable[str]) -> str:
    """`` (did you mean a or b?)`` for the closest built-in names (difflib, case ignored), or ''."""
    by_lower = {n.lower(): n for n in names}
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=3, cutoff=0.6)
    if not close:
        return ""
    return " (did you mean " + " or ".join(by_lower[c] for c in close) + "?)"


def _hf_config_file(path: Path) -> Path:
    """A directory given as a model: its ``config.json``, or that of its one Hugging Face snapshot
    (the hub cache layout ``models--org--name/snapshots/<revision>/config.json``)."""
    if (path / "config.json").is_file():
        return path / "config.json"
    snapshots = path / "snapshots" if (path / "snapshots").is_dir() else path
    found = sorted(p.parent for p in snapshots.glob("*/config.json"))
    if len(found) == 1:
        return found[0] / "config.json"
    if not found:
        raise SpecError(
            f"{short_path(str(path))}: a directory without config.json (nor one snapshot holding it)"
        )
    raise SpecError(
        f"{short_path(str(path))}: {len(found)} snapshots hold a config.json "
        f"({', '.join(p.name for p in found[:5])}); pass one snapshot directory"
    )


def model_preset_names(include_graph: bool = True) -> list[str]:
    """Names of the built-in model presets, sorted; ``include_graph=False`` leaves out graph models."""
    files = preset_files("planner.presets", "models")
    if include_graph:
        return sorted(files)
    return sorted(
        n for n, p in files.items() if (yaml.safe_load(p.read_text()) or {}).get("kind") != "graph_model"
    )


def load_model(name_or_path: str) -> ModelSpec:
    """A model from a preset name, a planner YAML/JSON file, or a HF ``config.json``."""
    presets = preset_files("planner.presets", "models")
    name_or_path = preset_or_path(name_or_path, presets)
    path = Path(name_or_path)
    if name_or_path in presets:
        data = yaml.safe_load(presets[name_or_path].read_text())
        if data.get("kind") == "graph_model":
            raise SpecError(
                f"preset {name_or_path} is a graph model (a DAG of blocks): plan it with planner search; "
                "estimate, timeline and bubbles take its plan file with --plan"
            )
        return model_from_mapping(data, f"preset {name_or_path}")
    if not path_exists(path):
        hint = did_you_mean(name_or_path, presets)
        raise SpecError(
            f"unknown model '{name_or_path}'{hint}: not a preset and no such file; presets: {', '.join(sorted(presets))}"
        )
    if path.is_dir():
        path = _hf_config_file(path)
    data = read_document(path)
    if "model_type" in data and "schema_version" not in data:
        return load_hf_config(path)
    return model_from_mapping(data, str(path))
