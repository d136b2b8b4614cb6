"""Megatron-Bridge's PEFT section (``ConfigContainer.peft``) as planner's fine-tuning job: LoRA
becomes ``--finetune lora`` with its rank and target layers (docs/finetune.md), no PEFT a full
fine-tune or pre-training, every other scheme refused in one line. Read from a Python recipe
(:mod:`.recipe`) and from an override YAML's ``peft`` section (:mod:`.importer`)."""

from __future__ import annotations

from planner.inputs.errors import SpecError
from planner.launch.bridge.recipe_values import Section, Unknown

LORA_DEFAULTS = {"dim": 32, "target_modules": ["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"]}
"""``LoRA``'s defaults (Megatron-Bridge v0.3.0 and v0.6.0, src/megatron/bridge/peft/lora.py:
``dim: int = 32``, ``target_modules`` the four linear layers of a decoder layer)."""


_PEFT_NAMES = {
    "dora": "DoRA (weight-decomposed adapters)",
    "canonical_lora": "CanonicalLoRA (split QKV adapters)",
}


def peft_job(body, where: str, line: int | None) -> dict:
    """The JobSpec fine-tuning fields of a recipe's ``peft`` section: none for no PEFT (a full
    fine-tune or pre-training, priced alike), ``finetune: lora`` with ``lora_rank`` = ``LoRA.dim``
    and ``lora_targets`` = ``LoRA.target_modules`` for LoRA (planner's ``--finetune lora``,
    docs/finetune.md). DoRA, canonical LoRA, a custom PEFT object or module patterns are refused in
    one line naming the construct."""
    from planner.inputs.jobs import lora_targets_tuple

    if body is None:
        return {}
    at = f"{where}: line {line}: " if line else f"{where}: "
    if isinstance(body, Unknown):
        raise SpecError(
            f"{where}: line {body.line}: {body.text}: not statically evaluable, and planner reads the PEFT "
            "scheme (peft) from it"
        )
    if not isinstance(body, Section) or body.preset != "lora":
        known = isinstance(body, Section) and body.preset
        what = _PEFT_NAMES.get(body.preset, body.preset) if known else "a PEFT object planner does not know"
        raise SpecError(
            f"{at}peft: {what} is not priced: planner prices LoRA adapters (--finetune lora, "
            "docs/finetune.md); use LoRA or default_peft_config('lora')"
        )
    merged = {**LORA_DEFAULTS, **body.fields}
    for key in ("dim", "target_modules"):
        if isinstance(merged[key], Unknown):
            u = merged[key]
            raise SpecError(
                f"{where}: line {u.line}: {u.text}: not statically evaluable, and planner reads peft.{key} from it; "
                f"give --set peft.{key}=VALUE"
            )
    dim, targets = merged["dim"], merged["target_modules"]
    at = f"{where}: line {body.lines.get('dim') or line}: " if body.lines.get("dim") or line else f"{where}: "
    if not isinstance(dim, int) or isinstance(dim, bool) or dim < 1:
        raise SpecError(f"{at}peft.dim: expected a positive integer (LoRA's rank), got {dim!r}")
    if not isinstance(targets, list) or any(not isinstance(x, str) or "*" in x or "." in x for x in targets):
        raise SpecError(
            f"{at}peft.target_modules {targets!r}: planner prices LoRA on whole linear layers named "
            "linear_qkv, linear_proj, linear_fc1, linear_fc2, not module patterns"
        )
    return {
        "finetune": "lora",
        "lora_rank": dim,
        "lora_targets": lora_targets_tuple(targets, f"{at}peft.target_modules"),
    }


PEFT_TARGETS = {
    "megatron.bridge.peft.lora.LoRA": "lora",
    "megatron.bridge.peft.dora.DoRA": "dora",
    "megatron.bridge.peft.canonical_lora.CanonicalLoRA": "canonical_lora",
}
"""The ``_target_`` of an override file's ``peft`` section, by PEFT class (Megatron-Bridge v0.6.0,
src/megatron/bridge/peft/lora.py ``LoRA``, dora.py ``DoRA``, canonical_lora.py ``CanonicalLoRA``;
Hydra instantiates the section from it, as it does ``comm_overlap``)."""


def yaml_peft_job(body, where: str, key_lines: dict) -> dict:
    """:func:`peft_job` of an override YAML's ``peft`` section: ``null`` no PEFT; a mapping with a
    ``_target_`` of :data:`PEFT_TARGETS` that scheme, with its fields; a mapping without one the
    recipe's LoRA (a fine-tuning recipe's default, ``default_peft_config('lora')``) overridden by
    those fields; another target is refused, as an unknown PEFT object is."""
    if body is None:
        return {}
    line = key_lines.get("peft")
    if not isinstance(body, dict):
        at = f"{where}: line {line}: " if line else f"{where}: "
        raise SpecError(f"{at}peft: expected a mapping of LoRA's fields (dim, target_modules, ...) or null")
    fields = {k: v for k, v in body.items() if k != "_target_"}
    target = body.get("_target_")
    scheme = "lora" if target is None else PEFT_TARGETS.get(str(target), str(target))
    lines = {k: key_lines.get(f"peft.{k}") for k in fields}
    return peft_job(Section("peft", fields, lines, scheme), where, line)
