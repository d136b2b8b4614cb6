"""Time, cost and energy to train: a prediction's throughput turned into days, GPU-hours, dollars
and kilowatt-hours for a token budget.

Formulas (one step processes ``global_batch_size x seq_length`` tokens):

* time to train ``T = tokens / tokens_per_s`` seconds; ``days_to_train = T / 86,400``
  (llm-analysis, Li 2023, ``total_training_latency = num_tokens / tokens_per_s``; the same as
  Narayanan et al. 2021, SC'21 eq. 4, ``8 T P / (n X)`` with the predicted throughput in place of
  their FLOP-rate approximation).
* ``gpu_hours = num_gpus x T / 3,600`` (every GPU of the cluster is held for the whole run; NeMo's
  auto-configurator and llm-analysis report GPU-hours the same way).
* ``cost_usd = gpu_hours x gpu_hour_price_usd`` (a price per GPU-hour, as cloud providers bill).
* ``energy_kwh = sum over GPUs of tdp_w x gpu_power_fraction x node_power_overhead x T / 3.6e6``.

The utilisation model behind the energy is deliberately simple and conservative: every GPU draws
its thermal design power (datasheet TDP, ``tdp_w`` in ``hardware_profiles/gpus``) for the whole
run, scaled by ``gpu_power_fraction`` (default 1). Drawing TDP is how Luccioni et al. 2022
("Estimating the Carbon Footprint of BLOOM", arXiv:2211.02001, sec. 4) and the ML CO2 Impact
calculator (Lacoste et al. 2019, arXiv:1910.09700) estimate training energy; GPUs idling in
pipeline bubbles wait in NCCL kernels at full clocks, so the bubble is not subtracted. Pass a
measured average draw as a fraction of TDP to tighten it. ``node_power_overhead`` adds what the
rest of the node (CPUs, memory, NICs, fans, power supplies) draws per watt of GPU: the default
1.82 is NVIDIA's DGX H100 datasheet figure, about 10.2 kW maximum system power for 8 x 700 W GPUs
(10.2 / 5.6). Data-centre cooling (PUE) is not included: multiply by your site's PUE.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from planner.inputs.cluster_spec import ClusterSpec
from planner.inputs.errors import UsageError
from planner.inputs.validation import check_flag

SECONDS_PER_DAY = 86_400.0
SECONDS_PER_HOUR = 3_600.0
JOULES_PER_KWH = 3.6e6
DEFAULT_NODE_POWER_OVERHEAD = 10.2 / (8 * 0.7)
"""NVIDIA DGX H100 datasheet: ~10.2 kW maximum system power for 8 H100 SXM5 at 700 W each."""
TOKEN_SUFFIXES = {"K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}


@dataclass(frozen=True, kw_only=True, slots=True)
class TrainingTarget:
    """What to train for and what it costs: the inputs of :func:`training_cost`."""

    tokens: float
    """Training tokens (e.g. 15e12 for 15T)."""
    gpu_hour_price_usd: float | None = None
    """Price of one GPU-hour; ``None``: no dollar cost."""
    gpu_power_fraction: float = 1.0
    """Average GPU power draw as a fraction of TDP (1 = TDP, the conservative default)."""
    node_power_overhead: float = DEFAULT_NODE_POWER_OVERHEAD
    """Node power per watt of GPU power (CPUs, memory, NICs, fans; no data-centre PUE)."""


@dataclass(frozen=True, slots=True)
class TrainingCost:
    """Time, GPU-hours, cost and energy of one plan for a :class:`TrainingTarget`."""

    tokens: float
    days_to_train: float
    gpu_hours: float
    cost_usd: float | None
    energy_kwh: float | None
    """``None`` when a GPU type has no TDP."""

    def as_dict(self) -> dict:
        """The fields of a plan's ``--json`` and plan file (``cost_usd``/``energy_kwh`` only when known)."""
        out = {"tokens": self.tokens, "days_to_train": self.days_to_train, "gpu_hours": self.gpu_hours}
        if self.cost_usd is not None:
            out["cost_usd"] = self.cost_usd
        if self.energy_kwh is not None:
            out["energy_kwh"] = self.energy_kwh
        return out


def parse_tokens(text: str, flag: str = "--tokens") -> float:
    """``"15T"`` -> 1.5e13: a number with an optional K/M/B(G)/T suffix (powers of 1000)."""
    s = text.strip().upper().replace("_", "").replace(",", "")
    scale = 1.0
    if s and s[-1] in TOKEN_SUFFIXES:
        scale, s = TOKEN_SUFFIXES[s[-1]], s[:-1]
    try:
        value = float(s) * scale
    except ValueError:
        raise UsageError(f"{flag} takes a token count such as 15T, 300B or 2e12, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise UsageError(f"{flag} must be a positive token count, got {text!r}")
    return value


def price_for(cluster: ClusterSpec, flag_price: float | None) -> float | None:
    """The GPU-hour price: the flag when given, else the cluster file's ``gpu_hour_price_usd``."""
    if flag_price is not None:
        if flag_price < 0 or not math.isfinite(flag_price):
            raise UsageError(f"--gpu-hour-price must be a non-negative number, got {flag_price}")
        return flag_price
    return cluster.gpu_hour_price_usd


def cluster_power_w(cluster: ClusterSpec) -> float | None:
    """Sum of the GPUs' TDPs; ``None`` when a GPU type has no TDP."""
    if any(g.gpu.tdp_w <= 0 for g in cluster.groups):
        return None
    return sum(g.num_gpus * g.gpu.tdp_w for g in cluster.groups)


def training_cost(tokens_per_s: float, cluster: ClusterSpec, target: TrainingTarget) -> TrainingCost:
    """Days, GPU-hours, dollars and kWh to train ``target.tokens`` at ``tokens_per_s`` on ``cluster``
    (formulas in the module docstring)."""
    seconds = target.tokens / tokens_per_s if tokens_per_s > 0 else math.inf
    gpu_hours = cluster.num_gpus * seconds / SECONDS_PER_HOUR
    power = cluster_power_w(cluster)
    energy = (
        power * target.gpu_power_fraction * target.node_power_overhead * seconds / JOULES_PER_KWH
        if power is not None
        else None
    )
    price = target.gpu_hour_price_usd
    return TrainingCost(
        tokens=target.tokens,
        days_to_train=seconds / SECONDS_PER_DAY,
        gpu_hours=gpu_hours,
        cost_usd=gpu_hours * price if price is not None else None,
        energy_kwh=energy,
    )


def make_target(
    tokens: str | None,
    gpu_hour_price_usd: float | None,
    cluster: ClusterSpec,
    gpu_power_fraction: float = 1.0,
    node_power_overhead: float = DEFAULT_NODE_POWER_OVERHEAD,
) -> TrainingTarget | None:
    """The target of ``--tokens`` (``None`` without it); the price from the flag or the cluster
    file; usage errors name the flag."""
    if not (0 < gpu_power_fraction <= 1.5) or not (1.0 <= node_power_overhead <= 5.0):
        raise UsageError("--gpu-power-fraction must be in (0, 1.5] and --node-power-overhead in [1, 5]")
    check_flag(gpu_hour_price_usd, "--gpu-hour-price", "gpu_hour_price_usd", positive=False)  # <= 10,000 USD
    price = price_for(cluster, gpu_hour_price_usd)
    if tokens is None:
        if gpu_hour_price_usd is not None:
            raise UsageError("--gpu-hour-price needs --tokens (the cost is for a token budget)")
        return None
    return TrainingTarget(
        tokens=parse_tokens(tokens),
        gpu_hour_price_usd=price,
        gpu_power_fraction=gpu_power_fraction,
        node_power_overhead=node_power_overhead,
    )


OBJECTIVES = ("time", "cost")


def check_objective(objective: str, target: TrainingTarget | None) -> None:
    """``--objective cost`` needs a token budget and a GPU-hour price."""
    if objective not in OBJECTIVES:
        raise UsageError(f"--objective {objective!r} is not allowed; allowed values: {', '.join(OBJECTIVES)}")
    if objective == "cost" and (target is None or target.gpu_hour_price_usd is None):
        raise UsageError(
            "--objective cost needs --tokens and a price (--gpu-hour-price, or gpu_hour_price_usd in a cluster file)"
        )


def rank_by_cost(plans: list, target: TrainingTarget) -> list:
    """Ranked plans (best first) re-ranked by dollar cost, ties kept in the given order. On one
    cluster every plan holds every GPU, so cost is proportional to time and the order is the same;
    it differs where the points differ in GPUs or price (``planner sweep``)."""
    keyed = [
        (training_cost(p.estimate.tokens_per_s, p.cluster, target).cost_usd, i, p)
        for i, p in enumerate(plans)
    ]
    return [p for _, _, p in sorted(keyed, key=lambda x: (x[0], x[1]))]
