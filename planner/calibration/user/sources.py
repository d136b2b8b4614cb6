"""What ``planner calibrate`` reads: measured runs and nccl-tests measurements, each with its origin.

Inputs (any mix; see docs/calibrate.md):

* a runs YAML in the schema of the calibration set (``tests/data/published_runs.yaml``), read by
  :func:`planner.calibration.cases.cases`;
* a Megatron-LM training log joined by a comma to its launch script or arguments file
  (``train.log,launch.sh``). The log lines are the ones ``megatron/training/training.py``
  (``training_log``) prints::

     [2025-08-01 07:19:50] iteration        2/    5000 | consumed samples:          256 | elapsed time per iteration (ms): 12936.1 | throughput per GPU (TFLOP/s/GPU): 118.7 | learning rate: ... | global batch size:   128 | ...

  and ``megatron/training/utils.py`` (``report_memory``)::

    [Rank 0] (after 10 iterations) memory (MB) | allocated: ... | max allocated: ... | reserved: ... | max reserved: ...

  plus ``using world size: 64, ...`` from ``validate_args`` for the GPU count;
* a torchtitan log joined to its job TOML (``train.log,llama3_8b.toml``): the metrics line of
  ``torchtitan/components/metrics.py`` (``MetricsProcessor.log``)::

    step: 10  loss:  7.1234  grad_norm:  1.2345  memory: 61.23GiB(77.31%)  tps: 6,543  tflops: 378.12  mfu: 38.23%

  where ``tps`` is tokens per second per GPU;
* nccl-tests output (``all_reduce_perf`` and friends; NVIDIA/nccl-tests ``src/common.cu``):
  ``# Collective test starting: all_reduce_perf``, one ``#  Rank  0 Group  0 Pid ... on HOST device
  0 ...`` line per GPU, and data rows ``size count type redop root time algbw busbw #wrong time
  algbw busbw #wrong`` (out-of-place then in-place; times in us, bandwidths in GB/s).

Measured iteration times skip the first logged interval (start-up, compilation, allocator warm-up)
and take the median of the rest. A line that looks like a metrics line but cannot be read is an
error naming the file and line.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

from cost_models.constraints import resolve
from cost_models.parallel import ParallelConfig
from planner.inputs.cluster_spec import ClusterSpec
from planner.inputs.documents import YAML_LOADER, read_document
from planner.inputs.errors import PlannerError, SpecError
from planner.inputs.job_spec import JobSpec
from planner.inputs.model_spec import ModelSpec
from planner.inputs.validation import check_flag, limit, printable, read_text_capped, short_path
from planner.profiles.hardware import cluster_template_names, load_cluster

MB = 1024 * 1024
"""Megatron's ``report_memory`` divides bytes by 1024 * 1024 and calls it MB."""


@dataclass(frozen=True, slots=True)
class Run:
    """One measured training run, ready to predict."""

    run_id: str
    origin: str
    """``file:line`` it was read from."""
    model: ModelSpec
    cluster: ClusterSpec
    job: JobSpec
    config: ParallelConfig
    measured_tokens_per_s_per_gpu: float
    measured_from: str
    """How the measured figure was obtained (e.g. 'median of 9 iterations')."""
    measured_peak_memory_bytes: float = 0.0
    """Peak memory per GPU the log reports (0: none); shown beside the prediction, not fitted."""
    memory_metric: str = ""


@dataclass(frozen=True, slots=True)
class NcclPoint:
    """One nccl-tests row: a collective of ``size_bytes`` over ``num_ranks`` GPUs."""

    origin: str
    collective: str
    """all_reduce, all_gather, reduce_scatter, alltoall or sendrecv."""
    size_bytes: float
    """nccl-tests' ``size`` column (the full buffer for all-gather and reduce-scatter)."""
    num_ranks: int
    ranks_per_host: int
    time_s: float
    """Out-of-place time."""


@dataclass(frozen=True, slots=True)
class Sources:
    """Everything read from the inputs."""

    runs: tuple[Run, ...]
    nccl: tuple[NcclPoint, ...]
    skipped: tuple[tuple[str, str], ...]
    """(run id or file, why it is not used)."""


NCCL_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "sendrecv")
"""nccl-tests binaries whose collective the cost model prices (``<name>_perf``)."""


# ------------------------------------------------------------------------------------------------
# Entry point


def read_sources(paths: list[str], cluster: str, nodes: int | None) -> Sources:
    """Read every input against the user's cluster (template name or file); ``nodes``: node count
    of runs whose files do not give their GPU count."""
    check_flag(nodes, "--nodes", "num_nodes", integer=True)
    base = base_cluster(cluster)
    runs: list[Run] = []
    nccl: list[NcclPoint] = []
    skipped: list[tuple[str, str]] = []
    for arg in paths:
        parts = arg.split(",")
        if len(parts) > 2 or not all(parts):
            raise SpecError(
                f"{short_path(arg)}: give a file, or a log and its launch file joined by one comma"
            )
        path = Path(parts[0])
        text = read_text_capped(path, expected="a training log or its launch file")
        kind = sniff(text, path)
        if kind == "nccl":
            _no_pair(parts, "nccl-tests output")
            nccl.extend(parse_nccl_tests(text, str(path)))
        elif kind == "runs":
            _no_pair(parts, "a runs YAML")
            got, skip = read_runs_yaml(path, cluster, base)
            runs.extend(got)
            skipped.extend(skip)
        else:
            if len(parts) != 2:
                what = "launch script or arguments file" if kind == "megatron" else "job TOML"
                raise SpecError(f"{short_path(path)}: a {kind} log needs its {what}: pass {path},FILE")
            runs.append(read_log_run(kind, text, path, Path(parts[1]), cluster, base, nodes))
    if not runs and not nccl:
        raise SpecError("no measured run and no nccl-tests measurement in the inputs")
    return Sources(tuple(runs), tuple(nccl), tuple(skipped))


def _no_pair(parts: list[str], what: str) -> None:
    if len(parts) == 2:
        raise SpecError(f"{short_path(parts[0])}: {what} takes no second file ({parts[1]})")


def base_cluster(name: str) -> ClusterSpec:
    """The user's cluster (one node for a template) to learn its GPU type and node size."""
    spec = load_cluster(name, 1 if name in cluster_template_names() else None)
    if len({g.gpu.name for g in spec.groups}) != 1:
        raise SpecError(f"{name}: calibrate one GPU type at a time; this cluster has several")
    return spec


def _cluster_for(cluster: str, base: ClusterSpec, gpus: int, where: str) -> ClusterSpec:
    """The user's cluster with ``gpus`` GPUs (a template scaled; a file must have that many)."""
    per_node = base.groups[0].gpus_per_node
    if cluster in cluster_template_names():
        if gpus % per_node:
            raise SpecError(f"{where}: {gpus} GPUs is not a whole number of {per_node}-GPU {cluster} nodes")
        return load_cluster(cluster, gpus // per_node)
    if gpus != base.num_gpus:
        raise SpecError(f"{where}: the run used {gpus} GPUs; cluster file {cluster} has {base.num_gpus}")
    return base


def sniff(text: str, path: Path) -> str:
    """What a file is: ``runs``, ``megatron``, ``torchtitan`` or ``nccl``."""
    if "elapsed time per iteration (ms)" in text:
        return "megatron"
    if (
        "Collective test starting" in text
        or "Avg bus bandwidth" in text
        or re.search(r"^#\s+Rank\s+\d+ Group", text, re.M)
    ):
        return "nccl"
    if re.search(r"step:\s*\d+\s.*tps:\s*[\d,]+", _strip_ansi(text)):
        return "torchtitan"
    if path.suffix.lower() in (".yaml", ".yml") and re.search(r"^runs:", text, re.M):
        return "runs"
    raise SpecError(
        f"{short_path(path)}: not a runs YAML (top-level 'runs:'), a Megatron-LM log ('elapsed time per "
        "iteration (ms)'), a torchtitan log ('step: ... tps: ...') or nccl-tests output"
    )


def _strip_ansi(text: str) -> str:
    """torchtitan colours its metrics line with ANSI escapes (``Color`` in torchtitan/tools/utils.py)."""
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


# ------------------------------------------------------------------------------------------------
# Runs YAML (schema of the calibration set)


def read_runs_yaml(path: Path, cluster: str, base: ClusterSpec) -> tuple[list[Run], list[tuple[str, str]]]:
    """Runs of a runs YAML measured on the cluster's GPU type, each on the user's cluster with the
    run's GPU count; the others are listed as skipped with why."""
    from planner.calibration.cases import cases, excluded_reason
    from planner.calibration.record_checks import check_run_records

    where = short_path(path)
    check_run_records(read_document(path), where)
    # The calibration set's own reader checks the file (YAML, the runs list, each run's keys) and
    # words its errors, so a runs file reads the same here as in the validation scripts.
    all_cases = cases(path)
    # Line numbers for the origins (the file is valid YAML by now).
    doc = yaml.compose(read_text_capped(path), Loader=YAML_LOADER)
    runs_node = next((v for k, v in getattr(doc, "value", []) if getattr(k, "value", None) == "runs"), None)
    lines: dict[str, int] = {}
    for node in getattr(runs_node, "value", []):
        rid = next(
            (v.value for k, v in getattr(node, "value", []) if getattr(k, "value", None) == "id"), None
        )
        if isinstance(rid, str):
            lines[rid] = node.start_mark.line + 1
    gpu = base.groups[0].gpu.name
    runs, skipped = [], []
    for c in all_cases:
        origin = f"{where}:{lines.get(c.run_id, 0)}"
        why = c.skip_reason or excluded_reason(c.run_id)
        if not why and c.gpu != gpu:
            why = f"measured on {c.gpu}, not on the cluster's {gpu}"
        if why:
            skipped.append((c.run_id, why))
            continue
        try:
            spec = _cluster_for(cluster, base, c.cluster.num_gpus, origin)
            config = resolve(c.model, spec, c.job, c.config)
        except PlannerError as exc:
            skipped.append((c.run_id, str(exc)))
            continue
        runs.append(
            Run(
                c.run_id,
                origin,
                c.model,
                spec,
                c.job,
                config,
                c.measured_tokens_per_s_per_gpu,
                c.measured_from,
            )
        )
    return runs, skipped


# ------------------------------------------------------------------------------------------------
# Training logs


@dataclass(frozen=True, slots=True)
class LogFigures:
    """What a training log says about its steady state."""

    step_time_s: float
    """Median iteration time (Megatron), or 0 when the log gives tokens/s."""
    tokens_per_s_per_gpu: float
    """Median tokens/s per GPU (torchtitan), or 0."""
    intervals: int
    """Logged intervals the median is over."""
    peak_memory_bytes: float
    memory_metric: str
    global_batch_size: tuple[int, int] | None = None
    """(value, line) of the batch size the log prints, to check against the launch file."""
    world_size: int | None = None


_ITER = re.compile(r"\biteration\s+(\d+)/\s*(\d+)\s*\|")
_ELAPSED = re.compile(r"elapsed time per iteration \(ms\):\s*([0-9]+(?:\.[0-9]*)?)\s*\|")
_GBS = re.compile(r"global batch size:\s*(\d+)\s*\|")
_MEMORY = re.compile(
    r"\[Rank (\d+)\] \(after (\d+) iterations\) memory \(MB\) \| allocated: ([0-9.eE+-]+) \| "
    r"max allocated: ([0-9.eE+-]+) \| reserved: ([0-9.eE+-]+) \| max reserved: ([0-9.eE+-]+)"
)
_WORLD = re.compile(r"using world size: (\d+)")


def parse_megatron_log(text: str, where: str) -> LogFigures:
    """Iteration times, batch size, world size and peak memory of a Megatron-LM log."""
    times: list[float] = []
    gbs = None
    peak = 0.0
    world = None
    for n, line in enumerate(text.splitlines(), 1):
        if "elapsed time per iteration (ms)" in line:
            it, el = _ITER.search(line), _ELAPSED.search(line)
            if not it or not el:
                raise SpecError(
                    f"{where}:{n}: iteration line without a readable 'iteration N/M |' and "
                    "'elapsed time per iteration (ms): X |' (Megatron-LM training_log format)"
                )
            ms = _log_number(el.group(1), f"{where}:{n}", "elapsed time per iteration (ms)", MAX_LOGGED_MS)
            times.append(ms / 1e3)
            g = _GBS.search(line)
            if g and gbs is None:
                gbs = (
                    int(
                        _log_number(
                            g.group(1), f"{where}:{n}", "global batch size", limit("global_batch_size")
                        )
                    ),
                    n,
                )
        elif "memory (MB)" in line and "[Rank" in line:
            m = _MEMORY.search(line)
            if not m:
                raise SpecError(
                    f"{where}:{n}: memory line not in report_memory's format "
                    "'[Rank R] (after N iterations) memory (MB) | allocated: .. | max allocated: .. | ...'"
                )
            peak = max(peak, _log_number(m.group(4), f"{where}:{n}", "max allocated (MB)", MAX_LOGGED_MB))
        elif world is None and (w := _WORLD.search(line)):
            world = int(_log_number(w.group(1), f"{where}:{n}", "world size", limit("tp")))
    if not times:
        raise SpecError(f"{where}: no Megatron-LM iteration line ('elapsed time per iteration (ms)') found")
    peak *= MB
    steady = times[1:] or times
    return LogFigures(
        statistics.median(steady), 0.0, len(steady), peak, "max allocated" if peak else "", gbs, world
    )


MAX_LOGGED_MB = limit("memory_gib") * 1024
"""Largest peak memory a log line may report, MB (Megatron's MiB): a GPU's largest memory
(planner.inputs.validation.LIMITS); a 40-digit figure is no measurement."""

MAX_LOGGED_MS = 1e9
"""Longest iteration a log line may report, ms (11.6 days; iterations take 0.1-100 s)."""

MAX_LOGGED_TPS = 1e8
"""Most tokens/s per GPU a log line may report (a 100M-parameter model on a B300 runs about 1e6)."""


def _log_number(text: str, where: str, what: str, largest: float) -> float:
    """A figure of a log line: a positive, finite number of at most ``largest`` (one-line error
    naming the file and line otherwise)."""
    try:
        value = float(text)
    except ValueError:
        raise SpecError(f"{where}: {what} {printable(text)!r} is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise SpecError(f"{where}: {what} {printable(text)} is not a positive number")
    if value > largest:
        raise SpecError(f"{where}: {what} {value:.4g} is above the largest a real run reports, {largest:g}")
    return value


_STEP = re.compile(r"\bstep:\s*(\d+)\s")
_TPS = re.compile(r"\btps:\s*([0-9][0-9,]*)")
_TITAN_MEM = re.compile(r"\bmemory:\s*([0-9.]+)GiB")


def parse_torchtitan_log(text: str, where: str) -> LogFigures:
    """Tokens/s per GPU and peak reserved memory of a torchtitan log."""
    tps: list[float] = []
    peak = 0.0
    for n, raw in enumerate(text.splitlines(), 1):
        line = _strip_ansi(raw)
        if "tps:" not in line or "step:" not in line or "validate step" in line:
            continue
        s, t, m = _STEP.search(line), _TPS.search(line), _TITAN_MEM.search(line)
        if not s or not t:
            raise SpecError(
                f"{where}:{n}: metrics line without a readable 'step: N' and 'tps: X' (torchtitan format)"
            )
        value = _log_number(t.group(1).replace(",", ""), f"{where}:{n}", "tps", MAX_LOGGED_TPS)
        if int(s.group(1)) > 1:  # step 1 includes compilation and warm-up
            tps.append(value)
        if m:
            gib = _log_number(m.group(1), f"{where}:{n}", "memory (GiB)", limit("memory_gib"))
            peak = max(peak, gib * 2**30)
    if not tps:
        raise SpecError(f"{where}: no torchtitan metrics line after step 1 ('step: N ... tps: X')")
    steady = tps[1:] if len(tps) > 2 else tps
    return LogFigures(0.0, statistics.median(steady), len(steady), peak, "max reserved" if peak else "")


def read_log_run(
    kind: str, text: str, path: Path, config_path: Path, cluster: str, base: ClusterSpec, nodes: int | None
) -> Run:
    """A run from a training log and its launch file, on the user's cluster."""
    where = short_path(path)
    figures = parse_megatron_log(text, where) if kind == "megatron" else parse_torchtitan_log(text, where)
    per_node = base.groups[0].gpus_per_node
    gpus = figures.world_size or (nodes * per_node if nodes else None)
    if gpus is None:
        if cluster in cluster_template_names():
            raise SpecError(f"{where}: the log does not say how many GPUs ran; pass --nodes N")
        gpus = base.num_gpus
    spec = _cluster_for(cluster, base, gpus, where)
    if kind == "megatron":
        from planner.launch.megatron.importer import parse_megatron

        imported = parse_megatron(
            read_text_capped(config_path, expected="a shell script"),
            short_path(config_path),
            gpus,
            path=config_path,
        )
        model, job, config = imported.model, imported.job, imported.config
    else:
        from planner.launch.torchtitan.importer import read_torchtitan

        imported = read_torchtitan(config_path, gpus)
        model, job, config = imported.model, imported.job, imported.config
    if figures.global_batch_size and figures.global_batch_size[0] != job.global_batch_size:
        value, line = figures.global_batch_size
        raise SpecError(
            f"{where}:{line}: global batch size {value} in the log, {job.global_batch_size} in "
            f"{short_path(config_path)}: is this the log of that launch?"
        )
    try:
        config = resolve(model, spec, job, config)
    except PlannerError as exc:
        raise SpecError(f"{short_path(config_path)}: {exc}") from None
    if figures.step_time_s:
        measured = job.tokens_per_step / (figures.step_time_s * spec.num_gpus)
        how = f"median iteration time of {figures.intervals} logged intervals"
    else:
        measured = figures.tokens_per_s_per_gpu
        how = f"median tps of {figures.intervals} logged steps"
    return Run(
        f"{path.stem}",
        f"{where}:1",
        replace(model, name=model.name),
        spec,
        job,
        config,
        measured,
        how,
        figures.peak_memory_bytes,
        figures.memory_metric,
    )


# ------------------------------------------------------------------------------------------------
# nccl-tests


_RANK = re.compile(r"^#\s+Rank\s+(\d+)\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(\S+)\s+device")
_TEST = re.compile(r"Collective test starting:\s*(\S+)")


def parse_nccl_tests(text: str, where: str) -> list[NcclPoint]:
    """The rows of one nccl-tests run (one binary, one set of ranks)."""
    hosts: dict[int, str] = {}
    test = None
    rows: list[tuple[int, list[str]]] = []
    for n, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s:
            continue
        if s.startswith("#"):
            if m := _RANK.match(s):
                hosts[int(m.group(1))] = m.group(2)
            elif m := _TEST.search(s):
                test = m.group(1)
            continue
        tokens = s.split()
        if tokens[0].isdigit() and len(tokens) >= 2 and tokens[1].isdigit():
            rows.append((n, tokens))
    name = test or next((f"{c}_perf" for c in NCCL_COLLECTIVES if f"{c}_perf" in Path(where).name), None)
    if name is None:
        raise SpecError(
            f"{where}: cannot tell which nccl-tests binary ran (no '# Collective test starting' line); "
            "name the file after it, e.g. all_reduce_perf.txt"
        )
    collective = name.removesuffix("_perf")
    if collective not in NCCL_COLLECTIVES:
        raise SpecError(
            f"{where}: {name}: the cost model prices {', '.join(c + '_perf' for c in NCCL_COLLECTIVES)}"
        )
    if not hosts:
        raise SpecError(
            f"{where}: no '#  Rank N Group G Pid P on HOST device D' lines: cannot tell how many GPUs ran"
        )
    if not rows:
        raise SpecError(f"{where}: no data rows (size count type redop root time algbw busbw ...)")
    per_host: dict[str, int] = {}
    for h in hosts.values():
        per_host[h] = per_host.get(h, 0) + 1
    if len(set(per_host.values())) != 1:
        raise SpecError(
            f"{where}: hosts run different numbers of ranks ({per_host}); calibrate with equal ranks per host"
        )
    k = next(iter(per_host.values()))
    out = []
    for n, tokens in rows:
        # Columns: size count type redop root time algbw busbw #wrong ... (root since nccl-tests 2.0.0)
        t_index = 5 if len(tokens) > 5 and re.fullmatch(r"-?\d+", tokens[4]) else 4
        try:
            size, time_us = float(tokens[0]), float(tokens[t_index])
            float(tokens[t_index + 2])
        except (ValueError, IndexError):
            raise SpecError(
                f"{where}:{n}: nccl-tests row not in 'size count type redop root time algbw busbw #wrong ...' form"
            ) from None
        if time_us <= 0 or size <= 0:
            continue
        out.append(NcclPoint(f"{where}:{n}", collective, size, len(hosts), k, time_us * 1e-6))
    return out
