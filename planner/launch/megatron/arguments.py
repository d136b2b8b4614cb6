"""The arguments of a Megatron-LM launch: the words of an arguments file or of the
``pretrain_gpt.py`` command of a launch script (shell variables resolved by :mod:`.shell`), read
the way the pinned release's argparse parser reads them (:data:`.flags.ACCEPTED`: a switch, a flag
with one value, a flag with a list of values), each flag with its value and its line, and typed
access to them for :mod:`.importer`. A word the parser would reject is recorded as rejected, a flag
it accepts that planning does not need as ignored (:data:`IGNORED`), one that could matter but
planner does not model as unknown (neither :data:`IGNORED` nor :data:`MODELLED`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from planner.inputs.errors import PlannerError, SpecError
from planner.inputs.validation import check_number, limit
from planner.launch.megatron.child_scripts import directives
from planner.launch.megatron.flags import ACCEPTED
from planner.launch.megatron.launch_env import command_environment, launcher_nodes
from planner.launch.megatron.shell import is_separator, read_script, redirections, unresolved_in
from planner.launch.megatron.shell_exit import launch_after_maybe_stop, no_launch
from planner.launch.megatron.shell_state import branch_of, is_branch
from planner.launch.megatron.shell_text import training_scripts

IGNORED = {
    "--train-iters",
    "--train-samples",
    "--lr",
    "--min-lr",
    "--lr-decay-style",
    "--lr-warmup-iters",
    "--lr-warmup-fraction",
    "--lr-decay-iters",
    "--lr-warmup-samples",
    "--lr-decay-samples",
    "--weight-decay",
    "--clip-grad",
    "--adam-beta1",
    "--adam-beta2",
    "--adam-eps",
    "--init-method-std",
    "--save",
    "--load",
    "--save-interval",
    "--eval-interval",
    "--eval-iters",
    "--log-interval",
    "--data-path",
    "--split",
    "--mock-data",
    "--tokenizer-type",
    "--tokenizer-model",
    "--vocab-file",
    "--merge-file",
    "--tensorboard-dir",
    "--wandb-project",
    "--seed",
    "--hidden-dropout",
    "--ckpt-format",
    "--distributed-timeout-minutes",
    "--rotary-percent",
    "--norm-epsilon",
    "--make-vocab-size-divisible-by",
    "--moe-grouped-gemm",
    "--moe-aux-loss-coeff",
    "--moe-router-load-balancing-type",
    "--cross-entropy-loss-fusion",
    "--manual-gc",
    "--log-throughput",
    "--fp8-amax-history-len",
    "--fp8-amax-compute-algo",
    "--data-parallel-sharding-strategy",
    "--use-rope-scaling",
    "--log-timers-to-tensorboard",
    "--no-masked-softmax-fusion",
    "--no-bias-swiglu-fusion",
    "--no-rope-fusion",
    "--eod-mask-loss",
    "--timing-log-level",
    "--exit-duration-in-mins",
    "--num-workers",
    "--recompute-method",
    "--no-overlap-p2p-communication",
    "--use-rotary-position-embeddings",
    # examples/mamba/train.sh's: the dataset cache directory, the process-group backend, the
    # dataloader's attention mask (the fused kernels build the causal mask themselves) and
    # --use-mcore-models ("DEPRECATED ... Now ignored", arguments.py).
    "--data-cache-path",
    "--distributed-backend",
    "--no-create-attention-mask-in-dataloader",
    "--use-mcore-models",
}
"""Accepted flags that change no planned cost (or that :mod:`.rules` reads by itself)."""

MODELLED = {
    "--attention-dropout",
    "--window-size",
    "--multi-latent-attention",
    "--q-lora-rank",
    "--kv-lora-rank",
    "--qk-head-dim",
    "--qk-pos-emb-head-dim",
    "--v-head-dim",
    "--mtp-num-layers",
    "--window-attn-skip-freq",
    "--softmax-type",
    "--moe-token-dispatcher-type",
    "--overlap-moe-expert-parallel-comm",
    "--cuda-graph-impl",
    "--cuda-graph-modules",
    "--cuda-graph-scope",
    "--enable-cuda-graph",
    "--num-layers",
    "--hidden-size",
    "--ffn-hidden-size",
    "--num-attention-heads",
    "--kv-channels",
    "--group-query-attention",
    "--num-query-groups",
    "--swiglu",
    "--squared-relu",
    "--normalization",
    "--disable-bias-linear",
    "--add-qkv-bias",
    "--qk-layernorm",
    "--untie-embeddings-and-output-weights",
    "--position-embedding-type",
    "--rotary-base",
    "--max-position-embeddings",
    "--seq-length",
    "--vocab-size",
    "--padded-vocab-size",
    "--num-experts",
    "--moe-router-topk",
    "--moe-ffn-hidden-size",
    "--moe-shared-expert-intermediate-size",
    "--moe-shared-expert-gate",
    "--moe-layer-freq",
    "--expert-model-parallel-size",
    "--expert-tensor-parallel-size",
    "--tensor-model-parallel-size",
    "--pipeline-model-parallel-size",
    "--context-parallel-size",
    "--num-virtual-stages-per-pipeline-rank",
    "--num-layers-per-virtual-pipeline-stage",
    "--decoder-first-pipeline-num-layers",
    "--decoder-last-pipeline-num-layers",
    "--account-for-embedding-in-pipeline-split",
    "--account-for-loss-in-pipeline-split",
    "--pipeline-model-parallel-layout",
    "--sequence-parallel",
    "--micro-batch-size",
    "--global-batch-size",
    "--recompute-granularity",
    "--recompute-activations",
    "--recompute-num-layers",
    "--recompute-modules",
    "--moe-layer-recompute",
    "--cpu-offloading-num-layers",
    "--use-distributed-optimizer",
    "--use-tp-pp-dp-mapping",
    "--use-megatron-fsdp",
    "--use-torch-fsdp2",
    "--overlap-grad-reduce",
    "--overlap-param-gather",
    "--no-gradient-accumulation-fusion",
    "--tp-comm-overlap",
    "--bf16",
    "--fp16",
    "--fp8-format",
    "--fp8-recipe",
    "--fp4-format",
    "--fp4-recipe",
    "--accumulate-allreduce-grads-in-fp32",
    "--grad-reduce-in-bf16",
    "--use-precision-aware-optimizer",
    "--main-params-dtype",
    "--main-grads-dtype",
    "--exp-avg-dtype",
    "--exp-avg-sq-dtype",
    "--transformer-impl",
    "--attention-backend",
    # Hybrid and gated DeltaNet layers (planner.launch.megatron.hybrid); --spec counts as read only
    # when it is the hybrid layer spec.
    "--hybrid-layer-pattern",
    "--hybrid-override-pattern",
    "--mamba-state-dim",
    "--mamba-head-dim",
    "--mamba-num-heads",
    "--mamba-num-groups",
    "--experimental-attention-variant",
    "--linear-attention-freq",
    "--linear-conv-kernel-dim",
    "--linear-key-head-dim",
    "--linear-value-head-dim",
    "--linear-num-key-heads",
    "--linear-num-value-heads",
    "--attention-output-gate",
    "--dsa-indexer-n-heads",
    "--dsa-indexer-head-dim",
    "--dsa-indexer-topk",
    "--dsa-indexer-loss-coeff",
    "--dsa-indexer-use-sparse-loss",
}
"""Flags the import turns into model, job or configuration fields."""


def megatron_words(
    text: str, preset: dict | None = None, path: str | Path | None = None
) -> tuple[list[tuple[str, int]], dict, bool]:
    """The Megatron argument words of a script or arguments file (with line numbers), the
    environment it sets, and whether it is a launch script; ``preset``: the variables the script
    starts with (``planner check --set``); ``path``: its file, where the files it sources are
    (:func:`.shell.read_script`)."""
    script = read_script(text, preset, path)
    launch_after_maybe_stop(script)
    words = script.words
    starts = training_scripts([w for w, _ in words])
    if not starts:
        starts = _after_launcher(words)
    if not starts and script.stop is not None:
        raise no_launch(script.stop, script.missing, _submitted([w for w, _ in words]))
    if not starts:
        return [(w, n) for w, n in words if not is_separator(w)], script.env, False
    out: list[tuple[str, int]] = []
    for start in starts:
        command = words[start + 1 :]
        end = next((k for k, (w, _) in enumerate(command) if is_separator(w)), len(command))
        dropped = redirections([w for w, _ in command[:end]])
        out += [word for k, word in enumerate(command[:end]) if k not in dropped]
    shell_env = script.env if script.launch_env is None else script.launch_env
    begin = _command_start(words, starts[0])
    return out, command_environment([w for w, _ in words[begin : starts[0]]], shell_env), True


def launch_nodes(
    text: str, preset: dict | None = None, path: str | Path | None = None
) -> tuple[int, str] | None:
    """The node count a launch script starts its training command on, and where it says so: the
    launcher in front of the command (:func:`.launch_env.launcher_nodes`: torchrun ``--nnodes``,
    srun ``-N``), else the node count of the Slurm job an ``sbatch`` the script runs submitted it in
    (:attr:`.shell_state.Script.job_nodes`), else the script's own ``#SBATCH --nodes`` / ``-N``
    line (a Slurm batch script);
    None when neither says one count, or the script cannot be read (the check reports why)."""
    try:
        script = read_script(text, preset, path)
    except PlannerError:
        return None
    words = script.words
    starts = training_scripts([w for w, _ in words]) or _after_launcher(words)
    if starts:
        begin = _command_start(words, starts[0])
        found = launcher_nodes([w for w, _ in words[begin : starts[0]]])
        if found is not None:
            return found[0], f"{found[1]} on line {words[starts[0]][1]}"
        if script.job_nodes is not None:
            return script.job_nodes
    value = directives(text, ("--nodes",)).get("--nodes", "")
    if value.isdigit() and int(value) > 0:
        return int(value), f"#SBATCH --nodes={value}"
    return None


def _command_start(words: list[tuple[str, int]], index: int) -> int:
    """Where the command holding ``words[index]`` begins: after the separator before it, else 0."""
    return next((k + 1 for k in range(index - 1, -1, -1) if is_separator(words[k][0])), 0)


def _submitted(words: list[str]) -> list[str]:
    """The job script files ``sbatch [OPTIONS] FILE`` submits (its last word, when not an option),
    left in the words because planner did not find the file (:mod:`.child_scripts` reads one it finds)."""
    out, command = [], []
    for w in [*words, ";"]:
        if not is_separator(w):
            command.append(w)
            continue
        if len(command) > 1 and command[0] == "sbatch" and not command[-1].startswith("-"):
            out.append(command[-1])
        command = []
    return out


_LAUNCHER_NAMES = (
    "nnodes",
    "nproc-per-node",
    "rdzv-backend",
    "rdzv-endpoint",
    "rdzv-id",
    "rdzv-conf",
    "max-restarts",
    "monitor-interval",
    "start-method",
    "role",
    "log-dir",
    "redirects",
    "tee",
    "local-ranks-filter",
    "node-rank",
    "master-addr",
    "master-port",
    "local-addr",
    "logs-specs",
)
LAUNCHER_VALUES = (
    {f"--{n}" for n in _LAUNCHER_NAMES} | {f"--{n.replace('-', '_')}" for n in _LAUNCHER_NAMES} | {"-r", "-t"}
)
"""torchrun's options that take a value, in both spellings (torch/distributed/run.py,
``get_args_parser``; its switches, ``--standalone``, ``--no-python``, ``--run-path``, ``-m``, take
none): a launch whose training script is a variable the script never sets has no ``.py`` word,
and these separate torchrun's own arguments from the script's."""


def _after_launcher(words: list[tuple[str, int]]) -> list[int]:
    """The index of the training script of a ``torchrun`` (or ``python -m torch.distributed.run``)
    command with no ``.py`` word: the first word after the launcher's options."""
    out = []
    for k, (w, _) in enumerate(words):
        module = w in ("python", "python3") and [x for x, _ in words[k + 1 : k + 3]] in (
            ["-m", "torch.distributed.run"],
            ["-m", "torch.distributed.launch"],
        )
        if w.rsplit("/", 1)[-1] != "torchrun" and not module:
            continue
        i = k + (3 if module else 1)
        while i < len(words) and words[i][0].startswith("-"):
            i += 2 if words[i][0] in LAUNCHER_VALUES else 1
        if i < len(words):
            out.append(i)
    return out


@dataclass(frozen=True, slots=True)
class Arguments:
    """The flags of one launch, as its parser reads them, with typed access naming file and line."""

    where: str
    """The file the flags come from, for messages."""
    flags: dict
    """Every accepted flag given, with its value (None for switches)."""
    lines: dict
    """Line number (1-based) of each flag (rejected words too)."""
    ignored: list
    """Accepted flags in :data:`IGNORED`, in the order given."""
    unknown: list
    """Accepted flags neither in :data:`IGNORED` nor in :data:`MODELLED`, in the order given."""
    rejected: list
    """``--`` words the parser does not accept, in the order given."""

    def at(self, flag: str) -> str:
        """``file: line N`` of a flag (``?`` when not given)."""
        return f"{self.where}: line {self.lines.get(flag, '?')}"

    def num(self, flag: str, default: int | None = None) -> int | None:
        """An integer flag: present with a value, finite, positive (zero only where the default is
        0, e.g. --num-experts) and under the planner key's bound (planner.inputs.validation.LIMITS)."""
        v = self.flags.get(flag)
        if v is None:
            if flag in self.flags:
                raise SpecError(f"{self.at(flag)}: {flag} is given without its value")
            return default
        try:
            value = int(v)
        except ValueError:
            raise SpecError(f"{self.at(flag)}: {flag} expects an integer, got {v!r}") from None
        key = flag.lstrip("-").replace("-", "_")
        check_number(
            value,
            self.at(flag),
            flag,
            integer=True,
            positive=default != 0,
            maximum=limit(key) or limit("tp"),
        )
        return value


def read_arguments(words: list[tuple[str, int]], where: str, strict: bool = False) -> Arguments:
    """The flags of :func:`megatron_words`' words as argparse takes them: ``--flag value``,
    ``--flag=value``, a list flag's values up to the next ``--`` word. A word that is neither a
    flag nor a flag's value is skipped, or with ``strict`` (the words bash passes to
    ``pretrain_gpt.py``) recorded as rejected: Megatron's parser takes no positional argument and
    ``parse_args`` exits on it ("unrecognized arguments"), as on the second half of a value bash
    split at a space. A word still holding ``$`` (``"$@"``, the script's own arguments) or an
    unresolved variable is not judged."""
    flags: dict[str, str | None] = {}
    lines: dict[str, int] = {}
    ignored, unknown, rejected = [], [], []
    i = 0
    while i < len(words):
        w, line = words[i]
        i += 1
        if not w.startswith("--"):
            if strict and not w.startswith("-") and "$" not in w and unresolved_in(w) is None:
                rejected.append(w)
                lines.setdefault(w, line)
            continue
        value: str | None = None
        if "=" in w:
            w, value = w.split("=", 1)
        kind = ACCEPTED.get(w)
        if kind is None:
            rejected.append(w)
            lines.setdefault(w, line)
            if value is None and i < len(words) and not words[i][0].startswith("-"):
                i += 1  # its value, most likely (a fork's --zero-stage 1): one error, the flag's
            continue
        if kind == "value" and value is None:
            if i < len(words) and not (words[i][0].startswith("--") and len(words[i][0]) > 2):
                value = words[i][0]
                i += 1
        elif kind == "values" and value is None:
            vals = []
            while i < len(words) and not words[i][0].startswith("--"):
                vals.append(words[i][0])
                i += 1
            value = " ".join(vals) if vals else None
        if value is not None and w not in UNREAD_PATHS:
            _check_resolved(value, w, line, where)
        flags[w], lines[w] = value, line
        if w in MODELLED:
            continue
        (ignored if w in IGNORED else unknown).append(w)
    return Arguments(where, flags, lines, ignored, unknown, rejected)


UNREAD_PATHS = frozenset(
    (
        "--save",
        "--load",
        "--data-path",
        "--train-data-path",
        "--valid-data-path",
        "--test-data-path",
        "--data-cache-path",
        "--tensorboard-dir",
        "--wandb-project",
        "--wandb-exp-name",
        "--wandb-save-dir",
        "--vocab-file",
        "--merge-file",
        "--pretrained-checkpoint",
    )
)
"""Flags naming a path or a run on the cluster, whose value planner never reads: one that needs a
variable the script never sets or a command (``--load /ckpt/$(whoami)``) is not an error, since
the launch is priced the same whatever it is (the tokenizer's ``--tokenizer-model`` is read)."""


def _check_resolved(value: str, flag: str, line: int, where: str) -> None:
    """A flag's value must not need a variable the script's own assignments do not give."""
    name = unresolved_in(value)
    if name is None:
        return
    if is_branch(name):
        var = name.split(":")[1]
        why = (
            f"depends on {var!r}, which the script never sets; pass planner check --set {var}=VALUE"
            if var != "?"
            else "has a condition planner cannot evaluate; write the value"
        )
        raise SpecError(
            f"{where}: line {line}: {flag} takes its value from a branch of {branch_of(name)}, which {why}"
        )
    if name.startswith("$"):
        raise SpecError(
            f"{where}: line {line}: {flag} takes its value from {name}, which planner cannot "
            "evaluate from the script's own assignments; write the value"
        )
    raise SpecError(
        f"{where}: line {line}: {flag} takes its value from {name!r}, which the script never "
        f"sets; assign {name}=... in the script, write the value or pass planner check --set {name}=VALUE"
    )
