"""Which torchtitan model runs a planner model: a built-in flavor, or a flavor planner registers.

torchtitan 0.2.2 picks the architecture with ``[model] name`` (a TrainSpec: ``llama3``, ``qwen3``,
...; ``torchtitan/models/__init__.py``) and its size with ``[model] flavor`` (a key of the
TrainSpec's ``model_args`` dict: ``llama3_args`` in ``torchtitan/models/llama3/__init__.py``,
``qwen3_args`` in ``torchtitan/models/qwen3/__init__.py``). The job config has no section for
model dimensions (``ConfigManager._dict_to_dataclass`` rejects unknown keys), so a model that is
no built-in flavor is registered by a small module named in ``[experimental] custom_import``
(imported by ``torchtitan/train.py`` before the TrainSpec is looked up) that adds a flavor to that
dict.

What each family builds (0.2.2 sources):

* ``llama3`` (``TransformerModelArgs``): SwiGLU MLP of width
  ``multiple_of * ceil(int(ffn_dim_multiplier * int(8 * dim / 3)) / multiple_of)``, RMSNorm, RoPE,
  no biases, untied output layer, head dim ``dim / n_heads``, dense; it has a pipelining function
  (``pipeline_llm``).
* ``qwen3`` (``Qwen3ModelArgs``): SwiGLU, RMSNorm, RoPE, no biases, ``head_dim``, optional QK norm
  and weight tying, every layer MoE when ``moe_enabled`` (``MoEArgs``: routed experts, top-k,
  shared experts of ``moe_inter_dim`` each); ``pipelining_fn=None``, so no pipeline parallelism.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.inputs.errors import SpecError
from planner.inputs.model_spec import ModelSpec

VERSION = "0.2.2"


@dataclass(frozen=True, slots=True)
class TitanModel:
    """A planner model as torchtitan runs it."""

    name: str
    """TrainSpec name (``[model] name``)."""
    flavor: str
    """``[model] flavor``."""
    custom_args: tuple[tuple[str, object], ...] = ()
    """Keyword arguments of the registered flavor's args class; empty for a built-in flavor."""

    @property
    def pipelining(self) -> bool:
        """Whether the TrainSpec has a pipelining function (pipeline parallelism)."""
        return self.name == "llama3"

    @property
    def args_class(self) -> str:
        return "TransformerModelArgs" if self.name == "llama3" else "Qwen3ModelArgs"


def _llama3_ffn(dim: int, multiplier: float | None, multiple_of: int) -> int:
    """FeedForward width of torchtitan's llama3 (``torchtitan/models/llama3/model/model.py``)."""
    hidden = int(2 * 4 * dim / 3)
    if multiplier is not None:
        hidden = int(multiplier * hidden)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


def _llama3(dim, layers, heads, kv, mult, multiple_of) -> dict:
    return {
        "num_layers": layers,
        "hidden_size": dim,
        "ffn_hidden_size": _llama3_ffn(dim, mult, multiple_of),
        "num_attention_heads": heads,
        "num_query_groups": kv,
        "kv_channels": dim // heads,
        "vocab_size": 128256,
        "untie_embeddings_and_output_weights": True,
        "qk_layernorm": False,
        "num_experts": 0,
        "moe_router_topk": 0,
        "moe_ffn_hidden_size": 0,
        "moe_shared_expert_intermediate_size": 0,
    }


def _qwen3(dim, layers, heads, kv, hidden, tied, experts=0, topk=0, moe_inter=0) -> dict:
    return {
        "num_layers": layers,
        "hidden_size": dim,
        "ffn_hidden_size": hidden,
        "num_attention_heads": heads,
        "num_query_groups": kv,
        "kv_channels": 128,
        "vocab_size": 151936,
        "untie_embeddings_and_output_weights": not tied,
        "qk_layernorm": True,
        "num_experts": experts,
        "moe_router_topk": topk,
        "moe_ffn_hidden_size": moe_inter,
        "moe_shared_expert_intermediate_size": 0,
    }


FLAVORS: dict[tuple[str, str], dict] = {
    # torchtitan/models/llama3/__init__.py (0.2.2): the FFN width follows from
    # ffn_dim_multiplier and multiple_of (8B: 14336, 70B: 28672, 405B: 53248).
    ("llama3", "8B"): _llama3(4096, 32, 32, 8, 1.3, 1024),
    ("llama3", "70B"): _llama3(8192, 80, 64, 8, 1.3, 4096),
    ("llama3", "405B"): _llama3(16384, 126, 128, 8, 1.2, 4096),
    # torchtitan/models/qwen3/__init__.py (0.2.2), head_dim 128 throughout.
    ("qwen3", "0.6B"): _qwen3(1024, 28, 16, 8, 3072, True),
    ("qwen3", "1.7B"): _qwen3(2048, 28, 16, 8, 6144, True),
    ("qwen3", "4B"): _qwen3(2560, 36, 32, 8, 9728, True),
    ("qwen3", "8B"): _qwen3(4096, 36, 32, 8, 12288, False),
    ("qwen3", "14B"): _qwen3(5120, 40, 40, 8, 17408, False),
    ("qwen3", "32B"): _qwen3(5120, 64, 64, 8, 25600, False),
    ("qwen3", "30B-A3B"): _qwen3(2048, 48, 32, 4, 6144, False, 128, 8, 768),
    ("qwen3", "235B-A22B"): _qwen3(4096, 94, 64, 4, 12288, False, 128, 8, 1536),
}
"""Built-in flavors as planner model fields (the fields torchtitan's flavor fixes)."""

CUSTOM_MODULE = "planner_flavor"
"""Module name of the generated flavor registration (``[experimental] custom_import``)."""


def _fields(m: ModelSpec) -> dict:
    return {k: getattr(m, k) for k in next(iter(FLAVORS.values()))}


def architecture_reason(m: ModelSpec) -> str | None:
    """Why no torchtitan 0.2.2 model family builds ``m`` (None when one does)."""
    what = []
    if m.activation != "swiglu":
        what.append(f"a {m.activation} MLP")
    if m.normalization != "rmsnorm":
        what.append(m.normalization)
    if m.position_embedding_type != "rope":
        what.append(f"{m.position_embedding_type} position embeddings")
    if m.add_bias_linear or m.add_qkv_bias:
        what.append("linear biases")
    if m.is_moe and m.moe_layer_freq != 1:
        what.append("MoE only every few layers")
    if m.is_moe and m.moe_expert_capacity_factor:
        what.append("an expert capacity factor (torchtitan is dropless)")
    if m.is_moe and m.moe_shared_expert_intermediate_size % m.moe_ffn_hidden_size:
        what.append("shared experts not a multiple of the expert width")
    if m.hybrid_layer_pattern:
        what.append("a hybrid layer pattern (Mamba-2, attention and MLP layers)")
    if m.parallel_mamba_attention:
        what.append("attention and Mamba-2 side by side in every layer")
    if m.has_linear_attention:
        kind = "Kimi Delta Attention" if m.linear_attention_type == "kda" else "gated DeltaNet"
        what.append(f"{kind} (linear attention) layers")
    if m.attention_output_gate:
        what.append("gated attention")
    if m.is_dsa:
        what.append("DeepSeek sparse attention (a lightning indexer)")
    if not what:
        return None
    return (
        f"torchtitan {VERSION} has no model with {', '.join(what)} (its llama3 and qwen3 families are "
        "SwiGLU, RMSNorm, RoPE, no biases); register a TrainSpec for it in torchtitan first"
    )


def _llama3_multiplier(dim: int, ffn: int) -> float | None:
    """``ffn_dim_multiplier`` with ``multiple_of = ffn`` that yields exactly ``ffn`` (None: default)."""
    if _llama3_ffn(dim, None, ffn) == ffn:
        return None
    base = int(8 * dim / 3)
    for candidate in (round(ffn / base, 6), round(ffn / base, 9), ffn / base):
        if _llama3_ffn(dim, candidate, ffn) == ffn:
            return candidate
    return None


def titan_model(m: ModelSpec) -> TitanModel:
    """The torchtitan model for ``m``: a built-in flavor when every field matches, else a flavor to
    register (``llama3`` when it can build it, since only llama3 pipelines; else ``qwen3``)."""
    reason = architecture_reason(m)
    if reason:
        raise SpecError(reason)
    fields = _fields(m)
    for (name, flavor), ref in FLAVORS.items():
        if ref == fields:
            return TitanModel(name, flavor)
    flavor = "planner_" + "".join(ch if ch.isalnum() else "_" for ch in m.name)
    llama_ok = (
        not m.is_moe
        and not m.qk_layernorm
        and m.untie_embeddings_and_output_weights
        and m.kv_channels * m.num_attention_heads == m.hidden_size
        and (
            _llama3_ffn(m.hidden_size, None, m.ffn_hidden_size) == m.ffn_hidden_size
            or _llama3_multiplier(m.hidden_size, m.ffn_hidden_size) is not None
        )
    )
    if llama_ok:
        mult = _llama3_multiplier(m.hidden_size, m.ffn_hidden_size)
        args: list[tuple[str, object]] = [
            ("dim", m.hidden_size),
            ("n_layers", m.num_layers),
            ("n_heads", m.num_attention_heads),
            ("n_kv_heads", m.num_query_groups),
            ("vocab_size", m.vocab_size),
            ("multiple_of", m.ffn_hidden_size),
        ]
        if mult is not None:
            args.append(("ffn_dim_multiplier", mult))
        args.append(("max_seq_len", m.max_position_embeddings))
        return TitanModel("llama3", flavor, tuple(args))
    args = [
        ("dim", m.hidden_size),
        ("n_layers", m.num_layers),
        ("n_heads", m.num_attention_heads),
        ("n_kv_heads", m.num_query_groups),
        ("head_dim", m.kv_channels),
        ("hidden_dim", m.ffn_hidden_size),
        ("vocab_size", m.vocab_size),
        ("qk_norm", m.qk_layernorm),
        ("enable_weight_tying", not m.untie_embeddings_and_output_weights),
        ("max_seq_len", m.max_position_embeddings),
    ]
    if m.is_moe:
        args += [
            ("moe_enabled", True),
            ("moe_inter_dim", m.moe_ffn_hidden_size),
            ("num_experts", m.num_experts),
            ("top_k", m.moe_router_topk),
            ("num_shared_experts", m.moe_shared_expert_intermediate_size // m.moe_ffn_hidden_size),
        ]
    return TitanModel("qwen3", flavor, tuple(args))


MOE_KEYS = ("num_experts", "top_k", "num_shared_experts")
"""Keyword arguments that go into ``MoEArgs`` rather than the model args class."""


def flavor_module(tm: TitanModel) -> str:
    """The ``planner_flavor.py`` that registers a custom flavor in torchtitan's flavor dict."""
    model_kw = [(k, v) for k, v in tm.custom_args if k not in MOE_KEYS]
    moe_kw = [(k, v) for k, v in tm.custom_args if k in MOE_KEYS]
    lines = [
        f'"""Generated by planner: registers flavor {tm.flavor!r} of torchtitan {VERSION}\'s {tm.name} model.',
        "",
        "Named in the job config's [experimental] custom_import; torchtitan/train.py imports it before it",
        'looks the flavor up. Keep this file on PYTHONPATH (the launch scripts add its folder)."""',
        "",
    ]
    if tm.name == "llama3":
        lines.append("from torchtitan.models.llama3 import TransformerModelArgs, llama3_args")
        table = "llama3_args"
    else:
        lines.append("from torchtitan.models.moe import MoEArgs")
        lines.append("from torchtitan.models.qwen3 import Qwen3ModelArgs, qwen3_args")
        table = "qwen3_args"
    lines += ["", f"{table}[{tm.flavor!r}] = {tm.args_class}("]
    lines += [f"    {k}={v!r}," for k, v in model_kw]
    if moe_kw:
        # Qwen3-style routing: softmax scores, top-k renormalised, applied after the experts
        # (the qwen3 flavors of torchtitan/models/qwen3/__init__.py).
        lines.append("    moe_args=MoEArgs(")
        lines += [f"        {k}={v!r}," for k, v in moe_kw]
        lines += [
            '        score_func="softmax",',
            "        route_norm=True,",
            "        score_before_experts=False,",
            "    ),",
        ]
    lines += [")", ""]
    return "\n".join(lines)


def model_from_flavor(name: str, flavor: str, where: str) -> ModelSpec:
    """A planner model for a built-in torchtitan flavor; a SpecError naming the key otherwise."""
    if (name, flavor) not in FLAVORS:
        known = ", ".join(f for n, f in FLAVORS if n == name)
        families = sorted({n for n, _ in FLAVORS})
        if name not in families:
            raise SpecError(
                f"{where}: key 'model.name': {name!r} is not a torchtitan {VERSION} model planner knows "
                f"(allowed values: {', '.join(families)})"
            )
        raise SpecError(
            f"{where}: key 'model.flavor': {flavor!r} is not a torchtitan {VERSION} {name} flavor "
            f"(allowed values: {known}; a custom flavor needs its [experimental] custom_import module)"
        )
    f = FLAVORS[(name, flavor)]
    return ModelSpec(
        name=f"torchtitan-{name}-{flavor}",
        max_position_embeddings=131072 if name == "llama3" else 40960,
        activation="swiglu",
        normalization="rmsnorm",
        position_embedding_type="rope",
        add_bias_linear=False,
        **f,
    )


def model_from_custom(name: str, flavor: str, kwargs: dict, where: str) -> ModelSpec:
    """A planner model from the keyword arguments of a registered flavor (``planner_flavor.py``)."""
    try:
        dim, layers, heads = int(kwargs["dim"]), int(kwargs["n_layers"]), int(kwargs["n_heads"])
        kv = int(kwargs.get("n_kv_heads") or heads)
        vocab = int(kwargs["vocab_size"])
        if name == "llama3":
            ffn = _llama3_ffn(dim, kwargs.get("ffn_dim_multiplier"), int(kwargs.get("multiple_of", 256)))
            return ModelSpec(
                name=flavor,
                num_layers=layers,
                hidden_size=dim,
                ffn_hidden_size=ffn,
                num_attention_heads=heads,
                num_query_groups=kv,
                kv_channels=dim // heads,
                vocab_size=vocab,
                max_position_embeddings=int(kwargs.get("max_seq_len", 131072)),
                activation="swiglu",
                normalization="rmsnorm",
                position_embedding_type="rope",
                untie_embeddings_and_output_weights=True,
                add_bias_linear=False,
            )
        moe = bool(kwargs.get("moe_enabled", False))
        inter = int(kwargs.get("moe_inter_dim", 768))
        return ModelSpec(
            name=flavor,
            num_layers=layers,
            hidden_size=dim,
            ffn_hidden_size=int(kwargs.get("hidden_dim", 3072)),
            num_attention_heads=heads,
            num_query_groups=kv,
            kv_channels=int(kwargs.get("head_dim", 128)),
            vocab_size=vocab,
            max_position_embeddings=int(kwargs.get("max_seq_len", 4096)),
            activation="swiglu",
            normalization="rmsnorm",
            position_embedding_type="rope",
            untie_embeddings_and_output_weights=not kwargs.get("enable_weight_tying", False),
            add_bias_linear=False,
            qk_layernorm=bool(kwargs.get("qk_norm", True)),
            num_experts=int(kwargs.get("num_experts", 8)) if moe else 0,
            moe_router_topk=int(kwargs.get("top_k", 1)) if moe else 0,
            moe_ffn_hidden_size=inter if moe else 0,
            moe_shared_expert_intermediate_size=inter * int(kwargs.get("num_shared_experts", 1))
            if moe
            else 0,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise SpecError(f"{where}: flavor {flavor!r}: cannot read its arguments ({exc})") from None
