"""Run Megatron-LM's and torchtitan's OWN validation code on a launch, on a CPU-only machine.

Stdlib only at import time. Each check runs in a fresh subprocess of a separate Python 3.12
interpreter that has the frameworks installed (``PLANNER_FW_PYTHON``, default
``/work/venv-fw/bin/python``; see docs/framework-validation.md for how it is built), because
Megatron's ``parse_args`` reads ``sys.argv``/``os.environ`` and keeps global state, and because
megatron-core needs Python >= 3.12 while planner runs on 3.11. What runs in that interpreter is
``scripts/_framework_child.py``; this module is the caller's side (the interpreter, the payload,
the answer) and the example.

Megatron (``validate_megatron``), in the order ``pretrain_gpt.py`` -> ``initialize_megatron`` runs them:

1. ``parse_args``      megatron/training/arguments.py ``parse_args()`` on ``sys.argv = ["pretrain_gpt.py", *argv]``
                       with ``RANK``/``WORLD_SIZE`` from ``env``.
2. ``validate_args``   ``validate_args(args, {"tokenizer_type": "GPT2BPETokenizer"})`` (pretrain_gpt.py's
                       ``args_defaults``). No GPU here: ``get_device_arch_version()`` (the
                       CUDA_DEVICE_MAX_CONNECTIONS rule) and ``torch.cuda.get_device_capability()``
                       (the ``--moe-grouped-gemm`` rule) are answered with ``gpu_arch`` (default 9, Hopper).
3. ``num_microbatches`` megatron/training/global_vars.py ``set_global_variables(args, build_tokenizer=False)``
                       -> megatron/core/num_microbatches_calculator.py ``init_num_microbatches_calculator``,
                       then ``get_num_microbatches()``.
4. ``parallel_state``  ``torch.distributed.init_process_group("fake", FakeStore(), rank, world_size)``
                       (what ``--fake-process-group`` does in initialize.py ``_initialize_distributed``) and
                       megatron/core/parallel_state.py ``initialize_model_parallel(...)`` with the keyword
                       arguments initialize.py passes (gloo groups off: they cannot exist on a fake store).
5. ``transformer_config`` megatron/training/argument_utils.py ``core_transformer_config_from_args(args)``
                       (TransformerConfig/ModelParallelConfig ``__post_init__`` checks).

torchtitan (``validate_torchtitan``), the way torchtitan/train.py ``Trainer.__init__`` runs them:

1. ``parse``           torchtitan/config/manager.py ``ConfigManager().parse_args(["--job.config_file", toml, *overrides])``.
2. ``parallel_dims``   torchtitan/distributed/utils.py ``init_distributed`` in ``comm.mode = "fake_backend"``
                       (torchtitan's own dry-run mode, world size from ``NGPU``) and
                       torchtitan/distributed/parallel_dims.py ``ParallelDims(...)`` (``_validate``) +
                       ``build_mesh()``.
3. ``model``           torchtitan/protocols/train_spec.py ``get_train_spec(model.name)``, the flavor lookup,
                       ``model_args.update_from_config(job_config)`` and the model built on the meta device.
4. ``batch``           the global/local batch-size assertions of ``Trainer.__init__`` (re-stated: inline code).
5. ``parallelize``     (``deep=True``) ``train_spec.pipelining_fn`` / ``parallelize_fn`` on the meta model
                       (TP, activation checkpointing, FSDP, pipeline split and schedule), with ``device`` CPU.

Every function returns ``{"accepted": bool | None, "stage": str | None, "error": str | None,
"overridden": [...], ...}``; ``accepted`` is None (stage ``"unavailable"``) when the interpreter or
the framework packages are missing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

DEFAULT_FW_PYTHON = "/work/venv-fw/bin/python"
RESULT_MARKER = "@@PLANNER_FW_RESULT@@"
CHILD_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_framework_child.py")
"""What the framework interpreter runs (:mod:`_framework_child`): the payload on stdin, the result
on stdout after :data:`RESULT_MARKER`."""
DEFAULT_TIMEOUT_S = 600.0
# Environment a child inherits from the caller (everything else comes from ``env``), so a
# stray CUDA_DEVICE_MAX_CONNECTIONS/RANK in the caller's shell does not leak into the check.
_PASS_THROUGH_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "USER")


def fw_python(python: str | None = None) -> str:
    """The framework interpreter: ``python``, else $PLANNER_FW_PYTHON, else /work/venv-fw/bin/python."""
    return python or os.environ.get("PLANNER_FW_PYTHON") or DEFAULT_FW_PYTHON


def available(python: str | None = None) -> bool:
    """Whether the framework interpreter exists and imports megatron-core and torchtitan (the test
    suite skips the framework check otherwise: CI has neither, docs/framework-validation.md)."""
    exe = fw_python(python)
    if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
        return False
    try:
        proc = subprocess.run(
            [exe, "-c", "import megatron.core, torchtitan"], capture_output=True, timeout=DEFAULT_TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0


def unavailable_result(msg: str) -> dict[str, Any]:
    """The answer of a check that could not run (stage ``"unavailable"``)."""
    return {"accepted": None, "stage": "unavailable", "error": msg, "overridden": []}


def _run_child(mode: str, payload: dict, python: str | None, env: dict[str, str], timeout: float) -> dict:
    exe = fw_python(python)
    if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
        return unavailable_result(f"framework interpreter not found: {exe} (set PLANNER_FW_PYTHON)")
    child_env = {k: os.environ[k] for k in _PASS_THROUGH_ENV if k in os.environ}
    child_env.update({"PYTHONWARNINGS": "ignore", "PYTHONDONTWRITEBYTECODE": "1"})
    child_env.update({str(k): str(v) for k, v in env.items()})
    try:
        proc = subprocess.run(
            [exe, CHILD_SCRIPT, f"--{mode}-json"],
            input=json.dumps(payload),
            capture_output=True,
            text=True,
            env=child_env,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {
            "accepted": None,
            "stage": "timeout",
            "error": f"no answer within {timeout:g} s",
            "overridden": [],
        }
    except OSError as exc:
        return unavailable_result(f"cannot run {exe}: {exc}")
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_MARKER):
            return json.loads(line[len(RESULT_MARKER) :])
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
    return {
        "accepted": None,
        "stage": "crashed",
        "error": f"{exe} exited {proc.returncode} without a result: " + " | ".join(tail),
        "overridden": [],
    }


def validate_megatron(
    argv: list[str],
    env: dict[str, str],
    *,
    python: str | None = None,
    gpu_arch: int = 9,
    te_version: str | None = "2.14.0",
    timeout: float = DEFAULT_TIMEOUT_S,
) -> dict[str, Any]:
    """Megatron-LM's own checks on ``pretrain_gpt.py`` arguments ``argv`` for rank ``env["RANK"]`` (0).

    ``env`` is the launch environment (``WORLD_SIZE`` required by a real launch; Megatron defaults it
    to 1; ``CUDA_DEVICE_MAX_CONNECTIONS`` matters). ``gpu_arch`` is the GPU major compute capability
    validate_args would read from the device (8 Ampere, 9 Hopper, 10 Blackwell); ``te_version`` the
    Transformer Engine release the launch container has (None: answer as this machine, without TE).
    Returns accepted/stage/error/overridden plus, when reached, ``data_parallel_size``,
    ``num_microbatches``, ``virtual_pipeline_model_parallel_size``, ``groups`` (parallel_state sizes)
    and ``overridden_values`` ({flag: [before, after]}).
    """
    full_env = {"RANK": "0", "LOCAL_RANK": "0", **env}
    return _run_child(
        "megatron",
        {"argv": list(argv), "gpu_arch": gpu_arch, "te_version": te_version},
        python,
        full_env,
        timeout,
    )


def validate_torchtitan(
    toml_path: str,
    overrides: list[str],
    *,
    world_size: int | None = None,
    python: str | None = None,
    deep: bool = True,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> dict[str, Any]:
    """torchtitan's own job-config parser and parallelism checks on a TOML plus CLI overrides.

    ``world_size`` is the number of ranks (torchrun's WORLD_SIZE); when None, the product of the
    configured degrees is used if data_parallel_shard_degree is not -1, else only the parse runs.
    ``deep`` also applies torchtitan's parallelize/pipelining functions to the model on the meta device.
    ``overridden`` lists the override flags whose values differ from the TOML's.
    """
    payload = {
        "toml": os.path.abspath(toml_path),
        "overrides": list(overrides),
        "world_size": world_size,
        "deep": deep,
    }
    return _run_child("torchtitan", payload, python, {}, timeout)


# Llama-3-8B-like pretrain_gpt.py arguments: tp 2, pp 2, dp 2 on 8 ranks.
EXAMPLE_MEGATRON_ARGV = [
    "--num-layers", "32", "--hidden-size", "4096", "--ffn-hidden-size", "14336",
    "--num-attention-heads", "32", "--group-query-attention", "--num-query-groups", "8",
    "--seq-length", "8192", "--max-position-embeddings", "8192",
    "--position-embedding-type", "rope", "--rotary-base", "500000", "--normalization", "RMSNorm",
    "--swiglu", "--disable-bias-linear", "--untie-embeddings-and-output-weights",
    "--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2", "--sequence-parallel",
    "--micro-batch-size", "1", "--global-batch-size", "128", "--bf16",
    "--use-distributed-optimizer", "--overlap-grad-reduce", "--overlap-param-gather",
    "--train-iters", "100", "--lr", "3e-4", "--mock-data",
    "--tokenizer-type", "NullTokenizer", "--vocab-size", "128256",
]  # fmt: skip
EXAMPLE_MEGATRON_ENV = {"WORLD_SIZE": "8", "CUDA_DEVICE_MAX_CONNECTIONS": "1"}

EXAMPLE_TORCHTITAN_TOML = """\
[model]
name = "llama3"
flavor = "8B"

[training]
local_batch_size = 2
global_batch_size = 32
seq_len = 8192
steps = 100

[parallelism]
data_parallel_replicate_degree = 1
data_parallel_shard_degree = 2
tensor_parallel_degree = 2
pipeline_parallel_degree = 2
pipeline_parallel_schedule = "Interleaved1F1B"
pipeline_parallel_microbatch_size = 1
context_parallel_degree = 1

[activation_checkpoint]
mode = "full"
"""


def _demo() -> int:
    import tempfile

    def show(title: str, result: dict) -> None:
        keep = (
            "accepted",
            "stage",
            "error",
            "overridden",
            "num_microbatches",
            "groups",
            "parallel_dims",
            "gradient_accumulation_steps",
            "pipeline",
        )
        print(f"== {title}\n{json.dumps({k: result[k] for k in keep if k in result}, indent=1)}")

    def swap(argv: list[str], flag: str, value: str) -> list[str]:
        argv = list(argv)
        argv[argv.index(flag) + 1] = value
        return argv

    ok = validate_megatron(EXAMPLE_MEGATRON_ARGV, EXAMPLE_MEGATRON_ENV)
    show("megatron: Llama-3-8B-like, tp 2 pp 2 dp 2 on 8 ranks", ok)
    # 30 heads: 4096 % 30 != 0, so kv-channels is given; 30 % tp 4 != 0 fails in TransformerConfig.
    bad = swap(
        swap(EXAMPLE_MEGATRON_ARGV, "--num-attention-heads", "30"), "--tensor-model-parallel-size", "4"
    )
    bad = swap(bad, "--pipeline-model-parallel-size", "1") + [
        "--kv-channels",
        "128",
        "--num-query-groups",
        "2",
    ]
    bad_result = validate_megatron(bad, EXAMPLE_MEGATRON_ENV)
    show("megatron: 30 heads with tp 4 (must be rejected)", bad_result)
    sp = swap(EXAMPLE_MEGATRON_ARGV, "--tensor-model-parallel-size", "1")
    show(
        "megatron: --sequence-parallel with tp 1 (silently dropped)",
        validate_megatron(sp, EXAMPLE_MEGATRON_ENV),
    )
    with tempfile.TemporaryDirectory() as tmp:
        toml = os.path.join(tmp, "llama3_8b.toml")
        with open(toml, "w") as fh:
            fh.write(EXAMPLE_TORCHTITAN_TOML)
        t_ok = validate_torchtitan(
            toml, ["--parallelism.pipeline_parallel_schedule", "ZBVZeroBubble"], world_size=8
        )
        show("torchtitan: llama3 8B, dp_shard 2 tp 2 pp 2 (ZBVZeroBubble) on 8 ranks", t_ok)
        t_bad = validate_torchtitan(toml, ["--parallelism.tensor_parallel_degree", "3"], world_size=8)
        show("torchtitan: tp 3 on 8 ranks (must be rejected)", t_bad)
    expected = (True, False, True, False)
    got = (ok["accepted"], bad_result["accepted"], t_ok["accepted"], t_bad["accepted"])
    if None in got:
        print("frameworks unavailable: see docs/framework-validation.md")
        return 1
    return 0 if got == expected else 1


if __name__ == "__main__":
    sys.exit(_demo())
