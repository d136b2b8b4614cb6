"""The child side of :mod:`_framework_validators`: runs inside the framework interpreter (Python >=
3.12, torch, megatron-core, torchtitan), one check per process, and answers on stdout after
:data:`_framework_validators.RESULT_MARKER`.

    python scripts/_framework_child.py --megatron-json     # payload {"argv", "gpu_arch", "te_version"} on stdin
    python scripts/_framework_child.py --torchtitan-json   # payload {"toml", "overrides", "world_size", "deep"}

The stages each child runs, and why in a separate interpreter, are in :mod:`_framework_validators`.
Stdlib only at import time; the frameworks are imported inside the checks.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import io
import json
import logging
import os
import sys
from typing import Any

from _framework_validators import RESULT_MARKER, unavailable_result


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    name = getattr(value, "name", None)
    return name if isinstance(name, str) else repr(value)


def _error_text(exc: BaseException, captured: str = "") -> str:
    if isinstance(exc, SystemExit):
        lines = [ln for ln in captured.strip().splitlines() if ln.strip()]
        return lines[-1] if lines else f"exit({exc.code})"
    msg = str(exc).strip()
    return f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__


def _pretend_transformer_engine(te_version: str) -> None:
    """Answer Megatron's Transformer Engine probes as a GPU container with TE ``te_version`` would.

    TE cannot be installed on a CPU-only machine, yet ``TransformerConfig.__post_init__`` rejects
    RoPE fusion (on by default with ``--position-embedding-type rope``) and ``--moe-permute-fusion``
    when TE's fused kernels are missing, and several checks compare ``get_te_version()``. The
    version cache ``megatron.core.utils._te_version`` is set, and the fused-kernel symbols those
    checks import are replaced by stubs (never called: no model runs here).
    """
    import megatron.core.utils as mcu
    from packaging.version import Version

    mcu._te_version = Version(te_version)

    def _stub(*_a, **_k):
        raise RuntimeError("Transformer Engine kernel stub (validation only)")

    for module, names in (
        (
            "megatron.core.models.common.embeddings.rope_utils",
            ("fused_apply_rotary_pos_emb", "fused_apply_rotary_pos_emb_thd"),
        ),
        (
            "megatron.core.transformer.moe.moe_utils",
            (
                "fused_permute",
                "fused_permute_with_probs",
                "fused_sort_chunks_by_index",
                "fused_sort_chunks_by_index_with_probs",
                "fused_unpermute",
            ),
        ),
    ):
        mod = importlib.import_module(module)
        for name in names:
            if getattr(mod, name, None) is None:
                setattr(mod, name, _stub)


def _megatron_child(argv: list[str], gpu_arch: int, te_version: str | None) -> dict[str, Any]:
    """The Megatron stages of :mod:`_framework_validators` on ``argv``, in order, up to the first
    that fails: its name in ``stage`` and its error in ``error``."""
    out: dict[str, Any] = {"accepted": False, "stage": "import", "error": None, "overridden": []}
    try:
        import megatron.training.arguments as margs
        import torch
        import torch.distributed as dist
        from megatron.core import parallel_state as mpu
        from megatron.core.num_microbatches_calculator import get_num_microbatches
        from megatron.training.argument_utils import core_transformer_config_from_args
        from megatron.training.global_vars import set_global_variables
    except ImportError as exc:
        return unavailable_result(f"megatron-core/torch not importable: {exc}")

    # No GPU: answer the two device queries validate_args makes with the target GPU's arch.
    margs.get_device_arch_version = lambda: gpu_arch
    torch.cuda.get_device_capability = lambda device=None: (gpu_arch, 0)
    out["assumed"] = {"gpu_arch": gpu_arch}
    if te_version:
        _pretend_transformer_engine(te_version)
        out["assumed"]["transformer_engine"] = te_version

    parsed = _megatron_parse_args(margs, argv, out)
    if parsed is None:
        return out
    args, flags, before = parsed
    if (
        _megatron_validate_args(margs, torch, args, flags, before, out)
        and _megatron_num_microbatches(set_global_variables, get_num_microbatches, args, out)
        and _megatron_parallel_state(dist, mpu, args, out)
        and _megatron_transformer_config(core_transformer_config_from_args, args, out)
    ):
        out.update(accepted=True, stage=None)
    return out


def _megatron_parse_args(margs, argv: list[str], out: dict[str, Any]):
    """Stage ``parse_args``: ``(args, flag -> dest of each flag in argv, dest -> its parsed value)``,
    or None with the error in ``out``."""
    log = io.StringIO()
    out["stage"] = "parse_args"
    sys.argv = ["pretrain_gpt.py", *argv]
    try:
        with contextlib.redirect_stderr(log), contextlib.redirect_stdout(log):
            args = margs.parse_args()
    except BaseException as exc:  # argparse exits
        out["error"] = _error_text(exc, log.getvalue())
        return None
    # flag -> dest, from the same parser parse_args built.
    parser = margs.add_megatron_arguments(__import__("argparse").ArgumentParser(allow_abbrev=False))
    flags: dict[str, str] = {}
    for tok in argv:
        if tok.startswith("--"):
            flag = tok.split("=", 1)[0]
            action = parser._option_string_actions.get(flag)
            if action is not None:
                flags[flag] = action.dest
    before = {dest: copy.deepcopy(getattr(args, dest, None)) for dest in flags.values()}
    return args, flags, before


def _megatron_validate_args(
    margs, torch, args, flags: dict[str, str], before: dict[str, Any], out: dict[str, Any]
) -> bool:
    """Stage ``validate_args``, then the flags it overrode (their values before and after) and the
    parallel sizes it derived; False with the error in ``out``."""
    out["stage"] = "validate_args"
    log = io.StringIO()
    try:
        with contextlib.redirect_stdout(log):
            margs.validate_args(args, {"tokenizer_type": "GPT2BPETokenizer"})
    except BaseException as exc:  # AssertionError, ValueError, exit() for --checkpoint-activations
        out["error"] = _error_text(exc, log.getvalue())
        return False
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16, "fp8": torch.uint8}
    changed: dict[str, list] = {}
    for flag, dest in flags.items():
        if not hasattr(args, dest):
            continue  # deleted alias (--recompute-activations -> recompute_granularity)
        old, new = before[dest], getattr(args, dest)
        if isinstance(new, torch.dtype) and isinstance(old, str):
            old = dtypes.get(old, old)
        if old != new:
            changed[flag] = [_jsonable(before[dest]), _jsonable(new)]
    out["overridden"] = sorted(changed)
    out["overridden_values"] = changed
    out["data_parallel_size"] = args.data_parallel_size
    out["virtual_pipeline_model_parallel_size"] = args.virtual_pipeline_model_parallel_size
    return True


def _megatron_num_microbatches(set_global_variables, get_num_microbatches, args, out: dict[str, Any]) -> bool:
    """Stage ``num_microbatches``; False with the error in ``out``."""
    out["stage"] = "num_microbatches"
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            set_global_variables(args, build_tokenizer=False)
        out["num_microbatches"] = get_num_microbatches()
    except BaseException as exc:
        out["error"] = _error_text(exc)
        return False
    return True


def _megatron_parallel_state(dist, mpu, args, out: dict[str, Any]) -> bool:
    """Stage ``parallel_state``: the process groups on a fake store, and their sizes and this rank's
    pipeline and data-parallel ranks in ``out["groups"]``; False with the error in ``out``."""
    out["stage"] = "parallel_state"
    try:
        from torch.testing._internal.distributed.fake_pg import FakeStore

        dist.init_process_group(backend="fake", store=FakeStore(), rank=args.rank, world_size=args.world_size)
        with contextlib.redirect_stdout(io.StringIO()):
            mpu.initialize_model_parallel(
                args.tensor_model_parallel_size,
                args.pipeline_model_parallel_size,
                args.virtual_pipeline_model_parallel_size,
                pipeline_model_parallel_comm_backend=args.pipeline_model_parallel_comm_backend,
                use_sharp=args.use_sharp,
                gtp_remat_size=args.gtp_weight_remat_size,
                expert_gtp_remat_size=args.expert_gtp_weight_remat_size,
                context_parallel_size=args.context_parallel_size,
                hierarchical_context_parallel_sizes=args.hierarchical_context_parallel_sizes,
                hybrid_context_parallel=args.hybrid_context_parallel,
                expert_model_parallel_size=args.expert_model_parallel_size,
                num_distributed_optimizer_instances=args.num_distributed_optimizer_instances,
                expert_tensor_parallel_size=args.expert_tensor_parallel_size,
                distributed_timeout_minutes=args.distributed_timeout_minutes,
                nccl_communicator_config_path=args.nccl_communicator_config_path,
                order="tp-cp-ep-dp-pp" if not args.use_tp_pp_dp_mapping else "tp-cp-ep-pp-dp",
                create_gloo_process_groups=False,
                high_priority_stream_groups=None,
                sharp_enabled_group=args.sharp_enabled_group,
            )
        out["groups"] = {
            "tp": mpu.get_tensor_model_parallel_world_size(),
            "pp": mpu.get_pipeline_model_parallel_world_size(),
            "cp": mpu.get_context_parallel_world_size(),
            "dp": mpu.get_data_parallel_world_size(),
            "dp_cp": mpu.get_data_parallel_world_size(with_context_parallel=True),
            # one distributed-optimizer instance (dp_cp when there is one instance)
            "dp_cp_instance": mpu.get_data_parallel_world_size(
                with_context_parallel=True, partial_data_parallel=True
            ),
            # this rank's pipeline and data-parallel groups (the rank layout)
            "pp_ranks": list(dist.get_process_group_ranks(mpu.get_pipeline_model_parallel_group())),
            "dp_ranks": list(dist.get_process_group_ranks(mpu.get_data_parallel_group())),
            "ep": mpu.get_expert_model_parallel_world_size(),
            "etp": mpu.get_expert_tensor_parallel_world_size(),
            "edp": mpu.get_expert_data_parallel_world_size(),
        }
    except BaseException as exc:
        out["error"] = _error_text(exc)
        return False
    return True


def _megatron_transformer_config(core_transformer_config_from_args, args, out: dict[str, Any]) -> bool:
    """Stage ``transformer_config``; False with the error in ``out``."""
    out["stage"] = "transformer_config"
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            core_transformer_config_from_args(args)
    except BaseException as exc:
        out["error"] = _error_text(exc)
        return False
    return True


def _attr_path(obj: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def _override_keys(overrides: list[str]) -> list[tuple[str, str]]:
    """(flag as written, dotted dataclass path) of each ``--section.key[=value]`` override."""
    keys = []
    for tok in overrides:
        if tok.startswith("--"):
            flag = tok.split("=", 1)[0]
            keys.append((flag, flag[2:].replace("-", "_")))
    return keys


def _torchtitan_child(toml: str, overrides: list[str], world_size: int | None, deep: bool) -> dict[str, Any]:
    """The torchtitan stages of :mod:`_framework_validators` on ``toml`` with ``overrides``, in
    order, up to the first that fails: its name in ``stage`` and its error in ``error``; only the
    parse when no world size is given or implied."""
    out: dict[str, Any] = {"accepted": False, "stage": "import", "error": None, "overridden": []}
    try:
        import torch
        from torchtitan.config import ConfigManager
        from torchtitan.distributed import ParallelDims
        from torchtitan.distributed import utils as dist_utils
        from torchtitan.protocols.train_spec import get_train_spec
        from torchtitan.tools import utils as titan_utils
        from torchtitan.tools.logging import logger
    except ImportError as exc:
        return unavailable_result(f"torchtitan/torch not importable: {exc}")
    logger.setLevel(logging.ERROR)
    # No GPU: torchtitan falls back to device_type "cuda" (tools/utils.py get_device_info), and FSDP's
    # fully_shard then asks CUDA for the current device. Build the meshes on "cpu" instead.
    import torchtitan.distributed.parallel_dims as titan_pd

    if not torch.cuda.is_available():
        titan_utils.device_type, titan_utils.device_module = "cpu", torch.cpu
        titan_pd.device_type = dist_utils.device_type = "cpu"
        out["assumed"] = {"device_type": "cpu"}
    # The generated launch puts the TOML's folder on PYTHONPATH (custom flavor modules).
    sys.path.insert(0, os.path.dirname(toml))

    job = _torchtitan_parse(ConfigManager, toml, overrides, out)
    if job is None:
        return out
    world_size = _torchtitan_world_size(job.parallelism, world_size)
    if world_size is None:
        out.update(accepted=True, stage=None, note="no world size: only the parse ran")
        return out
    out["world_size"] = world_size

    dims = _torchtitan_parallel_dims(ParallelDims, dist_utils, job, world_size, out)
    if dims is None:
        return out
    built = _torchtitan_model(torch, titan_utils, get_train_spec, job, out)
    if built is None:
        return out
    spec, model, model_args = built
    if not _torchtitan_batch(job, dims, out):
        return out
    if deep and not _torchtitan_parallelize(torch, spec, model, model_args, dims, job, out):
        return out
    out.update(accepted=True, stage=None)
    return out


def _torchtitan_parse(ConfigManager, toml: str, overrides: list[str], out: dict[str, Any]):
    """Stage ``parse``: the job config, with the overrides that changed a value (before and after)
    in ``out``; None with the error in ``out``."""
    out["stage"] = "parse"
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured), contextlib.redirect_stdout(captured):
            job = ConfigManager().parse_args(["--job.config_file", toml, *overrides])
            base = ConfigManager().parse_args(["--job.config_file", toml]) if overrides else job
    except BaseException as exc:  # tyro exits on a bad flag or value
        out["error"] = _error_text(exc, captured.getvalue())
        return None
    changed = {}
    for flag, path in _override_keys(overrides):
        try:
            old, new = _attr_path(base, path), _attr_path(job, path)
        except AttributeError:
            continue
        if old != new:
            changed[flag] = [_jsonable(old), _jsonable(new)]
    out["overridden"] = sorted(changed)
    out["overridden_values"] = changed
    return job


def _torchtitan_world_size(par, world_size: int | None) -> int | None:
    """``world_size``, else the product of the parallelism section's degrees when its FSDP degree is
    set (not -1), else None."""
    degrees = (
        par.data_parallel_replicate_degree,
        par.context_parallel_degree,
        par.tensor_parallel_degree,
        par.pipeline_parallel_degree,
    )
    if world_size is None and par.data_parallel_shard_degree > 0:
        world_size = par.data_parallel_shard_degree
        for d in degrees:
            world_size *= d
    return world_size


def _torchtitan_parallel_dims(ParallelDims, dist_utils, job, world_size: int, out: dict[str, Any]):
    """Stage ``parallel_dims``: the ``ParallelDims`` with its mesh built on a fake backend of
    ``world_size`` ranks; None with the error in ``out``."""
    par = job.parallelism
    out["stage"] = "parallel_dims"
    try:
        if job.experimental.custom_import:
            importlib.import_module(job.experimental.custom_import)
        # torchtitan's own dry-run mode (Comm.mode "fake_backend": fake process group, NGPU ranks).
        os.environ["NGPU"] = str(world_size)
        job.comm.mode = "fake_backend"
        dist_utils.init_distributed(
            job.comm, enable_cpu_backend=job.training.enable_cpu_offload, base_folder=job.job.dump_folder
        )
        dims = ParallelDims(  # as Trainer.init_distributed builds it
            dp_shard=par.data_parallel_shard_degree,
            dp_replicate=par.data_parallel_replicate_degree,
            cp=par.context_parallel_degree,
            tp=par.tensor_parallel_degree,
            pp=par.pipeline_parallel_degree,
            ep=par.expert_parallel_degree,
            etp=par.expert_tensor_parallel_degree,
            world_size=world_size,
        )
        dims.build_mesh()
        out["parallel_dims"] = {
            k: getattr(dims, k) for k in ("dp_replicate", "dp_shard", "cp", "tp", "pp", "ep", "etp")
        }
    except BaseException as exc:
        out["error"] = _error_text(exc)
        return None
    return dims


def _torchtitan_model(torch, titan_utils, get_train_spec, job, out: dict[str, Any]):
    """Stage ``model``: ``(train spec, the model on the meta device, its model args)``, its
    parameter count in ``out``; None with the error in ``out``."""
    out["stage"] = "model"
    try:
        spec = get_train_spec(job.model.name)
        if job.model.flavor not in spec.model_args:
            raise ValueError(
                f"model.flavor {job.model.flavor!r} is not a {job.model.name} flavor "
                f"(known: {', '.join(sorted(spec.model_args))})"
            )
        model_args = spec.model_args[job.model.flavor]
        model_args.update_from_config(job)
        with (
            torch.device("meta"),
            titan_utils.set_default_dtype(
                {"bfloat16": torch.bfloat16, "float32": torch.float32}[job.training.dtype]
            ),
        ):
            model = spec.model_cls(model_args)
        n_params, _ = model_args.get_nparams_and_flops(model, job.training.seq_len)
        out["model_params"] = n_params
    except BaseException as exc:
        out["error"] = _error_text(exc)
        return None
    return spec, model, model_args


def _torchtitan_batch(job, dims, out: dict[str, Any]) -> bool:
    """Stage ``batch``: the gradient accumulation steps in ``out``; False with the error in ``out``."""
    out["stage"] = "batch"
    try:  # torchtitan/train.py Trainer.__init__ "verify batch sizes" (inline code, re-stated)
        batch_degree = dims.dp_replicate * dims.dp_shard if dims.dp_enabled else 1
        gbs = job.training.global_batch_size
        if gbs < 0:
            gbs = job.training.local_batch_size * batch_degree
        assert gbs > 0
        assert gbs % (job.training.local_batch_size * batch_degree) == 0, (
            f"global batch size must be multiple of local batch size times data-parallel degree "
            f"({gbs} % ({job.training.local_batch_size} * {batch_degree}) != 0)"
        )
        out["gradient_accumulation_steps"] = gbs // (job.training.local_batch_size * batch_degree)
    except BaseException as exc:
        out["error"] = _error_text(exc)
        return False
    return True


def _torchtitan_parallelize(torch, spec, model, model_args, dims, job, out: dict[str, Any]) -> bool:
    """Stage ``parallelize`` (``deep``): the pipeline split and schedule, or the parallelisation of the
    one model part, on the meta model; False with the error in ``out``."""
    out["stage"] = "parallelize"
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            if dims.pp_enabled:
                if not spec.pipelining_fn:
                    raise RuntimeError(
                        f"Pipeline Parallel is enabled but {job.model.name} does not support pipelining"
                    )
                loss_fn = spec.build_loss_fn(job, parallel_dims=dims)
                schedule, parts, _, _ = spec.pipelining_fn(
                    model, dims, job, torch.device("cpu"), model_args, spec.parallelize_fn, loss_fn
                )
                out["pipeline"] = {
                    "schedule": type(schedule).__name__,
                    "model_parts_on_rank0": len(parts),
                }
            else:
                spec.parallelize_fn(model, dims, job)
    except BaseException as exc:
        out["error"] = _error_text(exc)
        return False
    return True


def _child_main(mode: str) -> None:
    payload = json.loads(sys.stdin.read())
    if mode == "megatron":
        result = _megatron_child(payload["argv"], int(payload.get("gpu_arch", 9)), payload.get("te_version"))
    else:
        result = _torchtitan_child(
            payload["toml"], payload["overrides"], payload.get("world_size"), payload["deep"]
        )
    sys.stdout.write("\n" + RESULT_MARKER + json.dumps(_jsonable(result)) + "\n")
    sys.stdout.flush()
    os._exit(0)  # skip atexit hooks of torch.distributed / megatron


if __name__ == "__main__":
    if len(sys.argv) == 2 and sys.argv[1] in ("--megatron-json", "--torchtitan-json"):
        _child_main(sys.argv[1][2:].split("-")[0])
    sys.exit(f"usage: {sys.argv[0]} --megatron-json | --torchtitan-json (payload on stdin)")
