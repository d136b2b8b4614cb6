"""Profile files (``kind: profile``): the values ``planner calibrate`` fitted for one GPU type on one
cluster, written as YAML, read strictly, and applied to a cluster (``--profile`` of estimate,
search, check, timeline and bubbles; recorded in plan files and re-applied when a plan is read).

Layout (schema version 1)::

    schema_version: 1
    kind: profile
    planner_version: 0.1.0
    gpu: h100-sxm5-80gb          # the GPU type it applies to
    cluster: dgx-h100            # the cluster it was measured on (recorded, not enforced)
    parameters:                  # every parameter of planner.profiles.params
      gemm_efficiency_max: {value: 0.71, uncertainty: 0.02, prior: 0.7964, fitted: true, note: ''}
      ...
    fit:                         # what it was fitted on and how well (optional on read)
      runs: [{run_id: ..., origin: file:line}, ...]
      nccl_tests: [file, ...]
      errors: {before: {count, median, mean}, after: {...}, leave_one_run_out: {...}}

Values are absolute (not scale factors), so applying a profile to a cluster that already carries
it changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from planner import __version__
from planner.inputs.cluster_spec import ClusterSpec
from planner.inputs.documents import Reader, check_header, read_document
from planner.inputs.errors import SpecError
from planner.inputs.validation import check_number, limit, minimum, short_path
from planner.profiles.params import BY_NAME, NAMES, apply_values

PROFILE_SCHEMA_VERSION = 1

FRACTIONS = ("gemm_efficiency_max", "attention_efficiency", "hbm_efficiency", "comm_overlap_slowdown")
"""Parameters that are fractions (at most 1)."""


@dataclass(frozen=True, slots=True)
class ProfileParam:
    value: float
    uncertainty: float
    prior: float
    fitted: bool
    note: str = ""


@dataclass(frozen=True, slots=True)
class Profile:
    """A calibrated profile: fitted values for one GPU type."""

    gpu: str
    cluster: str
    parameters: tuple[tuple[str, ProfileParam], ...]
    """(name, parameter) in :data:`planner.profiles.params.NAMES` order."""
    planner_version: str = __version__
    source: str = ""
    """The file it was read from ('' when built in memory)."""
    fit: dict = field(default_factory=dict)
    """What it was fitted on (runs, nccl-tests files, errors); informational."""

    @property
    def values(self) -> dict[str, float]:
        return {n: p.value for n, p in self.parameters}


def profile_from_report(report, runs, nccl_files: list[str], errors: dict) -> Profile:
    """The profile of a :class:`planner.calibration.user.fit.FitReport`."""
    params = tuple(
        (p.name, ProfileParam(p.value, p.uncertainty, p.prior, p.fitted, p.note)) for p in report.params
    )
    fit = {
        "runs": [{"run_id": r.run_id, "origin": r.origin} for r in runs],
        "nccl_tests": sorted(set(nccl_files)),
        "errors": errors,
    }
    return Profile(report.gpu, report.cluster, params, __version__, "", fit)


def profile_to_mapping(p: Profile, with_fit: bool = True) -> dict:
    """The profile as a document (a plan file embeds it without ``fit``)."""
    doc = {
        "schema_version": PROFILE_SCHEMA_VERSION,
        "kind": "profile",
        "planner_version": p.planner_version,
        "gpu": p.gpu,
        "cluster": p.cluster,
        "parameters": {
            n: {
                "value": q.value,
                "uncertainty": q.uncertainty,
                "prior": q.prior,
                "fitted": q.fitted,
                "note": q.note,
            }
            for n, q in p.parameters
        },
    }
    if with_fit and p.fit:
        doc["fit"] = p.fit
    return doc


def profile_from_mapping(data: dict, where: str) -> Profile:
    """A profile from its document, strictly: header, known keys only, every parameter present,
    finite, non-negative, fractions at most 1, latencies and bandwidths positive."""
    r = Reader(data, where)
    check_header(r, "profile")
    version = r.get("planner_version", str, "")
    gpu = r.get("gpu", str)
    cluster = r.get("cluster", str, "")
    pr = r.sub("parameters")
    params = []
    for name in NAMES:
        q = pr.sub(name)
        value = _param_value(q, "value", name)
        entry = ProfileParam(
            value,
            q.get("uncertainty", float, 0.0, maximum=1e6),
            _param_value(q, "prior", name, value),
            q.get("fitted", bool, False),
            q.get("note", str, ""),
        )
        q.done()
        params.append((name, entry))
    pr.done()
    fit = fit_from_mapping(r.get("fit", dict, {}), where)
    r.done()
    return Profile(gpu, cluster, tuple(params), version, where, fit)


def _param_value(q: Reader, key: str, name: str, default: float | None = None) -> float:
    """A parameter's ``value`` (or ``prior``) under the bounds of the field it sets
    (:data:`planner.inputs.validation.LIMITS` / ``MINIMA`` of ``name``; fractions at most 1)."""
    from planner.inputs.documents import MISSING

    raw = q.get(key, float, MISSING if default is None else default)
    return check_number(
        raw,
        q.where,
        q._key(key),
        positive=BY_NAME[name].log,
        maximum=1.0 if name in FRACTIONS else (limit(name) or 1e6),
        least=minimum(name) or 0.0,
    )


_ERROR_KEYS = ("before", "after", "leave_one_run_out")


def fit_from_mapping(data: dict, where: str) -> dict:
    """A profile's ``fit`` section read as strictly as its parameters: ``runs`` (each a ``run_id``
    and an ``origin``), ``nccl_tests`` (file names) and ``errors`` (``before``, ``after``,
    ``leave_one_run_out``: a ``count`` and, when non-zero, the ``median`` and ``mean`` absolute
    relative error, finite and at most 1e6); unknown keys, NaN and infinity are errors. The
    section is informational (what the values were fitted on): nothing prices with it."""
    if not data:
        return {}
    r = Reader(data, where, "fit")
    runs = []
    for i, raw in enumerate(r.get("runs", list, [])):
        run = Reader(raw, where, f"fit.runs[{i}]")
        runs.append({"run_id": run.get("run_id", str), "origin": run.get("origin", str, "")})
        run.done()
    files = r.get("nccl_tests", list, [])
    for i, f in enumerate(files):
        if not isinstance(f, str):
            raise SpecError(f"{where}: key 'fit.nccl_tests[{i}]': expected a file name, got {f!r}"[:300])
    errors = {}
    e = r.optional_sub("errors")
    if e is not None:
        for part in _ERROR_KEYS:
            s = e.optional_sub(part)
            if s is None:
                continue
            stats = {"count": s.get("count", int, maximum=1_000_000)}
            if stats["count"]:
                stats["median"] = s.get("median", float, maximum=1e6)
                stats["mean"] = s.get("mean", float, maximum=1e6)
            s.done()
            errors[part] = stats
        e.done()
    r.done()
    return {"runs": runs, "nccl_tests": list(files), "errors": errors}


def read_profile(path: str | Path) -> Profile:
    """Read a profile file strictly (one-line errors naming the file and key)."""
    p = Path(path)
    return profile_from_mapping(read_document(p), short_path(p))


def apply_profile(cluster: ClusterSpec, profile: Profile | None) -> ClusterSpec:
    """``cluster`` with the profile's values on every node group of its GPU type; an error when the
    cluster has no such GPU or a bandwidth exceeds a link's nominal bandwidth."""
    if profile is None:
        return cluster
    where = profile.source or "profile"
    if all(g.gpu.name != profile.gpu for g in cluster.groups):
        names = ", ".join(sorted({g.gpu.name for g in cluster.groups}))
        raise SpecError(f"{where}: the profile is for {profile.gpu}; cluster {cluster.name} has {names}")
    out = apply_values(cluster, profile.gpu, profile.values)
    for g in out.groups:
        for key, eff in (("nvlink", g.intra_node_efficiency), ("network", g.inter_node_efficiency)):
            if eff > 1 + 1e-9:
                raise SpecError(
                    f"{where}: key 'parameters.{key}_bus_bandwidth_gb_per_s': above the nominal "
                    f"bandwidth of cluster {cluster.name}'s links"
                )
    return out


def write_profile(path: Path, profile: Profile) -> None:
    """Write the profile YAML atomically (``-`` or ``/dev/stdout``: on stdout)."""
    from planner.inputs.files import is_stdout, plan_yaml, write_text_atomic
    from planner.inputs.validation import clean

    if not is_stdout(path) and Path(path).suffix.lower() not in (".yaml", ".yml"):
        raise SpecError(f"{short_path(path)}: profile files end in .yaml or .yml")
    write_text_atomic(Path(path), plan_yaml(clean(profile_to_mapping(profile))))
