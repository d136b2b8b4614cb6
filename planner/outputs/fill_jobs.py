"""PipeFill's fill jobs priced by the cost model (Arfeen et al., "PipeFill: Using GPUs During Bubbles
in Pipeline-parallel LLM Training", arXiv:2410.07192, MLSys 2025).

PipeFill "fills pipeline bubbles with execution of other pending jobs" and "carefully fits fill job
work to measured bubble durations and GPU memory availability" (the abstract); its execution-plan
step partitions a fill job's computation graph so that pieces fit a bubble, with memory knobs such
as activation checkpointing and offloading the fill job's state to host memory
(../shared/reference/algorithms.md Sec. 3). planner's model of that, for a fill job named by its
model (``kind: fill_job`` with ``model:``, :func:`load_model_fill_job`):

* **Work, in pieces.** An *inference* job is a forward pass of ``batch_size`` sequences of
  ``seq_length`` tokens, one piece per layer (embedding, each decoder layer, the output layer). A
  *training* job is one step of a micro-batch of that size with every layer recomputed in its
  backward (activation checkpointing: only layer inputs stay between forward and backward): the
  forward pieces, then each layer's recompute + backward in reverse, then the Adam step. Pieces run
  in order; a task (a batch, a step) spans as many windows as it needs.
* **Unit times from the cost model** on the stage's own GPU type, tp 1: each piece's time is the
  layer table's forward (F), or F + B + W for a recomputed backward (``cost_models.layers``), and the
  Adam step is :func:`cost_models.data_parallel.adam_bytes_per_param` over the HBM bandwidth, as the
  main job's optimizer step is priced.
* **Memory.** A piece needs its layer's activations while it runs (the layer table's kept
  activations, an upper bound of the forward's working set). The job's state (inference: the 16-bit
  weights; training: weights, gradients, master weights and moments, and the layer inputs kept for
  the backward) stays *resident* if it fits beside the main job at the stage's peak; otherwise an
  inference job runs *offloaded*: each piece first copies its layer's weights from host memory
  over the GPU's host link (``host_link_gb_per_s``; no overlap with compute assumed) into a
  two-layer buffer, and the hidden state (``b x s x h`` 16-bit values) goes to host and back at
  every switch. A training job's state does not stream; it runs only where it stays resident.
* **Context switch.** Every window used pays the budget's ``switch_overhead_s`` (planner's
  assumption, :data:`planner.outputs.bubbles.DEFAULT_SWITCH_OVERHEAD_S`, an option), plus the
  hidden-state copies when offloaded.
* **Main-job slowdown** is computed, as for measured units (:func:`planner.outputs.bubbles.fit_fill_job`):
  the time fill work would overrun its windows if they were ``duration_error`` shorter than
  predicted, over the iteration; with ``max_slowdown`` None nothing is removed to meet a cap. With
  ``run_time_error`` the work runs as PipeFill's executor runs it, fitted to the bubbles it
  measures (:func:`run_time_limits`): a piece that would outlast its window waits for the next, so
  an error in the predicted windows costs fill work, not main-job time.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from cost_models.data_parallel import adam_bytes_per_param
from cost_models.memory import optimizer_state_bytes
from cost_models.parallel import ParallelConfig
from cost_models.stage_terms import table_for
from planner.inputs.cluster_spec import GPUSpec, NodeGroup
from planner.inputs.documents import Reader
from planner.inputs.errors import SpecError
from planner.inputs.job_spec import DTYPE_BYTES
from planner.inputs.jobs import make_job
from planner.inputs.model_spec import ModelSpec
from planner.inputs.models import load_model

FILL_MODES = ("inference", "training")


@dataclass(frozen=True, slots=True)
class ModelFillJob:
    """A fill job given by its model: PipeFill's inference or training job, priced per GPU type."""

    name: str
    model: ModelSpec
    mode: str
    """``inference`` (forward of a batch) or ``training`` (a step of a micro-batch, recomputed)."""
    batch_size: int
    """Sequences per task (an inference batch, a training micro-batch)."""
    seq_length: int
    min_units: int = 1
    """Fewest pieces worth switching in for."""


@dataclass(frozen=True, slots=True)
class Piece:
    """One piece of a task on one GPU type."""

    kind: str
    time_s: float
    memory_bytes: float
    """Working set while it runs (beyond the job's state)."""
    weight_bytes: float = 0.0
    """The layer's 16-bit weights (what an offloaded piece copies in first)."""


@dataclass(frozen=True, slots=True)
class PricedJob:
    """A model fill job's task on one GPU type."""

    pieces: tuple[Piece, ...]
    state_bytes: float
    """What stays on the GPU between pieces when resident."""
    hidden_bytes: float
    """The activations carried from one piece to the next (b x s x h, 16-bit)."""
    host_link_bytes_per_s: float
    offloadable: bool
    """Whether the job can run with its weights in host memory (inference)."""

    @property
    def task_time_s(self) -> float:
        return sum(p.time_s for p in self.pieces)

    @property
    def buffer_bytes(self) -> float:
        """GPU memory an offloaded job holds while it runs: two layers' weights and the hidden state."""
        return 2 * max((p.weight_bytes for p in self.pieces), default=0.0) + self.hidden_bytes

    def transfer_s(self, piece: Piece) -> float:
        """Copy of ``piece``'s weights from host memory (offloaded runs)."""
        return piece.weight_bytes / self.host_link_bytes_per_s if self.host_link_bytes_per_s else float("inf")


def load_model_fill_job(r: Reader) -> ModelFillJob:
    """The model form of a fill-job file (``model``, ``mode``, ``batch_size``, ``seq_length``,
    optional ``min_units``); ``r`` has read the header. Errors name the file and key."""
    model_name = r.get("model", str)
    try:
        model = load_model(model_name)
    except SpecError as exc:
        raise SpecError(f"{r.where}: key 'model': {exc}") from None
    mode = r.get("mode", str, "inference")
    if mode not in FILL_MODES:
        raise SpecError(
            f"{r.where}: key 'mode': {mode!r} is not allowed; allowed values: {', '.join(FILL_MODES)}"
        )
    job = ModelFillJob(
        name=r.get("name", str),
        model=model,
        mode=mode,
        batch_size=r.get("batch_size", int, positive=True),
        seq_length=r.get("seq_length", int, positive=True),
        min_units=r.get("min_units", int, 1, positive=True),
    )
    make_job(global_batch_size=job.batch_size, seq_length=job.seq_length, where=r.where)  # bounds
    return job


def single_gpu_node(gpu: GPUSpec) -> NodeGroup:
    """One GPU alone (tp 1: no collective, so the link figures are never used)."""
    return NodeGroup(
        gpu=gpu,
        num_nodes=1,
        gpus_per_node=1,
        intra_node_bandwidth_bytes_per_s=1.0,
        intra_node_latency_s=0.0,
        inter_node_bandwidth_bytes_per_s=1.0,
        inter_node_latency_s=0.0,
        nvlink_domain_size=1,
    )


def price(job: ModelFillJob, gpu: GPUSpec) -> PricedJob:
    """The pieces of one task of ``job`` on ``gpu`` (module docstring), in execution order."""
    m = job.model
    precision = "bf16" if gpu.supports("bf16") else "fp16"
    spec = make_job(global_batch_size=job.batch_size, seq_length=job.seq_length, precision=precision)
    c = ParallelConfig(
        tp=1, pp=1, dp=1, micro_batch_size=job.batch_size, sequence_parallel=False, optimizer_sharding="none"
    )
    table = table_for(m, spec, c, single_gpu_node(gpu))
    decoders = [table.decoder(m, i) for i in range(m.num_layers)]
    hidden = float(job.batch_size * job.seq_length * m.hidden_size * 2)
    params = float(m.params_total)
    embed = Piece(
        "embedding", table.embedding.forward_s, table.embedding.activation_bytes, m.embedding_params() * 2.0
    )
    layers = [
        Piece(f"layer {i}", d.forward_s, d.activation_bytes, m.layer_params(i) * 2.0)
        for i, d in enumerate(decoders)
    ]
    out = table.output
    if job.mode == "inference":
        head = Piece("output", out.forward_s, out.activation_bytes, m.output_params() * 2.0)
        return PricedJob(
            pieces=(embed, *layers, head),
            state_bytes=params * 2.0 + hidden,
            hidden_bytes=hidden,
            host_link_bytes_per_s=gpu.host_link_bytes_per_s,
            offloadable=True,
        )
    grad_b = float(DTYPE_BYTES[spec.grad_dtype])
    state = params * (2.0 + grad_b + optimizer_state_bytes(spec)) + sum(d.checkpoint_bytes for d in decoders)
    backward = [
        Piece(
            f"layer {i} backward",
            d.forward_s + d.backward_input_s + d.backward_weight_s,
            d.activation_bytes,
            m.layer_params(i) * 2.0,
        )
        for i, d in reversed(list(enumerate(decoders)))
    ]
    head = Piece(
        "output + loss", out.forward_s + out.backward_input_s + out.backward_weight_s, out.activation_bytes
    )
    embed_b = Piece(
        "embedding backward", table.embedding.backward_input_s + table.embedding.backward_weight_s, 0.0
    )
    step = Piece(
        "optimizer step",
        params * adam_bytes_per_param(spec) / (gpu.hbm_bandwidth_bytes_per_s * gpu.efficiency.hbm_efficiency),
        0.0,
    )
    return PricedJob(
        pieces=(embed, *layers, head, *backward, embed_b, step),
        state_bytes=state,
        hidden_bytes=hidden,
        host_link_bytes_per_s=gpu.host_link_bytes_per_s,
        offloadable=False,
    )


@cache
def stage_gpu(name: str) -> GPUSpec:
    """The catalogue GPU type of a budget stage (budgets name their stages' GPUs)."""
    from planner.profiles.hardware import load_gpu

    return load_gpu(name)


def describe(job: ModelFillJob) -> str:
    """One line: what a task is."""
    what = "forward pass" if job.mode == "inference" else "training step (recomputed backward)"
    return f"{job.model.name} {job.mode}: a {what} of {job.batch_size} x {job.seq_length} tokens, one piece per layer"


@dataclass(frozen=True, slots=True)
class StagePlacement:
    """Where one stage's fill instance runs its pieces in one iteration."""

    pieces_per_window: tuple[int, ...]
    busy_per_window: tuple[float, ...]
    """Fill time in each window: pieces, their weight copies and the switch overhead (0 if unused)."""
    mode: str
    """``resident``, ``offloaded`` or ``none`` (the job's state fits nowhere on this stage)."""
    tasks: float
    """Tasks completed per iteration (pieces placed over pieces per task)."""


def place_stage(st, job: ModelFillJob, a, limits: tuple[float, ...] | None = None) -> StagePlacement:
    """Greedy in time order, as PipeFill's execution plan cuts a fill job's graph to its bubbles:
    each usable window runs the task's next pieces while they fit its usable time (``limits``
    overrides it per window) and its free memory; the task resumes in the next window. ``st`` is a
    :class:`planner.outputs.bubbles.StageBudget`, ``a`` its :class:`~planner.outputs.bubbles.Assumptions`."""
    priced = price(job, stage_gpu(st.gpu))
    headroom = st.capacity_bytes - st.peak_bytes
    if headroom >= priced.state_bytes:
        mode, held = "resident", priced.state_bytes
    elif priced.offloadable:
        mode, held = "offloaded", priced.buffer_bytes
    else:
        n = len(st.windows)
        return StagePlacement((0,) * n, (0.0,) * n, "none", 0.0)
    n_pieces = len(priced.pieces)
    pos = 0
    placed: list[int] = []
    busy: list[float] = []
    total = 0
    for wi, w in enumerate(st.windows):
        usable = w.usable_s if limits is None else limits[wi]
        # resident state occupies memory all iteration, an offloaded job its buffers while it runs
        free = w.free_memory_bytes - held
        extra = 2 * priced.hidden_bytes / priced.host_link_bytes_per_s if mode == "offloaded" else 0.0
        t, k, start = extra, 0, pos
        while usable > 0 and free >= 0:
            p = priced.pieces[pos]
            dt = p.time_s + (priced.transfer_s(p) if mode == "offloaded" else 0.0)
            if t + dt > usable + 1e-12 or p.memory_bytes > free:
                break
            t += dt
            k += 1
            pos = (pos + 1) % n_pieces
            if k >= 10 * n_pieces:  # a window longer than ten tasks: enough
                break
        if k < job.min_units:
            k, pos = 0, start
        placed.append(k)
        busy.append(t + a.switch_overhead_s if k else 0.0)
        total += k
    return StagePlacement(tuple(placed), tuple(busy), mode, total / n_pieces)


def run_time_limits(st, a, known_error: float) -> tuple[float, ...]:
    """Per window, the fill time PipeFill's executor allows itself when the window turns out
    ``duration_error`` shorter than predicted: it fits fill work "to measured bubble durations"
    (arXiv:2410.07192, abstract), so it starts a piece only while the piece ends within the window
    as measured, known to within ``known_error`` (the run-to-run noise of a measured step), less
    the budget's safety margin and its switch out; a window whose allowance is under
    ``min_slice_s`` is left unused, as :func:`planner.outputs.bubbles.budget` leaves it."""
    out = []
    for w in st.windows:
        measured = w.duration_s * (1.0 - a.duration_error) * (1.0 + known_error)
        usable = measured * (1.0 - a.safety_margin) - a.switch_overhead_s
        out.append(min(w.usable_s, usable) if usable >= a.min_slice_s else 0.0)
    return tuple(out)


def overrun_s(st, placement: StagePlacement, a) -> tuple[float, ...]:
    """Per window, how long the fill work would delay the main job if the window were
    ``duration_error`` shorter than predicted."""
    return tuple(
        max(0.0, b - w.duration_s * (1.0 - a.duration_error)) if b else 0.0
        for w, b in zip(st.windows, placement.busy_per_window)
    )


@dataclass(frozen=True, slots=True)
class ModelFit:
    """A model fill job packed into a budget (:func:`planner.outputs.bubbles.fit_fill_job` makes
    it a :class:`~planner.outputs.bubbles.Fill`)."""

    pieces_per_window: tuple[tuple[int, ...], ...]
    pieces: int
    """Pieces per iteration over all GPUs."""
    tasks: float
    """Tasks per iteration over all GPUs."""
    used_s: float
    """Fill GPU-seconds per iteration (switches included) over all GPUs."""
    slowdown_bound: float
    memory_modes: tuple[str, ...]
    reason: str


def fit_model_fill_job(
    b, job: ModelFillJob, max_slowdown: float | None = 0.02, run_time_error: float | None = None
) -> ModelFit:
    """Pack ``job`` into the budget ``b`` (a :class:`planner.outputs.bubbles.Budget`): per stage
    :func:`place_stage`; when ``max_slowdown`` is given, the window with the largest overrun is cut
    by it and the stage re-placed until the bound holds (None: no cap, the slowdown is only
    computed).

    ``run_time_error`` None: the fill work placed in the predicted windows runs as placed, and the
    slowdown is what it overruns windows ``duration_error`` shorter. A number: the work runs as
    PipeFill's executor runs it, each window cut to what the bubble measured at run time allows
    (:func:`run_time_limits`, measurements off by ``run_time_error``); the task resumes in the next
    window, so the prediction's error costs fill work instead of main-job time, and the slowdown
    left is what the measurement's own error overruns."""
    a = b.assumptions
    if run_time_error is None:
        limits = [[w.usable_s for w in st.windows] for st in b.stages]
    else:
        limits = [list(run_time_limits(st, a, run_time_error)) for st in b.stages]
    places = [place_stage(st, job, a, tuple(lim)) for st, lim in zip(b.stages, limits)]

    def bound() -> float:
        total = sum(sum(overrun_s(st, p, a)) for st, p in zip(b.stages, places))
        return total / b.iteration_time_s if b.iteration_time_s else 0.0

    for _ in range(10_000):
        if max_slowdown is None or bound() <= max_slowdown:
            break
        o, si, wi = max(
            (
                (o, si, wi)
                for si, (st, p) in enumerate(zip(b.stages, places))
                for wi, o in enumerate(overrun_s(st, p, a))
            ),
            default=(0.0, -1, -1),
        )
        if o <= 0:
            break
        limits[si][wi] = max(0.0, limits[si][wi] - o - 1e-9)
        places[si] = place_stage(b.stages[si], job, a, tuple(limits[si]))
    pieces = sum(sum(p.pieces_per_window) * st.devices_per_stage for st, p in zip(b.stages, places))
    reason = ""
    if not pieces:
        if all(p.mode == "none" for p in places):
            reason = "the training job's state fits beside the main job's peak on no stage"
        else:
            shortest = min(pc.time_s for pc in price(job, stage_gpu(b.stages[0].gpu)).pieces)
            longest = max((w.usable_s for st in b.stages for w in st.windows), default=0.0)
            reason = (
                f"no window has room for one piece: the longest usable window is {longest:.3g} s, the "
                f"shortest piece {shortest:.3g} s, or its memory does not fit"
            )
    return ModelFit(
        pieces_per_window=tuple(p.pieces_per_window for p in places),
        pieces=pieces,
        tasks=sum(p.tasks * st.devices_per_stage for st, p in zip(b.stages, places)),
        used_s=sum(sum(p.busy_per_window) * st.devices_per_stage for st, p in zip(b.stages, places)),
        slowdown_bound=bound(),
        memory_modes=tuple(p.mode for p in places),
        reason=reason,
    )
