"""Fuzz suite (issues 16 and 55): every input kind, mutated by hypothesis, through the CLI in-process.

Each case must: exit 0, 1, 2 or 3; raise no exception out of ``main`` (a traceback); finish within
:data:`HANG_S` seconds of CPU; print exactly one line on stderr when it fails; when it succeeds
with ``--json``, print strict JSON (no NaN or infinity) without round-off negatives and with a
plausible step time; leave every special file it was given as a target as it was; and refuse every
input no real system has (an extreme physical value, an empty value, a zero count).

CI runs :data:`EXAMPLES` cases per input kind (derandomized, a minute or so in all; the issue-55
classes :data:`FEW` each). ``scripts/fuzz.py`` runs thousands and prints the counts per outcome;
``PLANNER_FUZZ_EXAMPLES=300 python -m pytest -q tests/test_fuzz.py`` runs more with random seeds;
with ``PLANNER_FUZZ_REPORT=file.jsonl`` every command appends one line (kind, command, exit code,
seconds, outcome) for the figures in docs/reliability.md, and ``PLANNER_FUZZ_KEEP_GOING=1`` records
a failed case instead of stopping at it.
"""

from __future__ import annotations

import io
import json
import math
import os
import signal
import stat
import tempfile
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz_strategies import (
    EMPTY_AND_ZERO,
    EXTREMES,
    FLAG_VALUES,
    LAUNCH_SHAPE,
    PHYSICAL_FIELDS,
    SPECIAL_KINDS,
    alias_bomb,
    is_empty_value,
    launch_text,
    megatron_text,
    must_refuse,
    mutated,
    seeds,
)

EXAMPLES = int(os.environ.get("PLANNER_FUZZ_EXAMPLES", "25"))
FEW = int(os.environ.get("PLANNER_FUZZ_EXAMPLES", "6"))
"""Cases per issue-55 class in the default run (each writes files or runs a search: slower)."""
REPORT = os.environ.get("PLANNER_FUZZ_REPORT")
KEEP_GOING = os.environ.get("PLANNER_FUZZ_KEEP_GOING") == "1"
HANG_S = 60
"""A case using more than this many seconds of CPU is a hang (issues 16, 55: 0 hangs over 60 s)."""

_SETTINGS = dict(
    deadline=None,
    derandomize="PLANNER_FUZZ_EXAMPLES" not in os.environ,
    database=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
        HealthCheck.filter_too_much,
    ],
)
FUZZ = settings(max_examples=EXAMPLES, **_SETTINGS)
FUZZ_FEW = settings(max_examples=FEW, **_SETTINGS)
SMALL = ["-m", "gpt-1.7b", "-b", "16", "-s", "1024"]
CALIBRATE_DATA = Path(__file__).parent / "data" / "calibrate"
CALIBRATE_RUN = (
    f"{CALIBRATE_DATA / 'megatron_llama3_8b.log'},{CALIBRATE_DATA / 'megatron_llama3_8b.args.txt'}"
)


class Hang(Exception):
    pass


def _cpu_limit(signum, frame):
    raise Hang(f"more than {HANG_S} s of CPU")


def run(kind: str, *args: str, refuse: bool = False, targets: tuple = ()) -> tuple[int, str, str]:
    """One case through ``planner.cli.main``; asserts the contract and returns (code, stdout,
    stderr). ``refuse``: the input is one no real system has, so exit 0 is "nonsense accepted";
    ``targets``: (path, kind) of special files the command was given, each must be left as it was."""
    from planner.cli import main

    out, err = io.StringIO(), io.StringIO()
    old = signal.signal(signal.SIGPROF, _cpu_limit)
    signal.setitimer(signal.ITIMER_PROF, HANG_S)  # process CPU time, not wall time
    started = time.monotonic()
    outcome, code = "ok", None
    try:
        with redirect_stdout(out), redirect_stderr(err):
            code = main(list(args))
    except Hang:
        outcome = "hang"
    except BaseException as exc:  # anything leaving main is a traceback for the user
        outcome = f"traceback {type(exc).__name__}: {str(exc)[:200]}"
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, old)
    seconds = time.monotonic() - started
    stdout, stderr = out.getvalue(), err.getvalue()
    if outcome == "ok":
        outcome = _judge(code, stdout, stderr, "--json" in args)
    if outcome == "ok":
        replaced = [str(p) for p, k in targets if not same_kind(p, k)]
        if replaced:
            outcome = f"special file replaced: {replaced[0]}"
        elif refuse and code == 0:
            outcome = "nonsense accepted"
    if REPORT:
        with open(REPORT, "a") as fh:
            fh.write(
                json.dumps(
                    {"kind": kind, "args": args[:3], "code": code, "s": round(seconds, 3), "outcome": outcome}
                    | ({"stderr": stderr[-500:]} if outcome != "ok" else {})
                )
                + "\n"
            )
    if not KEEP_GOING:
        assert outcome == "ok", (outcome, args, stderr[-2000:])
    return code, stdout, stderr


def _judge(code, stdout: str, stderr: str, as_json: bool) -> str:
    if code not in (0, 1, 2, 3):
        return f"wrong exit code {code}"
    if "Traceback" in stderr:
        return "traceback on stderr"
    if "not a finite number" in stderr:
        return "non-finite result"
    if code != 0 and stderr and len(stderr.strip().splitlines()) != 1:
        return f"multi-line error ({len(stderr.strip().splitlines())} lines)"
    if code in (0, 1) and as_json and stdout.strip():
        try:
            data = json.loads(stdout, parse_constant=_refuse)
        except ValueError as exc:
            return f"invalid JSON: {exc}"
        bad = _bad_number(data)
        if bad:
            return f"non-finite or round-off output {bad}"
        if code == 0:
            odd = _implausible(data)
            if odd:
                return f"nonsense accepted: {odd}"
    return "ok"


def _implausible(data, path="") -> str:
    """A step time no real training step has (under a microsecond or over 100 days)."""
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    for k, v in items:
        if k == "step_time_s" and isinstance(v, (int, float)) and v and not (1e-6 < v < 1e7):
            return f"{path}.{k}={v}"
        odd = _implausible(v, f"{path}.{k}")
        if odd:
            return odd
    return ""


def _refuse(name: str):
    raise ValueError(f"non-standard constant {name}")


def _bad_number(data, path="") -> str:
    if isinstance(data, float):
        return "" if math.isfinite(data) and not (-1e-9 < data < 0) else f"{path}={data}"
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    for k, v in items:
        bad = _bad_number(v, f"{path}.{k}")
        if bad:
            return bad
    return ""


def make_special(path: Path, kind: str) -> str:
    """Make a target of ``kind`` (:data:`tests.fuzz_strategies.SPECIAL_KINDS`) at ``path``; a
    character device (the null device's numbers, made here, never a system path) only where mknod
    is permitted, else a FIFO. Returns the kind made."""
    import socket

    if kind == "char-device":
        try:
            os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 3))
            return kind
        except OSError:
            kind = "fifo"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        try:
            sock.bind(str(path))
        except OSError:  # a path too long for AF_UNIX
            sock.close()
            os.mkfifo(path)
            return "fifo"
        sock.close()
    elif kind.startswith("link-to-"):
        real = path.with_name("real-" + path.name)
        make_special(real, kind.removeprefix("link-to-"))
        path.symlink_to(real)
    return kind


def same_kind(path: Path, kind: str) -> bool:
    """Whether ``path`` is still the special file :func:`make_special` made."""
    tests = {
        "fifo": stat.S_ISFIFO,
        "directory": stat.S_ISDIR,
        "socket": stat.S_ISSOCK,
        "char-device": stat.S_ISCHR,
    }
    try:
        if kind.startswith("link-to-"):
            return stat.S_ISLNK(os.lstat(path).st_mode) and tests[kind.removeprefix("link-to-")](
                os.stat(path).st_mode
            )
        return tests[kind](os.lstat(path).st_mode)
    except OSError:
        return False


def _write(tmp: Path, name: str, doc) -> Path:
    p = tmp / name
    if name.endswith(".json"):
        p.write_text(json.dumps(doc))
    else:
        p.write_text(yaml.safe_dump(doc, allow_unicode=True))
    return p


def _doc(kind: str):
    docs = seeds()[kind]
    return st.sampled_from(sorted(docs)).flatmap(lambda name: mutated(docs[name]))


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz")


@pytest.fixture(scope="module")
def plan_doc(fuzz_dir):
    """A real plan file of a small model (the seed of the plan mutations)."""
    from planner.cli import main

    path = fuzz_dir / "seed-plan.yaml"
    args = ["search", *SMALL, "-c", "dgx-h100", "-n", "1", "--top", "1", "--out", str(path), "--json"]
    with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
        assert main(args) == 0
    return yaml.safe_load(path.read_text())


@FUZZ
@given(doc=_doc("model"))
def test_fuzz_model_files(fuzz_dir, doc):
    p = _write(fuzz_dir, "model.yaml", doc)
    run("model", "models", "show", str(p), "--json")
    run("model", "estimate", "-m", str(p), "-c", "dgx-h100", "-n", "1", "-b", "8", "-s", "1024", "--json")


@FUZZ
@given(doc=_doc("hf"))
def test_fuzz_hf_configs(fuzz_dir, doc):
    p = _write(fuzz_dir, "config.json", doc)
    run("hf", "models", "show", str(p), "--json")
    run("hf", "estimate", "-m", str(p), "-c", "dgx-h100", "-n", "1", "-b", "8", "-s", "1024", "--json")


@FUZZ
@given(doc=_doc("graph_model"))
def test_fuzz_graph_models(fuzz_dir, doc):
    p = _write(fuzz_dir, "graph.yaml", doc)
    run("graph_model", "models", "show", str(p), "--json")


@FUZZ
@given(doc=_doc("gpu"))
def test_fuzz_gpu_files(fuzz_dir, doc):
    gpu = _write(fuzz_dir, "gpu.yaml", doc)
    cluster = {
        "schema_version": 1,
        "kind": "cluster",
        "groups": [{"template": "dgx-h100", "gpu": str(gpu), "num_nodes": 1}],
    }
    c = _write(fuzz_dir, "gpu-cluster.yaml", cluster)
    run("gpu", "estimate", *SMALL, "-c", str(c), "--tp", "2", "--pp", "2", "--json")


@FUZZ
@given(doc=_doc("cluster"))
def test_fuzz_cluster_files(fuzz_dir, doc):
    c = _write(fuzz_dir, "cluster.yaml", doc)
    run("cluster", "estimate", *SMALL, "-c", str(c), "--json")


@FUZZ
@given(doc=_doc("fill_job"))
def test_fuzz_fill_jobs(fuzz_dir, doc):
    f = _write(fuzz_dir, "fill.yaml", doc)
    run(
        "fill_job",
        "bubbles",
        *SMALL,
        "-c",
        "dgx-h100",
        "-n",
        "1",
        "--pp",
        "2",
        "--fill-job",
        str(f),
        "--json",
    )


@FUZZ
@given(data=st.data())
def test_fuzz_plan_files(fuzz_dir, plan_doc, data):
    doc = data.draw(mutated(plan_doc))
    suffix = data.draw(st.sampled_from([".yaml", ".json"]))
    p = _write(fuzz_dir, f"plan{suffix}", doc)
    run("plan", "estimate", "--plan", str(p), "--json")
    run("plan", "bubbles", "--plan", str(p), "--json")
    run("plan", "check", str(p), "-c", "dgx-h100", "-n", "1", "--json")


@FUZZ
@given(text=megatron_text())
def test_fuzz_megatron_args(fuzz_dir, text):
    p = fuzz_dir / "megatron_args.txt"
    p.write_text(text)
    run("megatron", "check", str(p), "-c", "dgx-h100", "-n", "1", "--json")


MODEL_ARGS_SEED = (
    Path(__file__).parent / "data" / "megatron" / "ci_11debfa7" / "moe_memory_speed_model_config.yaml"
)


@FUZZ
@given(data=st.data())
def test_fuzz_model_args_configs(fuzz_dir, data):
    """Megatron ``MODEL_ARGS`` model configs (planner.launch.megatron.model_args): Megatron-LM's MoE
    memory test config with random edits, checked as a launch."""
    doc = data.draw(mutated(yaml.safe_load(MODEL_ARGS_SEED.read_text())))
    p = _write(fuzz_dir, "model_config.yaml", doc)
    run("model_args", "check", str(p), "-c", "dgx-h100", "-n", "1", "--vocab-size", "50257", "--json")


@FUZZ
@given(text=launch_text())
def test_fuzz_launch_scripts(fuzz_dir, text):
    """Launch scripts built from the shell readers' constructs (sbatch and its options, ``--wrap``,
    here-documents, a script run by its path, env / srun / mpirun, function statuses, patterns),
    beside a job script they may run."""
    d = fuzz_dir / "launch"
    d.mkdir(exist_ok=True)
    job = d / "job.sh"
    job.write_text(
        "#!/bin/bash\n#SBATCH --export=ALL\nexport CUDA_DEVICE_MAX_CONNECTIONS=1\n"
        f"torchrun pretrain_gpt.py {LAUNCH_SHAPE} --tensor-model-parallel-size ${{1:-1}}\n"
    )
    job.chmod(0o755)
    p = d / "launch.sh"
    p.write_text(text)
    run("launch", "check", str(p), "-c", "dgx-h100", "-n", "1", "--json")
    run("launch", "check", str(p), "-c", "dgx-h100", "--json")  # the node count from the launch, or exit 2


@FUZZ
@given(
    flags=st.lists(
        st.sampled_from(
            [
                "--tp",
                "--pp",
                "--cp",
                "--vpp",
                "--micro-batch-size",
                "-b",
                "-s",
                "-n",
                "--recompute-num-layers",
            ]
        ),
        min_size=1,
        max_size=3,
        unique=True,
    ),
    value=st.sampled_from(["0", "-1", "3", "7", "2147483648", "99999999999999999999", "nan", "x", "1e3"]),
)
def test_fuzz_command_line_numbers(flags, value):
    args = {"-m": "gpt-1.7b", "-c": "dgx-h100", "-n": "1", "-b": "16", "-s": "1024"}
    for f in flags:
        args[f] = value
    run("flags", "estimate", *[x for kv in args.items() for x in kv], "--json")


# ------------------------------------------------------------------------------------------------
# Issue 55: alias bombs, special-file targets, extreme finite values, empty and zero values


@pytest.fixture(scope="module")
def seed_plan(fuzz_dir, plan_doc) -> Path:
    """The seed plan as a file (timeline, report, goodput and export read it)."""
    return _write(fuzz_dir, "plan-file.yaml", plan_doc)


@pytest.fixture(scope="module")
def profile_doc(fuzz_dir):
    """A calibrated profile (the seed of the profile mutations)."""
    from planner.cli import main

    path = fuzz_dir / "seed-profile.yaml"
    with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
        assert main(["calibrate", CALIBRATE_RUN, "-c", "dgx-h100", "-n", "4", "--out", str(path)]) == 0
    return yaml.safe_load(path.read_text())


def _case_dir(fuzz_dir: Path) -> Path:
    return Path(tempfile.mkdtemp(dir=fuzz_dir))


BOMB_COMMANDS = {
    "model": [["models", "show", "{f}"], ["estimate", "-m", "{f}", "-c", "dgx-h100", "-n", "1", "-b", "8", "-s", "1024"]],
    "plan": [["estimate", "--plan", "{f}"], ["report", "{f}", "--html", "{d}/r.html"], ["goodput", "{f}"]],
    "gpu": [["estimate", *SMALL, "-c", "{cluster}"]],
    "cluster": [["estimate", *SMALL, "-c", "{f}"]],
    "fill_job": [["bubbles", *SMALL, "-c", "dgx-h100", "-n", "1", "--pp", "2", "--fill-job", "{f}"]],
    "profile": [["estimate", *SMALL, "-c", "dgx-h100", "-n", "1", "--profile", "{f}"], ["calibrate", "{f}", "-c", "dgx-h100", "-n", "1"]],
    "model_args": [["check", "{f}", "-c", "dgx-h100", "-n", "1"]],
}  # fmt: skip


@FUZZ_FEW
@given(bomb=alias_bomb())
def test_fuzz_alias_bombs(fuzz_dir, bomb):
    """A YAML of nested aliases (up to 12**12 values from a few hundred bytes) in every command
    reading YAML: refused at once, never a hang."""
    kind, text = bomb
    d = _case_dir(fuzz_dir)
    f = d / "bomb.yaml"
    f.write_text(text)
    cluster = _write(d, "cluster.yaml", {"schema_version": 1, "kind": "cluster",
                                         "groups": [{"template": "dgx-h100", "gpu": str(f), "num_nodes": 1}]})  # fmt: skip
    for command in BOMB_COMMANDS[kind]:
        args = [
            a.replace("{f}", str(f)).replace("{d}", str(d)).replace("{cluster}", str(cluster))
            for a in command
        ]
        run("alias_bomb", *args, "--json")


WRITERS = {
    "timeline --svg": (["timeline", "{plan}", "--svg", "{t}"], "t.svg"),
    "timeline --trace": (["timeline", "{plan}", "--trace", "{t}"], "t.json"),
    "report --html": (["report", "{plan}", "--html", "{t}"], "r.html"),
    "search --out": (["search", *SMALL, "-c", "dgx-h100", "-n", "1", "--top", "1", "--out", "{t}"], "p.yaml"),
    "search --csv": (["search", *SMALL, "-c", "dgx-h100", "-n", "1", "--top", "1", "--csv", "{t}"], "c.csv"),
    "export megatron": (["export", "megatron", "{plan}", "--out", "{d}", "--force"], "megatron_args.txt"),
    "calibrate --out": (["calibrate", CALIBRATE_RUN, "-c", "dgx-h100", "-n", "4", "--out", "{t}"], "prof.yaml"),
}  # fmt: skip
"""Writers and their target file names (an export's target is a file it writes in ``{d}``)."""


@FUZZ_FEW
@given(writer=st.sampled_from(sorted(WRITERS)), kind=st.sampled_from(SPECIAL_KINDS))
def test_fuzz_special_file_targets(fuzz_dir, seed_plan, writer, kind):
    """A writer given a FIFO, a directory, a socket, a character device or a link to one: one-line
    refusal, the target left as it was (never "special file replaced")."""
    d = _case_dir(fuzz_dir)
    command, name = WRITERS[writer]
    target = d / name
    made = make_special(target, kind)
    args = [
        a.replace("{plan}", str(seed_plan)).replace("{t}", str(target)).replace("{d}", str(d))
        for a in command
    ]
    run("special_target", *args, refuse=True, targets=((target, made),))


def _set(doc, path: tuple, value):
    for k in path[:-1]:
        doc = doc[k]
    doc[path[-1]] = value


@FUZZ_FEW
@given(data=st.data())
def test_fuzz_extreme_physical_values(fuzz_dir, profile_doc, data):
    """A physical quantity of a GPU, cluster or profile file set to an extreme finite value
    (5e-324 ... 1.8e308, 2**63, 10**40, 0, -0): refused (or, zero, accepted where it means none),
    never a traceback, never a step time of 7.5e302 s."""
    kind = data.draw(st.sampled_from(sorted(PHYSICAL_FIELDS)))
    path, zero_ok = data.draw(st.sampled_from(PHYSICAL_FIELDS[kind]))
    value = data.draw(st.sampled_from(EXTREMES))
    d = _case_dir(fuzz_dir)
    if kind == "gpu":
        doc = json.loads(json.dumps(seeds()["gpu"]["h100-sxm5-80gb"]))
        _set(doc, path, value)
        gpu = _write(d, "gpu.yaml", doc)
        cluster = {"schema_version": 1, "kind": "cluster",
                   "groups": [{"template": "dgx-h100", "gpu": str(gpu), "num_nodes": 1}]}  # fmt: skip
        args = ["estimate", *SMALL, "-c", str(_write(d, "cluster.yaml", cluster)), "--tp", "2"]
    elif kind == "cluster":
        doc = {"schema_version": 1, "kind": "cluster", "groups": [{"template": "dgx-h100", "num_nodes": 2}]}
        _set(doc, path, value)
        args = ["estimate", *SMALL, "-c", str(_write(d, "cluster.yaml", doc)), "--tp", "8"]
    else:
        doc = json.loads(json.dumps(profile_doc))
        _set(doc, path, value)
        args = [
            "estimate",
            *SMALL,
            "-c",
            "dgx-h100",
            "-n",
            "2",
            "--tp",
            "8",
            "--profile",
            str(_write(d, "p.yaml", doc)),
        ]
    run("extreme_value", *args, "--json", refuse=must_refuse(path, zero_ok, value))


@FUZZ_FEW
@given(data=st.data())
def test_fuzz_empty_and_zero_values(fuzz_dir, seed_plan, data):
    """Every command's flags given an empty value, an empty list item, 0 or -0: refused (zero only
    where the flag documents a meaning for it), never taken as "not given"."""
    command = data.draw(st.sampled_from(sorted(FLAG_VALUES)))
    flag, zero_refused = data.draw(st.sampled_from(FLAG_VALUES[command]))
    value = data.draw(st.sampled_from(EMPTY_AND_ZERO))
    d = _case_dir(fuzz_dir)
    base = {
        "estimate": ["estimate", *SMALL, "-c", "dgx-h100", "-n", "1", "--json"],
        "timeline": ["timeline", str(seed_plan), "--json"],
        "goodput": ["goodput", str(seed_plan), "--json"],
        "search": ["search", *SMALL, "-c", "dgx-h100", "-n", "1", "--top", "1", "--json"],
        "sweep": ["sweep", *SMALL, "-c", "dgx-h100", "-n", "1", "-j", "1", "--json"],
        "export": ["export", "megatron", str(seed_plan), "--out", str(d / "launch"), "--json"],
        "calibrate": ["calibrate", CALIBRATE_RUN, "-c", "dgx-h100", "-n", "4", "--json"],
    }[command]
    zero = value.strip() in ("0", "-0", "0.0", "-0.0")
    refuse = is_empty_value(value) or (zero and zero_refused)
    cwd = os.getcwd()
    os.chdir(d)  # a path flag given "0" writes a file named 0: here, not in the checkout
    try:
        run("empty_zero", *base, flag, value, refuse=refuse)
    finally:
        os.chdir(cwd)
