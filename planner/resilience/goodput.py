"""Goodput over a run: failure rates, checkpoint cost, the Young/Daly interval, hot spares.

Pure formulas (no estimate calls); :mod:`planner.resilience.strategies` supplies throughputs.

* Failure rate. The default per-GPU rate is the Llama 3 405B pre-training run's: 419 unexpected
  interruptions in 54 days on 16,384 H100 GPUs (Dubey et al. 2024, "The Llama 3 Herd of Models",
  arXiv:2407.21783, Sec. 3.3.4 and Table 5), i.e. 419 / (54 x 24 h x 16,384) = 1.97e-5 per GPU-hour,
  one interruption every 3.1 hours for the whole job. Failures are a Poisson process, so a job of
  N GPUs has a mean time between failures ``M = 1 / (N * rate)``.
* Checkpoint. Size = every trained parameter's 16-bit weight plus the optimizer's master weight and
  two Adam moments at the job's dtypes (:func:`cost_models.memory.checkpoint_bytes_per_param`;
  gradients, and the fp32 copy of 16-bit gradients the optimizer step reads, are not saved). A LoRA
  job trains and saves its adapters only: Megatron-Bridge filters the model sections of every
  checkpoint it saves to the adapters' weights (``save_checkpoint`` ->
  ``apply_peft_adapter_filter_to_state_dict``, src/megatron/bridge/training/checkpointing.py at
  067f987d), and on every start, restarts included, its PEFT hook first loads the base model's
  weights from ``checkpoint.pretrained_checkpoint`` (``_create_peft_pre_wrap_hook``,
  src/megatron/bridge/training/setup.py), so a restore reads the 16-bit base weights too
  (:func:`restore_bytes`). Save and restore times = bytes / storage bandwidth; the default
  bandwidth is the 2 TB/s sustained throughput of the Tectonic file system the Llama 3 run
  checkpointed to (same paper, Sec. 3.3.1).
* Checkpoint interval. Young (1974, "A first order approximation to the optimum checkpoint
  interval", CACM 17(9)): ``tau = sqrt(2 * delta * M)`` for a save time ``delta``. Daly (2006, "A
  higher order estimate of the optimum checkpoint interval for restart dumps", FGCS 22(3)):
  ``tau = sqrt(2 delta M) * [1 + sqrt(delta / (2M)) / 3 + (delta / (2M)) / 9] - delta`` for
  ``delta < 2M``, else ``tau = M``.
* Useful fraction. Daly's complete model (same paper): the wall time of ``T_s`` seconds of
  work is ``M * exp(R / M) * (exp((tau + delta) / M) - 1) * T_s / tau`` with ``R`` the time to
  restart (relaunch plus checkpoint restore), so the fraction of time doing useful work is
  ``tau / (M * exp(R / M) * (exp((tau + delta) / M) - 1))``.
* Hot spares. Nodes in repair at a moment are Poisson with mean ``nodes * node_rate * min(t,
  repair)`` (Little's law once repairs keep pace); a job holding ``s`` spare nodes runs at full
  speed while at most ``s`` nodes are down, and beyond that drops one data-parallel replica per
  further node down (the drop-replica strategy, global batch kept by accumulation: throughput in
  proportion to the surviving replicas). Averaged over the run length.

Two defaults are the planner's assumptions, not published measurements, and are flags:
the restart time (10 minutes: rescheduling, process launch and NCCL initialisation) and the node
repair time (24 hours until a failed node is back in the pool).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cost_models.adapters import adapter_params
from cost_models.memory import checkpoint_bytes_per_param
from planner.inputs.job_spec import JobSpec
from planner.inputs.model_spec import ModelSpec

LLAMA3_INTERRUPTIONS = 419
"""Unexpected interruptions of the Llama 3 405B run (Dubey et al. 2024, Table 5)."""
LLAMA3_DAYS = 54
"""Length of the observed window of that run, days."""
LLAMA3_GPUS = 16_384
"""H100 GPUs of that run."""
DEFAULT_GPU_FAILURE_RATE_PER_H = LLAMA3_INTERRUPTIONS / (LLAMA3_DAYS * 24 * LLAMA3_GPUS)
"""Failures per GPU-hour: 419 / (54 days x 24 h x 16,384 GPUs) = 1.97e-5 (Llama 3 paper)."""
DEFAULT_STORAGE_BYTES_PER_S = 2e12
"""Sustained throughput of Meta's Tectonic file system used for Llama 3 checkpoints, 2 TB/s
(Dubey et al. 2024, Sec. 3.3.1; peak 7 TB/s)."""
DEFAULT_RESTART_S = 600.0
"""Planner's assumption: relaunch of the job (rescheduling, process start, NCCL init) in 10 min."""
DEFAULT_REPAIR_H = 24.0
"""Planner's assumption: a failed node is back in the pool after one day."""
DEFAULT_RUN_DAYS = float(LLAMA3_DAYS)
"""Default run length: the Llama 3 paper's observed window."""

_SECONDS_PER_HOUR = 3600.0


@dataclass(frozen=True, kw_only=True, slots=True)
class FailureModel:
    """How often hardware fails and what a failure costs (SI units inside)."""

    gpu_failure_rate_per_h: float = DEFAULT_GPU_FAILURE_RATE_PER_H
    """Failures per GPU per hour (job interruptions attributed to one GPU's node)."""
    checkpoint_write_bytes_per_s: float = DEFAULT_STORAGE_BYTES_PER_S
    """Aggregate storage write bandwidth for saving a checkpoint."""
    checkpoint_read_bytes_per_s: float = DEFAULT_STORAGE_BYTES_PER_S
    """Aggregate storage read bandwidth for restoring one."""
    restart_s: float = DEFAULT_RESTART_S
    """Relaunch time after a failure, before the checkpoint is read."""
    repair_h: float = DEFAULT_REPAIR_H
    """Time until a failed node returns to the pool."""
    run_days: float = DEFAULT_RUN_DAYS
    """Length of the training run."""
    checkpoint_interval_s: float = 0.0
    """Fixed checkpoint interval; 0 = Daly's optimum."""


BASE_WEIGHT_BYTES = 2.0
"""Bytes per parameter of the pretrained checkpoint a LoRA job restores its frozen base from: the
16-bit weights Megatron and Hugging Face checkpoints store (an FP8 base, ``frozen_weight_dtype``
fp8, is cast after loading)."""


def checkpoint_bytes(model: ModelSpec, job: JobSpec) -> float:
    """Bytes of one checkpoint: the trained parameters' 16-bit weights plus the optimizer's master
    weights and Adam moments (:func:`cost_models.memory.checkpoint_bytes_per_param`); a LoRA job's
    trained parameters are its adapters (:func:`cost_models.adapters.adapter_params`)."""
    trained = adapter_params(model, job) if job.is_lora else float(model.params_total)
    return trained * checkpoint_bytes_per_param(job)


def restore_bytes(model: ModelSpec, job: JobSpec) -> float:
    """Bytes a restart reads: the checkpoint, plus a LoRA job's frozen base weights from the
    pretrained checkpoint (:data:`BASE_WEIGHT_BYTES` per parameter; see the module docstring)."""
    base = float(model.params_total) * BASE_WEIGHT_BYTES if job.is_lora else 0.0
    return checkpoint_bytes(model, job) + base


def job_mtbf_s(num_gpus: int, fm: FailureModel) -> float:
    """Mean time between failures of a job on ``num_gpus`` GPUs (Poisson failures), seconds."""
    return _SECONDS_PER_HOUR / (num_gpus * fm.gpu_failure_rate_per_h)


def young_interval_s(save_s: float, mtbf_s: float) -> float:
    """Young (1974): ``sqrt(2 * delta * M)``."""
    return math.sqrt(2.0 * save_s * mtbf_s)


def daly_interval_s(save_s: float, mtbf_s: float) -> float:
    """Daly (2006): Young's interval with higher-order terms, ``M`` when ``delta >= 2M``."""
    if save_s >= 2.0 * mtbf_s:
        return mtbf_s
    x = save_s / (2.0 * mtbf_s)
    return math.sqrt(2.0 * save_s * mtbf_s) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - save_s


def useful_fraction(interval_s: float, save_s: float, restart_s: float, mtbf_s: float) -> float:
    """Daly's complete model (2006): share of wall time spent on useful work with
    checkpoints every ``interval_s`` (save ``save_s``), restart ``restart_s`` and failures every
    ``mtbf_s`` on average."""
    m = mtbf_s
    a, b = restart_s / m, (interval_s + save_s) / m
    if a < _EXP_MAX and b < _EXP_MAX:
        return interval_s / (m * math.exp(a) * math.expm1(b))
    # Failures far more often than a checkpoint cycle: the same formula in logarithms, since
    # exp(a) overflows a float (log(expm1(b)) = b + log1p(-exp(-b))); the fraction underflows to 0.
    log_fraction = math.log(interval_s) - math.log(m) - a - (b + math.log1p(-math.exp(-b)))
    return math.exp(log_fraction)


_EXP_MAX = 700.0
"""Largest argument :func:`math.exp` takes with room to spare (it overflows above 709.78)."""


@dataclass(frozen=True, slots=True)
class Checkpointing:
    """Checkpoint cost and the resulting useful fraction of one job."""

    checkpoint_bytes: float
    restore_bytes: float
    """What a restart reads (:func:`restore_bytes`): the checkpoint, and a LoRA job's base weights."""
    save_s: float
    restore_s: float
    restart_s: float
    """Relaunch plus restore."""
    mtbf_s: float
    young_interval_s: float
    daly_interval_s: float
    interval_s: float
    """The interval used (Daly's unless fixed)."""
    useful_fraction: float


def checkpointing(model: ModelSpec, job: JobSpec, num_gpus: int, fm: FailureModel) -> Checkpointing:
    """Checkpoint size, save/restore times, Young and Daly intervals, useful fraction."""
    size = checkpoint_bytes(model, job)
    read = restore_bytes(model, job)
    save = size / fm.checkpoint_write_bytes_per_s
    restore = read / fm.checkpoint_read_bytes_per_s
    mtbf = job_mtbf_s(num_gpus, fm)
    young = young_interval_s(save, mtbf)
    daly = daly_interval_s(save, mtbf)
    interval = fm.checkpoint_interval_s or daly
    restart = fm.restart_s + restore
    return Checkpointing(
        checkpoint_bytes=size,
        restore_bytes=read,
        save_s=save,
        restore_s=restore,
        restart_s=restart,
        mtbf_s=mtbf,
        young_interval_s=young,
        daly_interval_s=daly,
        interval_s=interval,
        useful_fraction=useful_fraction(interval, save, restart, mtbf),
    )


def poisson_pmf(mu: float, k_max: int) -> list[float]:
    """P(X = k) for k = 0..k_max of a Poisson variable with mean ``mu`` (log-space, stable)."""
    if mu <= 0:
        return [1.0] + [0.0] * k_max
    return [math.exp(k * math.log(mu) - mu - math.lgamma(k + 1)) for k in range(k_max + 1)]


def nodes_down_mean(num_nodes: int, gpus_per_node: int, t_h: float, fm: FailureModel) -> float:
    """Mean number of nodes in repair at time ``t_h`` into the run (Little's law after one repair
    time: arrival rate x time in repair)."""
    return num_nodes * gpus_per_node * fm.gpu_failure_rate_per_h * min(t_h, fm.repair_h)


RUN_SAMPLES = 64
"""Midpoint samples of the run length for time averages."""


def availability(
    num_nodes: int, gpus_per_node: int, spares: int, replicas: int, replicas_per_node: int, fm: FailureModel
) -> float:
    """Average share of full throughput over the run for a job of ``replicas`` data-parallel
    replicas holding ``spares`` spare nodes, where each node down beyond the spares removes
    ``replicas_per_node`` replicas (the worst case: failures in different replicas)."""
    run_h = fm.run_days * 24.0
    # Beyond spares + replicas / replicas_per_node nodes down no replica runs: those terms are 0.
    k_none = spares + -(-replicas // max(1, replicas_per_node))
    total = 0.0
    for i in range(RUN_SAMPLES):
        t = (i + 0.5) * run_h / RUN_SAMPLES
        mu = nodes_down_mean(num_nodes, gpus_per_node, t, fm)
        spread = 12.0 * math.sqrt(mu) + 20
        k_max = min(int(mu + spread), k_none)
        # Below mu - 12 sigma - 20 the Poisson mass is under 1e-30: skipped, so the work per sample
        # is O(sqrt(mu)) however many nodes are down on average (0 for every mu under about 200).
        k_min = max(0, int(mu - spread))
        expected = 0.0
        if k_min == 0:
            for k, p in enumerate(poisson_pmf(mu, k_max)):
                lost = max(0, k - spares) * replicas_per_node
                expected += p * max(0, replicas - lost) / replicas
        else:
            log_mu = math.log(mu)
            for k in range(k_min, k_max + 1):
                p = math.exp(k * log_mu - mu - math.lgamma(k + 1))
                lost = max(0, k - spares) * replicas_per_node
                expected += p * max(0, replicas - lost) / replicas
        total += expected
    return total / RUN_SAMPLES


def spare_candidates(num_nodes: int, gpus_per_node: int, fm: FailureModel) -> int:
    """Largest spare count worth trying: the peak mean of nodes down plus four deviations."""
    mu = nodes_down_mean(num_nodes, gpus_per_node, fm.run_days * 24.0, fm)
    return min(num_nodes - 1, int(math.ceil(mu + 4.0 * math.sqrt(mu) + 2)))
