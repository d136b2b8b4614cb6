"""A Megatron-LM model config of the ``ENV_VARS`` / ``MODEL_ARGS`` form read as the launch it stands for.

Megatron-LM's functional and release tests (``tests/functional_tests/test_cases/*/*/model_config.yaml``)
and the Megatron MoE Model Zoo (``model_configs/benchmarking/*.yaml``) keep a training run's flags
as a YAML mapping: ``MODEL_ARGS`` from each flag to its value (``--num-layers: 16``,
``--use-distributed-optimizer: true``, ``--moe-layer-freq: ([0]*1+[1]*15)``) and ``ENV_VARS``, the
environment the run is launched with. Their launchers turn ``MODEL_ARGS`` into the command line
as the Zoo's ``sbatch_benchmarking.sh`` does with yq (:mod:`.yq`): a ``true`` value is the bare
flag, a ``false`` one is left out, any other value follows its flag as written; ``${NAME}``
placeholders (the Zoo's ``${TP}``, the tests' ``${DATA_PATH}``) are filled by envsubst from the
launcher's variables, here ``planner check --set NAME=VALUE``. Each flag keeps its line in the
file, so findings point at it.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from planner.inputs.errors import SpecError
from planner.launch.megatron.expansion import UNRESOLVED

SECTION = "MODEL_ARGS"
ENVIRONMENT = "ENV_VARS"
_PLACEHOLDER = re.compile(r"\$\{(\w+)\}|\$(\w+)")


def is_model_args_file(text: str, path: str | Path | None) -> bool:
    """Whether ``text`` (from ``path``) is a YAML mapping with a ``MODEL_ARGS`` mapping."""
    if path is None or Path(path).suffix not in (".yaml", ".yml"):
        return False
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return False
    return isinstance(data, dict) and isinstance(data.get(SECTION), dict)


def model_args_words(
    text: str, where: str, variables: dict | None = None
) -> tuple[list[tuple[str, int]], dict[str, str]]:
    """The command-line words (each with its line in the file) and the environment of a
    ``MODEL_ARGS`` file (:func:`is_model_args_file`); ``variables`` fill its ``${NAME}``
    placeholders. A placeholder left unset is marked unresolved as a script's unset variable is
    (:data:`.expansion.UNRESOLVED`), so a flag planner reads refuses it by name and a path it never
    opens keeps it (:func:`.arguments.read_arguments`)."""
    root = yaml.compose(text)
    sections = {k.value: v for k, v in root.value} if isinstance(root, yaml.MappingNode) else {}
    env = {}
    node = sections.get(ENVIRONMENT)
    if isinstance(node, yaml.MappingNode):
        env = {str(k.value): str(v.value) for k, v in node.value if isinstance(v, yaml.ScalarNode)}
    words: list[tuple[str, int]] = []
    for key, value in sections[SECTION].value:
        flag, line = str(key.value), key.start_mark.line + 1
        if not flag.startswith("--"):
            raise SpecError(f"{where}: line {line}: {SECTION} key {flag!r} is not a --flag")
        if isinstance(value, yaml.SequenceNode):
            if not all(isinstance(v, yaml.ScalarNode) for v in value.value):
                # nested lists (an alias bomb among them) are no command line
                raise SpecError(f"{where}: line {line}: {flag}: expected a list of plain values")
            texts = [_filled(str(v.value), variables) for v in value.value]
        elif isinstance(value, yaml.ScalarNode):
            null = value.tag == "tag:yaml.org,2002:null" and value.style is None
            text = "null" if null else _filled(str(value.value), variables)  # envsubst runs before yq
            # yq compares a scalar's text whatever its tag: true and "true" alike are the switch
            if text == "true":
                words.append((flag, line))
                continue
            if text == "false":
                continue  # a store_true flag switched off: the launcher leaves it out
            texts = [text]
        else:
            raise SpecError(f"{where}: line {line}: {flag}: expected a value or a list of values")
        words.append((flag, line))
        words += [(t, line) for t in texts]
    return words, env


def _filled(text: str, variables: dict | None) -> str:
    """``text`` with its ``${NAME}`` placeholders filled from ``variables`` (envsubst); one not
    given is marked unresolved."""
    given = variables or {}

    def value(m: re.Match) -> str:
        name = m.group(1) or m.group(2)
        return str(given[name]) if name in given else UNRESOLVED.format(name)

    return _PLACEHOLDER.sub(value, text)
