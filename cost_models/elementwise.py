"""HBM traffic of the memory-bound elementwise ops of a decoder layer, fused or eager.

A *fused* op is one kernel per direction: it reads its 16-bit input once and writes its 16-bit
output once (Megatron-Core's Transformer Engine kernels, apex's fused norms, ``torch.compile``'s
Inductor kernels), and its backward moves twice the forward's bytes (the convention of
:func:`cost_models.layers._decoder`, unchanged). An *eager* op is the model code's sequence of
PyTorch ops, each its own kernel with its own HBM round trip (every intermediate is written out
and read back, fp32 upcasts included), and in backward each op's autograd formula, again one
kernel per op. :data:`planner.inputs.job_spec.EAGER_OPS` names the groups that differ:

* ``norm``: RMSNorm as torchtitan writes it, ``x.float()``, ``pow(2)``, ``mean``, ``rsqrt``, two
  ``mul``, ``type_as``: torchtitan ``torchtitan/models/norms.py`` ``RMSNorm`` at commit 9dec370
  (the Dec-2024 H100 benchmarks), the same ops as ATen's ``rms_norm_composite``
  (``aten/src/ATen/native/layer_norm.cpp``), which ``torch.nn.RMSNorm`` ran on CUDA until
  PyTorch's fused ``_fused_rms_norm`` kernel (pytorch/pytorch#153666, in nightlies from August
  2025). LayerNorm in eager PyTorch is ``F.layer_norm`` -> ``native_layer_norm``, one kernel per
  direction like the fused norm (llm-foundry's ``LPLayerNorm``, ``llmfoundry/models/layers/norm.py``
  at b2a43a1): priced as fused.
* ``rope``: torchtitan's ``apply_rotary_emb`` (``torchtitan/models/llama/model.py`` at 9dec370;
  ``torchtitan/models/llama3/model/model.py`` at v0.2.2): ``x.float()``, a complex64 multiply by
  ``freqs_cis``, ``type_as``, for Q and for K.
* ``activation``: SwiGLU as torchtitan's ``FeedForward.forward`` writes it,
  ``w2(F.silu(w1(x)) * w3(x))`` (same files; the routed experts of ``torchtitan/models/moe.py`` do
  the same ``silu`` then ``*``): two kernels instead of one. GELU and ReLU are one ATen kernel each
  way eagerly (``F.gelu``, llm-foundry's ``MPTMLP``), priced as fused; squared ReLU eagerly is
  ``torch.pow(F.relu(x), 2)``, two kernels.

Ops that cost the same either way are not listed: the residual adds (one ``add`` kernel, as the
fused bias-dropout-add without bias and dropout), and dropout at p = 0 (ATen's ``dropout`` returns
its input, ``aten/src/ATen/native/Dropout.cpp``; torchtitan's Llama and the benchmarked MPT
configurations have no dropout). Not modelled: the loss (torchtitan's eager ``cross_entropy`` over
``pred.float()`` and Megatron's non-fused vocab-parallel cross-entropy are both PyTorch ops; the
output layer keeps its own pricing), GQA's ``repeat_kv`` copy of K and V (torchtitan's SDPA path
pays it compiled too), and kernel launches. Counting the ops above, an eager torchtitan layer
launches about 20 more kernels forward (norms 16 instead of 2, RoPE 6 instead of 1 or 2, SwiGLU 2
instead of 1) and about 35 more backward; at the eager calibration runs' micro-batches (8,192 to
16,384 tokens of Llama 3 8B or larger per GPU) the smallest of them moves about 50 MB, tens of
microseconds of HBM time, more than the few microseconds the CPU takes to launch it, so the
launches queue ahead of the GPU and add no time (the layer's fixed ``kernel_overhead_s`` stays
one per layer and direction).

Byte counts below are per element of the op's width (h for a norm, the rotated Q/K width for
RoPE, the FFN width for the activation), with 16-bit inputs and outputs; ``r`` and ``w`` are reads
and writes in bytes per element, following each op's ATen kernel and its autograd formula
(``tools/autograd/derivatives.yaml``).
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.inputs.job_spec import JobSpec
from planner.inputs.model_spec import ModelSpec


@dataclass(frozen=True, slots=True)
class Passes:
    """HBM bytes an op moves per element of its width: forward, and backward (input gradients)."""

    forward: float
    backward: float

    def __add__(self, other: Passes) -> Passes:
        return Passes(self.forward + other.forward, self.backward + other.backward)

    def __sub__(self, other: Passes) -> Passes:
        return Passes(self.forward - other.forward, self.backward - other.backward)

    def scaled(self, elements: float) -> Passes:
        """The bytes of ``elements`` elements."""
        return Passes(self.forward * elements, self.backward * elements)


ZERO = Passes(0.0, 0.0)

FUSED_NORM = Passes(4.0, 8.0)
"""One kernel: read x (2), write y (2); backward twice that (the layer table's convention)."""

EAGER_RMSNORM = Passes(36.0, 92.0)
"""torchtitan's ``RMSNorm`` (9dec370 ``norms.py``; = ATen ``rms_norm_composite``) on bf16 x.

Forward, 8 kernels, 36 B: ``x.float()`` r2 w4 (6); ``pow(2)`` r4 w4 (8); ``mean(-1)`` r4 (4);
``+ eps`` and ``rsqrt`` over one value per row (~0); ``x * rsqrt`` r4 w4 (8); ``type_as`` r4 w2
(6); ``* weight`` r2 w2 (4).

Backward, 92 B: ``* weight``: grad x weight r2 w2 (4), grad x output r2 r2 w2 (6) summed over rows
r2 (2); ``type_as``: grad to fp32 r2 w4 (6); ``x * rsqrt``: grad x rsqrt r4 w4 (8), grad x x
r4 r4 w4 (12) summed per row r4 (4); ``mean``: ``mean_backward`` expands the row gradient and
divides by the width, w4 (4); ``pow(2)``: ``pow_backward`` = grad x (2 x ``x.pow(1)``), a copy
r4 w4 (8), the scaling r4 w4 (8), the product r4 r4 w4 (12); the two gradients of ``x.float()``
(from ``pow`` and from the product) accumulated r4 r4 w4 (12); ``x.float()``: grad to bf16
r4 w2 (6)."""

FUSED_ROPE = Passes(4.0, 8.0)
"""One kernel (Megatron's fused RoPE, Inductor): read 2, write 2; backward twice that."""

EAGER_ROPE = Passes(20.0, 20.0)
"""torchtitan's ``apply_rotary_emb`` per element of Q or K: forward ``x.float()`` r2 w4 (6), the
complex64 product with ``freqs_cis`` r4 w4 (8; the ``freqs_cis`` row, d/2 complex numbers per
token shared by every head, is not counted), ``type_as`` r4 w2 (6); backward, the same three
in reverse: grad to fp32 r2 w4 (6), grad x conj(freqs_cis) r4 w4 (8), grad to bf16 r4 w2 (6)."""

FUSED_SWIGLU = Passes(6.0, 12.0)
"""One kernel per FFN unit: read the two projections (2 + 2), write one (2); backward twice that."""

EAGER_SWIGLU = Passes(10.0, 18.0)
"""``F.silu(a) * b`` per FFN unit: forward ``silu`` r2 w2 (4), ``*`` r2 r2 w2 (6); backward grad x b
r2 r2 w2 (6), grad x silu(a) r2 r2 w2 (6), ``silu_backward`` r2 r2 w2 (6)."""

FUSED_ACTIVATION = Passes(4.0, 8.0)
"""A non-gated activation in one kernel: read 2, write 2; backward twice that."""

EAGER_SQUARED_RELU = Passes(8.0, 20.0)
"""``torch.pow(F.relu(x), 2)``: forward ``relu`` r2 w2 (4), ``pow`` r2 w2 (4); backward
``pow_backward`` (a copy ``x.pow(1)`` r2 w2, the scaling by 2 r2 w2, the product r2 r2 w2: 14),
``threshold_backward`` r2 r2 w2 (6)."""


def norm(normalization: str, eager: bool) -> Passes:
    """Bytes per normalised element: RMSNorm eager is torchtitan's op sequence; LayerNorm eager is
    ``F.layer_norm``, one native kernel each way, as fused."""
    return EAGER_RMSNORM if eager and normalization == "rmsnorm" else FUSED_NORM


def rope(eager: bool) -> Passes:
    """Bytes per rotated element of Q or K."""
    return EAGER_ROPE if eager else FUSED_ROPE


def activation(name: str, eager: bool) -> Passes:
    """Bytes per FFN unit (one element of the FFN width) of the MLP activation ``name``. A GeGLU
    (``F.gelu(a, approximate="tanh") * b``) runs the same kernels as SwiGLU with GELU for SiLU:
    the same bytes, fused or eager."""
    if name in ("swiglu", "geglu"):
        return EAGER_SWIGLU if eager else FUSED_SWIGLU
    if name == "squared_relu" and eager:
        return EAGER_SQUARED_RELU
    return FUSED_ACTIVATION


def eager_extra(
    model: ModelSpec, job: JobSpec, *, norm_elements: float, rope_elements: float, ffn_elements: float
) -> Passes:
    """Bytes the job's eager op groups move beyond their fused form, for ``norm_elements``
    normalised elements, ``rope_elements`` rotated Q/K elements and ``ffn_elements`` FFN units
    (all per micro-batch on one GPU). :data:`ZERO` when every group is fused."""
    eager = job.eager_ops
    if not eager:
        return ZERO
    extra = ZERO
    if "norm" in eager:
        extra += (norm(model.normalization, True) - norm(model.normalization, False)).scaled(norm_elements)
    if "rope" in eager:
        extra += (rope(True) - rope(False)).scaled(rope_elements)
    if "activation" in eager:
        extra += (activation(model.activation, True) - activation(model.activation, False)).scaled(
            ffn_elements
        )
    return extra
