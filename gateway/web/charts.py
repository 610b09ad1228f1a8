"""Geometry for the operator's chat charts: context size over time with its compactions, and prompt-cache use per turn.

Pure functions turn recorded numbers into ready-to-draw coordinates and labels, so the Jinja macros
in ``templates/charts.html`` only place SVG elements and every number on a chart is testable without
a browser. Colours live in ``static/charts.css``: the page's Content-Security-Policy forbids inline
styles, so these dataclasses carry CSS class names, never colours.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from gateway.progress import plural

KIND_NAMES: dict[str, str] = {
    "hygiene": "hygiene (85%)",
    "in_loop": "in-loop (50%)",
    "idle": "idle",
    "manual": "manual /compress",
    "native": "provider-native",
}
DEFAULT_THRESHOLDS: tuple[tuple[float, str], ...] = ((0.5, "compaction 50%"), (0.85, "hygiene 85%"))
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 52.0, 40.0, 16.0, 24.0  # room for a centred time label
DAY = 86_400.0
MIN_BAR_SLOT = 2.0  # pixels per cache bar; below this bars merge into a smear
MAX_BAR_WIDTH = 24.0  # a few turns still read as bars, not as a wall
EMPTY_LABEL = "No turns recorded yet."


@dataclass(frozen=True)
class ContextSample:
    """The live context size (tokens) after a turn, at unix time ``ts``."""

    ts: float
    tokens: int


@dataclass(frozen=True)
class CompactionMark:
    """One compaction: the context went from ``before`` to ``after`` tokens; ``kind`` says what fired it."""

    ts: float
    before: int
    after: int
    kind: str


@dataclass(frozen=True)
class CacheTurn:
    """One turn's prompt tokens, split by what the provider's prompt cache did with them."""

    ts: float
    cache_read: int
    cache_write: int
    uncached: int

    @property
    def total(self) -> int:
        """All prompt tokens of the turn: the height of its bar."""
        return self.cache_read + self.cache_write + self.uncached


@dataclass(frozen=True)
class Box:
    """The plot area inside the SVG, leaving margins for the axis labels."""

    left: float
    top: float
    right: float
    bottom: float

    @property
    def width(self) -> float:
        return self.right - self.left

    @property
    def height(self) -> float:
        return self.bottom - self.top


@dataclass(frozen=True)
class Tick:
    """An axis tick: ``pos`` is x (time axis) or y (token axis) in SVG pixels."""

    pos: float
    label: str


@dataclass(frozen=True)
class Dot:
    """One context sample, hoverable for its exact numbers."""

    x: float
    y: float
    title: str


@dataclass(frozen=True)
class Marker:
    """One compaction: a vertical line from ``y_before`` to ``y_after`` and a small triangle (path ``symbol``)."""

    x: float
    y_before: float
    y_after: float
    kind: str
    css_class: str
    title: str
    symbol: str


@dataclass(frozen=True)
class ThresholdLine:
    """A horizontal reference line across the plot (a compaction threshold, or the window itself)."""

    y: float
    label: str
    css_class: str


@dataclass(frozen=True)
class LegendEntry:
    """What a colour means: ``css_class`` is the class that colours it on the chart."""

    kind: str
    css_class: str
    name: str


@dataclass(frozen=True)
class ContextChart:
    """Everything ``context_chart`` in charts.html draws; ``label`` is the svg's aria-label."""

    width: int
    height: int
    box: Box
    polyline: str
    dots: tuple[Dot, ...]
    markers: tuple[Marker, ...]
    threshold_lines: tuple[ThresholdLine, ...]
    x_ticks: tuple[Tick, ...]
    y_ticks: tuple[Tick, ...]
    legend: tuple[LegendEntry, ...]
    empty: bool
    label: str


@dataclass(frozen=True)
class Segment:
    """One part of a cache bar; segments of a bar touch and stack from the bottom."""

    y: float
    height: float
    css_class: str


@dataclass(frozen=True)
class Bar:
    """One turn's stacked bar."""

    x: float
    width: float
    segments: tuple[Segment, ...]
    title: str


@dataclass(frozen=True)
class CacheChart:
    """Everything ``cache_chart`` in charts.html draws; ``omitted`` counts older turns that did not fit."""

    width: int
    height: int
    box: Box
    bars: tuple[Bar, ...]
    x_ticks: tuple[Tick, ...]
    y_ticks: tuple[Tick, ...]
    legend: tuple[LegendEntry, ...]
    omitted: int
    empty: bool
    label: str


CACHE_LEGEND: tuple[LegendEntry, ...] = (
    LegendEntry("cache_read", "cache-read", "read from cache"),
    LegendEntry("cache_write", "cache-write", "written to cache"),
    LegendEntry("uncached", "cache-none", "uncached"),
)


@dataclass(frozen=True)
class _Scale:
    """Maps steps (one per event, so a burst of turns and a quiet night read alike) and tokens to
    SVG pixels inside ``box``."""

    box: Box
    steps: int
    y_max: float

    def x(self, step: float) -> float:
        if self.steps <= 1:  # a single event stands in the middle
            return round(self.box.left + self.box.width / 2, 1)
        return round(self.box.left + step / (self.steps - 1) * self.box.width, 1)

    def y(self, tokens: float) -> float:
        return round(self.box.bottom - max(tokens, 0) / self.y_max * self.box.height, 1)


def short_tokens(n: float) -> str:
    """A token count as an axis label: 950, 1.5K, 150K, 1.2M."""
    n = round(n)
    if abs(n) < 1000:
        return str(n)
    value, suffix = n / 1000, "K"
    if round(abs(value), 1) >= 1000:
        value, suffix = n / 1_000_000, "M"
    return f"{value:.1f}".removesuffix(".0") + suffix


def time_format(span: float) -> str:
    """How a chart spanning ``span`` seconds labels its times: with seconds under ten minutes, with the
    date over a day."""
    return "%m-%d %H:%M" if span > DAY else "%H:%M:%S" if span < 600 else "%H:%M"


def clock(ts: float, fmt: str = "%H:%M") -> str:
    """A unix time in UTC, as ``fmt`` (see :func:`time_format`)."""
    return datetime.fromtimestamp(ts, tz=UTC).strftime(fmt)


def plot_box(width: int, height: int) -> Box:
    """The plot area of a ``width`` x ``height`` chart."""
    return Box(MARGIN_LEFT, MARGIN_TOP, width - MARGIN_RIGHT, height - MARGIN_BOTTOM)


def step_ticks(times: Sequence[float], scale: _Scale, fmt: str) -> tuple[Tick, ...]:
    """Up to five ticks on evenly spaced steps, each labelled with its event's time."""
    last = len(times) - 1
    steps = sorted({round(k * last / 4) for k in range(5)}) if last > 0 else [0]
    return tuple(Tick(scale.x(step), clock(times[step], fmt)) for step in steps)


def token_step(y_max: float) -> int:
    """A round step (1, 2, 2.5 or 5 times a power of ten) giving about five ticks from 0 to ``y_max``."""
    magnitude = 10 ** max(0, math.floor(math.log10(max(y_max / 4, 1))))
    steps = [m * magnitude for m in (1, 2, 2.5, 5, 10) if float(m * magnitude).is_integer()]
    return int(min(steps, key=lambda s: (abs(y_max // s + 1 - 5), -s)))


def token_ticks(scale: _Scale) -> tuple[Tick, ...]:
    """Ticks from 0 up to the top of the token axis, labelled like "50K"."""
    step = token_step(scale.y_max)
    return tuple(Tick(scale.y(i * step), short_tokens(i * step)) for i in range(int(scale.y_max // step) + 1))


def context_chart(
    samples: Sequence[ContextSample],
    compactions: Sequence[CompactionMark],
    *,
    window: int,
    thresholds: Sequence[tuple[float, str]] = DEFAULT_THRESHOLDS,
    width: int = 720,
    height: int = 260,
) -> ContextChart:
    """How the chat's context rose and fell, turn after turn, with each compaction's drop marked by its kind.

    The x axis has one step per event (a turn or a compaction), labelled with the events' times:
    a day of turns and an overnight silence take the room their turns need, not their hours.
    """
    box = plot_box(width, height)
    if not samples and not compactions:
        return ContextChart(width, height, box, "", (), (), (), (), (), (), True, EMPTY_LABEL)
    samples = sorted(samples, key=lambda s: s.ts)
    compactions = sorted(compactions, key=lambda c: c.ts)
    # On equal times the sample comes first: a turn ends, then its context is compacted.
    events = sorted([(s.ts, 0, s) for s in samples] + [(c.ts, 1, c) for c in compactions], key=lambda e: e[:2])
    values = [s.tokens for s in samples] + [v for c in compactions for v in (c.before, c.after)]
    scale = _Scale(box, len(events), max(window, *values, 1))
    times = [ts for ts, _, _ in events]
    fmt = time_format(times[-1] - times[0])
    steps = list(enumerate(item for _, _, item in events))
    return ContextChart(
        width,
        height,
        box,
        polyline=_polyline(steps, scale),
        dots=tuple(_dot(step, item, scale, window, fmt) for step, item in steps if isinstance(item, ContextSample)),
        markers=tuple(_marker(step, item, scale, fmt) for step, item in steps if isinstance(item, CompactionMark)),
        threshold_lines=_threshold_lines(window, thresholds, scale),
        x_ticks=step_ticks(times, scale, fmt),
        y_ticks=token_ticks(scale),
        legend=_legend(compactions),
        empty=False,
        label=_context_label(samples, compactions, window, max(values)),
    )


def kind_class(kind: str) -> str:
    """The CSS class colouring a compaction kind; kinds this module does not know share ``kind-other``."""
    return f"kind-{kind}" if kind in KIND_NAMES else "kind-other"


def _polyline(steps: Sequence[tuple[int, ContextSample | CompactionMark]], scale: _Scale) -> str:
    """One point per sample; a compaction is two points at one x, so the line drops vertically."""
    points = []
    for step, item in steps:
        values = (item.tokens,) if isinstance(item, ContextSample) else (item.before, item.after)
        points += [f"{scale.x(step):.1f},{scale.y(v):.1f}" for v in values]
    return " ".join(points)


def _dot(step: int, sample: ContextSample, scale: _Scale, window: int, fmt: str) -> Dot:
    title = f"{clock(sample.ts, fmt)} UTC — {sample.tokens:,} tokens"
    if window > 0:
        title += f" ({round(100 * sample.tokens / window)}% of window)"
    return Dot(scale.x(step), scale.y(sample.tokens), title)


def _marker(step: int, mark: CompactionMark, scale: _Scale, fmt: str) -> Marker:
    x, y_before = scale.x(step), scale.y(mark.before)
    title = (
        f"{mark.kind.replace('_', '-')} compaction at {clock(mark.ts, fmt)} UTC: "
        f"{mark.before:,} → {mark.after:,} tokens"
    )
    symbol = f"M{x - 4:.1f},{y_before - 10:.1f} L{x + 4:.1f},{y_before - 10:.1f} L{x:.1f},{y_before - 3:.1f} Z"
    return Marker(x, y_before, scale.y(mark.after), mark.kind, kind_class(mark.kind), title, symbol)


def _threshold_lines(window: int, thresholds: Sequence[tuple[float, str]], scale: _Scale) -> tuple[ThresholdLine, ...]:
    """The compaction thresholds and the window; none when the window is unknown."""
    if window <= 0:
        return ()
    lines = [ThresholdLine(scale.y(fraction * window), label, "threshold") for fraction, label in thresholds]
    return (*lines, ThresholdLine(scale.y(window), f"window {short_tokens(window)}", "window-line"))


def _legend(compactions: Sequence[CompactionMark]) -> tuple[LegendEntry, ...]:
    """The kinds that occur: known ones in a fixed order, then unknown ones as first seen."""
    present = list(dict.fromkeys(c.kind for c in compactions))
    ordered = [k for k in KIND_NAMES if k in present] + [k for k in present if k not in KIND_NAMES]
    return tuple(LegendEntry(k, kind_class(k), KIND_NAMES.get(k, k)) for k in ordered)


def _context_label(
    samples: Sequence[ContextSample], compactions: Sequence[CompactionMark], window: int, peak: int
) -> str:
    """A one-sentence summary for screen readers."""
    label = (
        f"Context size over time: {plural(len(samples), 'turn')}, {plural(len(compactions), 'compaction')}, "
        f"peak {short_tokens(peak)} tokens"
    )
    return label + (f" of a {short_tokens(window)} window" if window > 0 else "")


def cache_chart(turns: Sequence[CacheTurn], *, width: int = 720, height: int = 180) -> CacheChart:
    """Prompt-cache reads, writes and misses per turn, as stacked bars; the most recent turns that fit."""
    box = plot_box(width, height)
    if not turns:
        return CacheChart(width, height, box, (), (), (), CACHE_LEGEND, 0, True, EMPTY_LABEL)
    ordered = sorted(turns, key=lambda t: t.ts)
    shown = ordered[-max(1, int(box.width // MIN_BAR_SLOT)) :]
    scale = _Scale(box, len(shown), max(1, *(t.total for t in shown)))
    fmt = time_format(shown[-1].ts - shown[0].ts)
    slot = box.width / len(shown)
    bars = tuple(_bar(t, box.left + i * slot, slot, scale, fmt) for i, t in enumerate(shown))
    ends = [(bars[0], shown[0])] + ([(bars[-1], shown[-1])] if len(bars) > 1 else [])
    x_ticks = tuple(Tick(round(bar.x + bar.width / 2, 1), clock(t.ts, fmt)) for bar, t in ends)
    return CacheChart(
        width,
        height,
        box,
        bars,
        x_ticks,
        token_ticks(scale),
        CACHE_LEGEND,
        omitted=len(ordered) - len(shown),
        empty=False,
        label=_cache_label(shown),
    )


def _bar(turn: CacheTurn, left: float, slot: float, scale: _Scale, fmt: str) -> Bar:
    """One turn's bar: read at the bottom, then written, then uncached; empty segments are left out."""
    title = (
        f"turn at {clock(turn.ts, fmt)} UTC: {turn.cache_read:,} read from cache, "
        f"{turn.cache_write:,} written, {turn.uncached:,} uncached"
    )
    segments, below = [], 0
    for value, css_class in (
        (turn.cache_read, "cache-read"),
        (turn.cache_write, "cache-write"),
        (turn.uncached, "cache-none"),
    ):
        if value > 0:
            top = scale.y(below + value)
            segments.append(Segment(top, round(scale.y(below) - top, 1), css_class))
            below += value
    width = min(slot * 0.8, MAX_BAR_WIDTH)
    return Bar(round(left + (slot - width) / 2, 1), round(width, 1), tuple(segments), title)


def _cache_label(turns: Sequence[CacheTurn]) -> str:
    """A one-sentence summary for screen readers."""
    total = sum(t.total for t in turns)
    share = round(100 * sum(t.cache_read for t in turns) / total) if total else 0
    return f"Prompt cache per turn: {plural(len(turns), 'turn')}, {share}% of prompt tokens read from cache"
