"""One predicted iteration as a hand-written SVG timeline (no plotting dependency).

One lane per pipeline stage, labelled with its GPU type, devices and layers per chunk; one box per
operation of the :class:`~cost_models.schedules.Timeline` (F, B, W coloured by kind, interleaved
model chunks shaded lighter with the chunk index, the micro-batch id written on boxes wide enough
for it), then the exposed data-parallel reduction, the optimizer step and the exposed parameter
gather, so that the axis ends at the predicted step time (the same formula as
:func:`cost_models.estimate.estimate`). Idle time is the lane's grey background. A time axis with
"nice" ticks (1, 2 or 5 times a power of ten, in s or ms) and a legend sit under the lanes.
Colours: Tableau 10, the palette of the earlier terminal/SVG charts. Deterministic text.
"""

from __future__ import annotations

import math
from xml.sax.saxutils import escape

from cost_models.estimate import Estimate
from cost_models.schedules import KIND_NAMES, POST_VALIDATION, V_SHAPE, W

OP_COLOURS = {"F": "#4e79a7", "B": "#f28e2b", "W": "#59a14f"}
OPTIMIZER_COLOUR = "#b07aa1"
EXPOSED_COMM_COLOUR = "#e15759"
IDLE_COLOUR = "#e6e6e6"
LEFT, PLOT_W, LANE, GAP, TOP = 250, 1100, 26, 6, 40
CHAR_W = 6.2
"""Approximate width of one 10 px sans-serif digit, to decide whether a label fits its box."""


def shade(colour: str, chunk: int, num_chunks: int) -> str:
    """``colour`` mixed with white by up to 55% as the chunk index grows (chunk 0 unchanged)."""
    if num_chunks <= 1 or chunk <= 0:
        return colour
    f = 0.55 * chunk / (num_chunks - 1)
    rgb = [int(colour[i : i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(c + (255 - c) * f):02x}" for c in rgb)


def nice_ticks(horizon_s: float, target: int = 8) -> tuple[list[float], str, float]:
    """Tick positions (seconds), their unit (``s`` or ``ms``) and the unit's size in seconds: a step
    of 1, 2 or 5 x 10^k giving at most about ``target`` intervals over ``[0, horizon]``."""
    if horizon_s <= 0:
        return [0.0], "s", 1.0
    raw = horizon_s / target
    power = 10 ** math.floor(math.log10(raw))
    step = next(k * power for k in (1, 2, 5, 10) if k * power >= raw)
    n = int(math.floor(horizon_s / step + 1e-9))
    unit, scale = ("s", 1.0) if horizon_s >= 1.0 else ("ms", 1e-3)
    return [i * step for i in range(n + 1)], unit, scale


def _fmt_tick(t_s: float, scale: float) -> str:
    return f"{t_s / scale:.6g}"


def stage_lines(est: Estimate, r: int) -> tuple[str, str]:
    """The two lines of a stage's label: ``stage r · GPU xN`` and its layers per chunk."""
    s, c = est.stages[r], est.config
    devices = s.devices or c.tp * c.cp * c.dp
    layers = "+".join(map(str, s.layers))
    if len(layers) > 36:
        layers = f"{sum(s.layers)} in {len(s.layers)} chunks"
    return f"stage {r} \u00b7 {s.gpu} x{devices}", f"layers {layers}"


def timeline_svg(est: Estimate, title: str) -> str:
    """The SVG document (see the module docstring)."""
    tl = est.timeline
    p, v = tl.num_stages, tl.num_chunks
    horizon = est.step_time_s or tl.makespan_s or 1.0

    def x(t: float) -> float:
        return LEFT + t / horizon * PLOT_W

    lanes_h = p * (LANE + GAP)
    axis_y = TOP + lanes_h + 4
    legend_y = axis_y + 44
    height = legend_y + 40 + (20 if est.config.schedule in POST_VALIDATION else 0)
    total_w = LEFT + PLOT_W + 30
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{total_w}" height="{height}" '
        f'viewBox="0 0 {total_w} {height}" font-family="sans-serif" font-size="11">',
        f"<title>{escape(title)}</title>",
        f'<rect x="0" y="0" width="{total_w}" height="{height}" fill="#ffffff"/>',
        f'<text x="{LEFT}" y="22" font-size="14" font-weight="bold">{escape(title)}</text>',
    ]
    ends = [float(tl.end_s[r][-1]) if len(tl.end_s[r]) else 0.0 for r in range(p)]
    sync = max(e + s.reduce_exposed_s for e, s in zip(ends, est.stages))
    opt_end = sync + max(s.optimizer_s for s in est.stages)
    has_w = any(bool((k == W).any()) for k in tl.kind)
    has_comm = any(s.reduce_exposed_s > 0 or s.gather_exposed_s > 0 for s in est.stages)
    for r in range(p):
        y = TOP + r * (LANE + GAP)
        line1, line2 = stage_lines(est, r)
        out.append(
            f'<text class="stage-label" x="6" y="{y + 11}" font-weight="bold">{escape(line1)}</text>'
            f'<text class="stage-label" x="6" y="{y + 23}" fill="#555555">{escape(line2)}</text>'
        )
        out.append(
            f'<rect class="idle" x="{LEFT}" y="{y}" width="{PLOT_W}" height="{LANE}" fill="{IDLE_COLOUR}"/>'
        )
        for i in range(len(tl.kind[r])):
            k, c, j = int(tl.kind[r][i]), int(tl.chunk[r][i]), int(tl.mb[r][i])
            t0, t1 = float(tl.start_s[r][i]), float(tl.end_s[r][i])
            x0, w = x(t0), max(0.3, (t1 - t0) / horizon * PLOT_W)
            name = KIND_NAMES[k]
            edge = ' stroke="#ffffff" stroke-width="0.5"'  # separates adjacent boxes wide enough to show it
            out.append(
                f'<rect class="op op-{name}" x="{x0:.2f}" y="{y}" width="{w:.2f}" height="{LANE}" '
                f'fill="{shade(OP_COLOURS[name], c, v)}"{edge if w >= 3 else ""}>'
                f"<title>{escape(tl.op_name(r, i))} {t0:.4f}-{t1:.4f} s</title></rect>"
            )
            label = str(j)
            if w >= CHAR_W * len(label) + 4:
                ink = "#ffffff" if c <= (v - 1) / 2 else "#222222"  # dark text on the lighter chunks
                out.append(
                    f'<text class="mb-label" x="{x0 + w / 2:.2f}" y="{y + LANE / 2 + 4}" '
                    f'text-anchor="middle" font-size="10" fill="{ink}">{label}</text>'
                )
        s = est.stages[r]
        tail = (
            ("exposed data-parallel reduce", ends[r], ends[r] + s.reduce_exposed_s, EXPOSED_COMM_COLOUR),
            ("optimizer step", sync, sync + s.optimizer_s, OPTIMIZER_COLOUR),
            ("exposed parameter gather", opt_end, opt_end + s.gather_exposed_s, EXPOSED_COMM_COLOUR),
        )
        for what, t0, t1, colour in tail:
            if t1 - t0 > 0:
                out.append(
                    f'<rect class="tail" x="{x(t0):.2f}" y="{y}" width="{max(0.6, (t1 - t0) / horizon * PLOT_W):.2f}" '
                    f'height="{LANE}" fill="{colour}"><title>{what} {t0:.4f}-{t1:.4f} s</title></rect>'
                )
    out.append(_axis(horizon, axis_y))
    out.append(_legend(est, legend_y, has_w, has_comm))
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _axis(horizon: float, y: float) -> str:
    ticks, unit, scale = nice_ticks(horizon)
    parts = [
        '<g id="axis">',
        f'<line x1="{LEFT}" y1="{y}" x2="{LEFT + PLOT_W}" y2="{y}" stroke="#333333"/>',
    ]
    for t in ticks:
        tx = LEFT + t / horizon * PLOT_W
        parts.append(
            f'<line class="tick" x1="{tx:.2f}" y1="{y}" x2="{tx:.2f}" y2="{y + 5}" stroke="#333333"/>'
            f'<text class="tick-label" x="{tx:.2f}" y="{y + 17}" text-anchor="middle">'
            f"{_fmt_tick(t, scale)} {unit}</text>"
        )
    parts.append(
        f'<text x="{LEFT + PLOT_W}" y="{y + 32}" text-anchor="end" fill="#555555">'
        f"time ({unit}); step {horizon / scale:.4g} {unit}</text>"
    )
    parts.append("</g>")
    return "".join(parts)


def _legend(est: Estimate, y: float, has_w: bool, has_comm: bool) -> str:
    v = est.timeline.num_chunks
    backward = "B backward" + (
        "" if est.config.recompute == "none" else f" (with {est.config.recompute} recompute)"
    )
    items = [
        ("F forward", OP_COLOURS["F"]),
        (backward if not has_w else backward + " for inputs", OP_COLOURS["B"]),
    ]
    if has_w:
        items.append(("W weight gradients", OP_COLOURS["W"]))
    if has_comm:
        items.append(("exposed data-parallel communication", EXPOSED_COMM_COLOUR))
    items += [("optimizer step", OPTIMIZER_COLOUR), ("idle", IDLE_COLOUR)]
    parts = ['<g id="legend">']
    lx = LEFT
    for text, colour in items:
        parts.append(
            f'<rect class="legend-swatch" x="{lx}" y="{y}" width="14" height="14" fill="{colour}" stroke="#999999" stroke-width="0.5"/>'
            f'<text class="legend-label" x="{lx + 19}" y="{y + 11}">{escape(text)}</text>'
        )
        lx += 19 + CHAR_W * len(text) + 18
    y2 = y
    if v > 1:
        y2 = y + 20
        v_shape = est.config.schedule in V_SHAPE
        label = "V chunks:" if v_shape else "interleaved chunks:"
        parts.append(f'<text class="legend-label" x="{LEFT}" y="{y2 + 11}">{label}</text>')
        cx = LEFT + 120
        for c in range(v):
            parts.append(
                f'<rect class="legend-swatch" x="{cx}" y="{y2}" width="14" height="14" fill="{shade(OP_COLOURS["F"], c, v)}"/>'
            )
            cx += 16
        explain = (
            "chunk 0 = virtual stage r (down), chunk 1 = 2p-1-r (back up, lighter)"
            if v_shape
            else f"chunk 0 to {v - 1} (lighter = later)"
        )
        parts.append(f'<text class="legend-label" x="{cx + 4}" y="{y2 + 11}">{explain}</text>')
    if est.config.schedule in POST_VALIDATION:
        # Timeline.aligned: the lanes do not share a start (docs/pictures.md)
        parts.append(
            f'<text class="legend-label" x="{LEFT}" y="{y2 + 31}">each lane is its stage\'s own iteration, '
            "from its first forward (optimizer post-validation: iterations overlap across stages)</text>"
        )
    parts.append("</g>")
    return "".join(parts)
