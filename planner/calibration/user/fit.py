"""Fit :mod:`.params` to measured runs and nccl-tests rows: bounded, prior-regularised least squares.

The objective (maximum a posteriori with Gaussian errors, in the fitting coordinates of
:mod:`.params`: log of positive values, the overlap factor linear)::

    sum_runs (log(pred_i / measured_i) / SIGMA_RUN)^2 + sum_nccl (log(t_pred / t_measured) / SIGMA_NCCL)^2
      + sum_params ((x_j - prior_j) / width_j)^2

minimised by Levenberg-Marquardt (Marquardt 1963) with a forward-difference Jacobian, each step
projected onto the bounds. Predictions are :func:`cost_models.estimate.estimate` for runs (tokens/s
per GPU) and the alpha-beta collectives of :mod:`cost_models.communication` for nccl-tests rows.

* Identifiability: before fitting, the posterior standard deviation of each parameter given the
  inputs (``(J^T J + P)^-1`` at the prior, J the data Jacobian, P the prior precision) is compared
  with its prior width; a parameter the data narrow by less than half (:data:`IDENTIFIED_RATIO`)
  keeps its prior and the report says so.
* Uncertainty: the posterior covariance at the fit, ``(J^T J / s^2 + P)^-1``, with ``s^2`` the
  residual variance per degree of freedom (Bard 1974, "Nonlinear Parameter Estimation", ch. 7),
  propagated to each value (``value x sigma`` in log coordinates).
* Leave-one-run-out: for each run, one Gauss-Newton step from the fit without that run's row (the
  linearised leave-one-out of Cook & Weisberg 1982, "Residuals and Influence in Regression",
  Sec. 5.4), then the run predicted with those values.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

import numpy as np

from cost_models.communication import (
    Link,
    all_gather_s,
    all_reduce_s,
    all_to_all_s,
    link_for,
    p2p_s,
    reduce_scatter_s,
)
from cost_models.estimate import estimate
from cost_models.placement import Group
from planner.calibration.user.sources import NcclPoint, Run
from planner.inputs.cluster_spec import ClusterSpec
from planner.profiles.params import (
    BY_NAME,
    NAMES,
    apply_values,
    bounds_of,
    from_internal,
    to_internal,
    values_of,
)

SIGMA_RUN = 0.05
"""Expected scatter of log(predicted / measured) throughput of one run: iteration-time noise of a
few percent plus what the analytic model cannot capture."""
SIGMA_NCCL = 0.10
"""Expected scatter of one nccl-tests row around the alpha-beta model (protocol and algorithm
switches between sizes that two constants per link cannot follow)."""
IDENTIFIED_RATIO = 0.5
"""A parameter counts as identified when the inputs shrink its prior standard deviation to at most
this fraction."""
MAX_ITERATIONS = 20
COST_TOLERANCE = 1e-3
"""Stop when a step lowers the objective by less than this (a change of 0.0005 in the log posterior)."""
FD_STEP = 1e-4


@dataclass(frozen=True, slots=True)
class ParamResult:
    """One parameter after the fit."""

    name: str
    prior: float
    value: float
    uncertainty: float
    """One standard deviation, in the parameter's unit."""
    fitted: bool
    note: str = ""
    """Why it kept the prior, or that it sits on a bound."""


@dataclass(frozen=True, slots=True)
class RunResult:
    """One run before and after calibration."""

    run_id: str
    origin: str
    measured: float
    before: float
    after: float
    loo: float
    """Predicted by the fit without this run (linearised leave-one-out)."""
    measured_peak_memory_bytes: float = 0.0
    predicted_peak_memory_bytes: float = 0.0

    @staticmethod
    def error(pred: float, measured: float) -> float:
        return abs(pred - measured) / measured


@dataclass(frozen=True, slots=True)
class NcclResult:
    """The nccl-tests rows of one file before and after."""

    origin: str
    collective: str
    num_ranks: int
    rows: int
    before_median_error: float
    after_median_error: float


@dataclass(slots=True)
class FitReport:
    """Everything ``planner calibrate`` reports."""

    gpu: str
    cluster: str
    params: list[ParamResult]
    runs: list[RunResult]
    nccl: list[NcclResult]
    iterations: int
    skipped: list[tuple[str, str]] = field(default_factory=list)

    @property
    def values(self) -> dict[str, float]:
        return {p.name: p.value for p in self.params}


def _stats(errors: list[float]) -> dict:
    if not errors:
        return {"count": 0}
    return {"count": len(errors), "median": statistics.median(errors), "mean": sum(errors) / len(errors)}


def summary(report: FitReport) -> dict:
    """Median and mean absolute error of tokens/s per GPU: before, after, leave-one-run-out."""
    e = RunResult.error
    return {
        "before": _stats([e(r.before, r.measured) for r in report.runs]),
        "after": _stats([e(r.after, r.measured) for r in report.runs]),
        "leave_one_run_out": _stats([e(r.loo, r.measured) for r in report.runs]),
    }


# ------------------------------------------------------------------------------------------------
# Predictions


def predict_run(run: Run, gpu: str, values: dict[str, float]):
    """The estimate of ``run`` with ``values`` applied to its cluster."""
    return estimate(run.model, apply_values(run.cluster, gpu, values), run.job, run.config)


def nccl_link(point: NcclPoint, cluster: ClusterSpec, gpu: str, values: dict[str, float]) -> Link:
    """The link the rows' ranks use: consecutive ranks, ``ranks_per_host`` of them on each host
    (one host: NVLink; several: the network, that many NICs per host)."""
    node = apply_values(cluster, gpu, values).groups[0]
    n, k = point.num_ranks, point.ranks_per_host
    if n <= k:
        return link_for(Group(1, n), node)
    # A group whose members sit k per NVLink domain: stride d // k (cost_models.placement.span).
    return link_for(Group(max(1, node.nvlink_domain_size // k), n), node)


def predict_nccl(point: NcclPoint, cluster: ClusterSpec, gpu: str, values: dict[str, float]) -> float:
    """Time of one nccl-tests row under the alpha-beta model (nccl-tests' ``size`` is the full buffer
    for all-gather/reduce-scatter and the per-rank buffer for all-reduce, alltoall and sendrecv)."""
    link = nccl_link(point, cluster, gpu, values)
    fn = {
        "all_reduce": all_reduce_s,
        "all_gather": all_gather_s,
        "reduce_scatter": reduce_scatter_s,
        "alltoall": all_to_all_s,
    }.get(point.collective)
    if fn is None:
        return p2p_s(point.size_bytes, link)
    return fn(point.size_bytes, point.num_ranks, link)


# ------------------------------------------------------------------------------------------------
# The fit


class _Objective:
    """Residuals of the data and of the priors as functions of the free coordinates."""

    def __init__(self, runs, nccl, cluster, gpu, prior, free):
        self.runs, self.nccl, self.cluster, self.gpu = runs, nccl, cluster, gpu
        self.prior = prior
        self.free = free
        self.x0 = np.array([to_internal(n, prior[n]) for n in free])
        self.width = np.array([BY_NAME[n].prior_width for n in free])
        b = bounds_of(cluster, gpu)
        self.lo = np.array([to_internal(n, max(b[n][0], 1e-12) if BY_NAME[n].log else b[n][0]) for n in free])
        self.hi = np.array([to_internal(n, b[n][1]) for n in free])
        self.log_measured = np.array(
            [math.log(r.measured_tokens_per_s_per_gpu) for r in runs] + [math.log(p.time_s) for p in nccl]
        )
        self.sigma = np.array([SIGMA_RUN] * len(runs) + [SIGMA_NCCL] * len(nccl))

    def values(self, x) -> dict[str, float]:
        out = dict(self.prior)
        out.update({n: from_internal(n, float(v)) for n, v in zip(self.free, x)})
        return out

    def log_predicted(self, x, only_runs: list[int] | None = None) -> np.ndarray:
        v = self.values(x)
        runs = [math.log(predict_run(r, self.gpu, v).tokens_per_s_per_gpu) for r in self.runs]
        nccl = [math.log(predict_nccl(p, self.cluster, self.gpu, v)) for p in self.nccl]
        return np.array(runs + nccl)

    def data_residuals(self, x) -> np.ndarray:
        return (self.log_predicted(x) - self.log_measured) / self.sigma

    def prior_residuals(self, x) -> np.ndarray:
        return (np.asarray(x) - self.x0) / self.width

    def jacobian(self, x, r0, central: bool = False) -> np.ndarray:
        """Forward differences of the data residuals; a step that would cross the upper bound goes
        down. ``central``: central differences (half the slope at a kink such as the min() of two
        links at a tie, where a one-sided step may see none)."""
        J = np.zeros((len(r0), len(x)))
        for j in range(len(x)):
            if central:
                up, down = np.array(x, dtype=float), np.array(x, dtype=float)
                up[j] += FD_STEP * 10
                down[j] -= FD_STEP * 10
                J[:, j] = (self.data_residuals(up) - self.data_residuals(down)) / (20 * FD_STEP)
                continue
            h = FD_STEP if x[j] + FD_STEP <= self.hi[j] else -FD_STEP
            xj = np.array(x, dtype=float)
            xj[j] += h
            J[:, j] = (self.data_residuals(xj) - r0) / h
        return J


def _solve(A: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.linalg.lstsq(A, b, rcond=None)[0]


def fit(runs: list[Run], nccl: list[NcclPoint], cluster: ClusterSpec, skipped=()) -> FitReport:
    """Fit every identifiable parameter of :mod:`.params` to ``runs`` and ``nccl`` rows measured on
    ``cluster``'s GPU type, priors at the cluster's current values."""
    gpu = cluster.groups[0].gpu.name
    prior = values_of(cluster, gpu)
    full = _Objective(runs, nccl, cluster, gpu, prior, list(NAMES))
    r0 = full.data_residuals(full.x0)
    J0 = full.jacobian(full.x0, r0, central=True)
    P = np.diag(1 / full.width**2)
    cov0 = np.linalg.inv(J0.T @ J0 + P)
    ratio = np.sqrt(np.diag(cov0)) * (1 / full.width)
    free = [n for n, q in zip(NAMES, ratio) if q <= IDENTIFIED_RATIO]
    notes = {
        n: f"the inputs narrow it only to {q:.0%} of its prior width (needs <= {IDENTIFIED_RATIO:.0%})"
        for n, q in zip(NAMES, ratio)
        if q > IDENTIFIED_RATIO
    }
    obj = _Objective(runs, nccl, cluster, gpu, prior, free)
    x, iterations = obj.x0.copy(), 0
    if free:
        x, iterations = _levenberg_marquardt(obj)
    values = obj.values(x)
    params: list[ParamResult] = []
    rd = obj.data_residuals(x) if free else r0
    J = obj.jacobian(x, rd) if free else np.zeros((len(rd), 0))
    dof = len(rd) - len(free)
    s2 = float(rd @ rd) / dof if dof > 0 else 1.0
    s2 = max(s2, 1e-6)
    Pf = np.diag(1 / obj.width**2) if free else np.zeros((0, 0))
    cov = np.linalg.inv(J.T @ J / s2 + Pf) if free else np.zeros((0, 0))
    for name in NAMES:
        p = BY_NAME[name]
        if name in free:
            j = free.index(name)
            sd = math.sqrt(cov[j, j])
            unc = values[name] * sd if p.log else sd
            note = ""
            if abs(x[j] - obj.lo[j]) < 1e-9 or abs(x[j] - obj.hi[j]) < 1e-9:
                note = "at its bound"
            params.append(ParamResult(name, prior[name], values[name], unc, True, note))
        else:
            unc = prior[name] * p.prior_width if p.log else p.prior_width
            params.append(ParamResult(name, prior[name], prior[name], unc, False, notes[name]))
    return FitReport(
        gpu,
        cluster.name,
        params,
        _run_results(obj, x, J, rd, prior, values),
        _nccl_results(nccl, cluster, gpu, prior, values),
        iterations,
        list(skipped),
    )


def _levenberg_marquardt(obj: _Objective) -> tuple[np.ndarray, int]:
    """Minimise the data and prior residuals within the bounds (projected LM steps)."""
    x = obj.x0.copy()
    rd = obj.data_residuals(x)
    cost = float(rd @ rd) + float(obj.prior_residuals(x) @ obj.prior_residuals(x))
    lam = 1e-2
    Pw = np.diag(1 / obj.width)
    it = 0
    for it in range(1, MAX_ITERATIONS + 1):
        J = obj.jacobian(x, rd)
        Jf = np.vstack([J, Pw])
        rf = np.concatenate([rd, obj.prior_residuals(x)])
        A, g = Jf.T @ Jf, Jf.T @ rf
        improved = False
        for _ in range(8):
            step = _solve(A + lam * np.diag(np.diag(A) + 1e-9), -g)
            xn = np.clip(x + step, obj.lo, obj.hi)
            rn = obj.data_residuals(xn)
            cn = float(rn @ rn) + float(obj.prior_residuals(xn) @ obj.prior_residuals(xn))
            if cn < cost:
                moved = float(np.max(np.abs(xn - x)))
                x, rd, lam, improved = xn, rn, max(lam / 3, 1e-7), True
                done = cost - cn < COST_TOLERANCE or moved < 1e-5
                cost = cn
                break
            lam *= 4
        if not improved or done:
            break
    return x, it


def _run_results(obj, x, J, rd, prior, values) -> list[RunResult]:
    """Per-run predictions before, after and left out (linearised leave-one-out)."""
    out = []
    n_runs = len(obj.runs)
    Pw = np.diag(1 / obj.width) if len(x) else np.zeros((0, 0))
    pr = obj.prior_residuals(x)
    for i, run in enumerate(obj.runs):
        before = predict_run(run, obj.gpu, prior)
        after = predict_run(run, obj.gpu, values)
        loo = after.tokens_per_s_per_gpu
        if len(x):
            keep = [k for k in range(len(rd)) if k != i]
            Jf = np.vstack([J[keep], Pw])
            rf = np.concatenate([rd[keep], pr])
            xi = np.clip(x + _solve(Jf.T @ Jf, -Jf.T @ rf), obj.lo, obj.hi)
            loo = predict_run(run, obj.gpu, obj.values(xi)).tokens_per_s_per_gpu
        out.append(
            RunResult(
                run.run_id,
                run.origin,
                run.measured_tokens_per_s_per_gpu,
                before.tokens_per_s_per_gpu,
                after.tokens_per_s_per_gpu,
                loo,
                run.measured_peak_memory_bytes,
                after.peak_memory_bytes if run.measured_peak_memory_bytes else 0.0,
            )
        )
    assert len(out) == n_runs
    return out


def _nccl_results(points, cluster, gpu, prior, values) -> list[NcclResult]:
    """Median absolute time error of each nccl-tests file's rows before and after."""
    by_file: dict[str, list[NcclPoint]] = {}
    for p in points:
        by_file.setdefault(p.origin.rsplit(":", 1)[0], []).append(p)
    out = []
    for origin, ps in by_file.items():
        err = [[abs(predict_nccl(p, cluster, gpu, v) / p.time_s - 1) for p in ps] for v in (prior, values)]
        out.append(
            NcclResult(
                origin,
                ps[0].collective,
                ps[0].num_ranks,
                len(ps),
                statistics.median(err[0]),
                statistics.median(err[1]),
            )
        )
    return out


def report_dict(report: FitReport) -> dict:
    """The report as JSON-ready data (stable key order)."""
    return {
        "gpu": report.gpu,
        "cluster": report.cluster,
        "iterations": report.iterations,
        "parameters": [
            {
                "name": p.name,
                "unit": BY_NAME[p.name].unit,
                "prior": p.prior,
                "value": p.value,
                "uncertainty": p.uncertainty,
                "fitted": p.fitted,
                "note": p.note,
            }
            for p in report.params
        ],
        "errors": summary(report),
        "runs": [
            {
                "run_id": r.run_id,
                "origin": r.origin,
                "measured_tokens_per_s_per_gpu": r.measured,
                "before_tokens_per_s_per_gpu": r.before,
                "after_tokens_per_s_per_gpu": r.after,
                "leave_one_out_tokens_per_s_per_gpu": r.loo,
                "before_error": RunResult.error(r.before, r.measured),
                "after_error": RunResult.error(r.after, r.measured),
                "leave_one_out_error": RunResult.error(r.loo, r.measured),
                **(
                    {
                        "measured_peak_memory_bytes": r.measured_peak_memory_bytes,
                        "predicted_peak_memory_bytes": r.predicted_peak_memory_bytes,
                    }
                    if r.measured_peak_memory_bytes
                    else {}
                ),
            }
            for r in report.runs
        ],
        "nccl_tests": [
            {
                "origin": n.origin,
                "collective": n.collective,
                "num_ranks": n.num_ranks,
                "rows": n.rows,
                "before_median_error": n.before_median_error,
                "after_median_error": n.after_median_error,
            }
            for n in report.nccl
        ],
        "skipped": [{"run_id": rid, "reason": why} for rid, why in report.skipped],
    }
