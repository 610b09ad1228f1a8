"""The operator's charts: context size over time with compactions, and prompt-cache use per turn."""

import random
import re
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from pathlib import Path

import jinja2

from gateway.web import charts
from gateway.web.charts import CacheTurn, CompactionMark, ContextSample, cache_chart, context_chart, short_tokens

T0 = datetime(2024, 5, 1, 3, 12, tzinfo=UTC).timestamp()
MIN = 60.0
CSS = Path(charts.__file__).parent / "static" / "charts.css"


def points(chart):
    return [tuple(map(float, p.split(","))) for p in chart.polyline.split()]


def inside(box, x, y):
    return box.left <= x <= box.right and box.top <= y <= box.bottom


def render(macro, chart):
    env = jinja2.Environment(loader=jinja2.PackageLoader("gateway.web"), autoescape=True)
    return env.from_string(f'{{% from "charts.html" import {macro} %}}{{{{ {macro}(c) }}}}').render(c=chart)


def parse(html):
    return ET.fromstring(f"<root>{html}</root>")


def local(tag):
    return tag.rsplit("}", 1)[-1]


def a_day():
    samples = [ContextSample(T0 + i * 10 * MIN, 20_000 + i * 15_000) for i in range(12)]
    compactions = [
        CompactionMark(T0 + 55 * MIN, 170_000, 21_000, "hygiene"),
        CompactionMark(T0 + 85 * MIN, 120_000, 40_000, "manual"),
    ]
    return samples, compactions


def test_short_tokens_reads_like_an_axis_label():
    assert [short_tokens(n) for n in (0, 950, 1_000, 1_500, 50_000, 150_000, 200_000, 1_200_000, 999_999)] == [
        "0",
        "950",
        "1K",
        "1.5K",
        "50K",
        "150K",
        "200K",
        "1.2M",
        "1M",
    ]


def test_every_point_dot_and_marker_lies_inside_the_plot_box():
    samples, compactions = a_day()
    chart = context_chart(samples + [ContextSample(T0 + 200 * MIN, 260_000)], compactions, window=200_000)
    box = chart.box
    assert box.left > 0 and box.bottom < chart.height  # margins left for labels
    assert all(inside(box, x, y) for x, y in points(chart))
    assert all(inside(box, d.x, d.y) for d in chart.dots)
    assert all(inside(box, m.x, m.y_before) and inside(box, m.x, m.y_after) for m in chart.markers)
    assert all(box.top <= line.y <= box.bottom for line in chart.threshold_lines)


def test_x_increases_with_time_whatever_the_input_order():
    samples, compactions = a_day()
    shuffled = samples[:]
    random.Random(7).shuffle(shuffled)
    chart = context_chart(shuffled, compactions[::-1], window=200_000)
    xs = [x for x, _ in points(chart)]
    assert xs == sorted(xs)
    dot_xs = [d.x for d in chart.dots]
    assert dot_xs == sorted(dot_xs) and len(set(dot_xs)) == len(dot_xs)
    assert chart.dots[0].x == chart.box.left and chart.dots[-1].x == chart.box.right
    assert chart.dots[0].title.startswith("03:12 UTC")


def test_a_sample_at_the_window_size_sits_on_the_window_line():
    samples = [ContextSample(T0, 40_000), ContextSample(T0 + 10 * MIN, 200_000), ContextSample(T0 + 20 * MIN, 250_000)]
    chart = context_chart(samples, [], window=200_000)
    window_line = next(line for line in chart.threshold_lines if line.css_class == "window-line")
    assert window_line.label == "window 200K"
    assert chart.dots[1].y == window_line.y
    hygiene = next(line for line in chart.threshold_lines if line.label == "hygiene 85%")
    half = next(line for line in chart.threshold_lines if line.label == "compaction 50%")
    assert window_line.y < hygiene.y < half.y  # higher on screen = smaller y
    assert abs((chart.box.bottom - half.y) * 2 - (chart.box.bottom - window_line.y)) <= 0.2


def test_a_compaction_is_a_vertical_drop_with_one_marker_of_its_kind():
    samples = [ContextSample(T0 - 10 * MIN, 150_000), ContextSample(T0 + 10 * MIN, 30_000)]
    chart = context_chart(samples, [CompactionMark(T0, 170_000, 21_000, "hygiene")], window=200_000)
    pts = points(chart)
    assert len(pts) == 4
    (x1, y1), (x2, y2) = pts[1], pts[2]
    assert x1 == x2 and y2 > y1  # same instant, lower on screen after
    (marker,) = chart.markers
    assert (marker.x, marker.y_before, marker.y_after) == (x1, y1, y2)
    assert marker.css_class == "kind-hygiene" and marker.kind == "hygiene"
    assert marker.title == "hygiene compaction at 03:12 UTC: 170,000 → 21,000 tokens"


def test_dot_titles_give_time_tokens_and_share_of_the_window():
    chart = context_chart([ContextSample(T0, 45_210)], [], window=200_000)
    assert chart.dots[0].title == "03:12:00 UTC — 45,210 tokens (23% of window)"  # a short span: seconds


def test_legend_lists_exactly_the_kinds_present():
    kinds = ["manual", "in_loop", "manual", "native", "mystery"]
    marks = [CompactionMark(T0 + i * MIN, 100_000, 20_000, kind) for i, kind in enumerate(kinds)]
    chart = context_chart([], marks, window=200_000)
    assert [e.kind for e in chart.legend] == ["in_loop", "manual", "native", "mystery"]
    assert [e.name for e in chart.legend] == ["in-loop (50%)", "manual /compress", "provider-native", "mystery"]
    assert [e.css_class for e in chart.legend] == ["kind-in_loop", "kind-manual", "kind-native", "kind-other"]
    assert [m.css_class for m in chart.markers][-1] == "kind-other"
    everything = context_chart([], [CompactionMark(T0, 2, 1, k) for k in ("native", "idle", "hygiene")], window=0)
    assert [e.name for e in everything.legend] == ["hygiene (85%)", "idle", "provider-native"]


def test_no_data_is_an_empty_chart_and_the_page_says_so():
    chart = context_chart([], [], window=200_000)
    assert chart.empty and chart.polyline == "" and not chart.dots
    cache = cache_chart([])
    assert cache.empty and not cache.bars
    for macro, c in (("context_chart", chart), ("cache_chart", cache)):
        html = render(macro, c)
        assert "No turns recorded yet." in html
        assert "<svg" not in html
    assert not context_chart([ContextSample(T0, 10)], [], window=0).empty


def test_a_single_sample_or_identical_timestamps_do_not_crash():
    one = context_chart([ContextSample(T0, 50_000)], [], window=200_000)
    box = one.box
    assert one.dots[0].x == round((box.left + box.right) / 2, 1)
    assert [t.label for t in one.x_ticks] == ["03:12:00"]
    same = context_chart(
        [ContextSample(T0, 10_000), ContextSample(T0, 20_000)], [CompactionMark(T0, 20_000, 5_000, "idle")], window=0
    )
    xs = [x for x, _ in points(same)]
    assert len(set(xs)) == 3 and xs == sorted(xs)  # one step each, even at one instant
    assert all(inside(box, x, y) for x, y in points(same))


def test_a_value_above_the_window_stretches_the_y_axis():
    normal = context_chart([ContextSample(T0, 100_000)], [], window=200_000)
    huge = context_chart([ContextSample(T0, 100_000), ContextSample(T0 + MIN, 500_000)], [], window=200_000)
    assert huge.dots[1].y == huge.box.top
    window_y = huge.threshold_lines[-1].y
    assert window_y > huge.box.top + huge.box.height / 2  # the window sits well below the top now
    assert huge.dots[0].y > normal.dots[0].y  # the same 100K is drawn lower
    assert huge.y_ticks[-1].label == "500K"


def test_an_unknown_window_scales_to_the_data_and_draws_no_thresholds():
    chart = context_chart([ContextSample(T0, 30_000), ContextSample(T0 + MIN, 60_000)], [], window=0)
    assert chart.threshold_lines == ()
    assert chart.dots[1].y == chart.box.top
    assert "window" not in chart.dots[0].title


def test_ticks_are_ordered_and_formatted():
    samples, compactions = a_day()
    chart = context_chart(samples, compactions, window=200_000)
    x_pos = [t.pos for t in chart.x_ticks]
    assert x_pos == sorted(x_pos) and 4 <= len(x_pos) <= 6
    assert all(re.fullmatch(r"\d\d:\d\d", t.label) for t in chart.x_ticks)
    assert [t.label for t in chart.y_ticks] == ["0", "50K", "100K", "150K", "200K"]
    assert chart.y_ticks[0].pos == chart.box.bottom and chart.y_ticks[-1].pos == chart.box.top
    long = context_chart([ContextSample(T0, 1), ContextSample(T0 + 3 * 86_400, 2_000_000)], [], window=0)
    assert all(re.fullmatch(r"\d\d-\d\d \d\d:\d\d", t.label) for t in long.x_ticks)
    assert all(re.fullmatch(r"\d+(\.\d)?[KM]?", t.label) for t in long.y_ticks)


def test_a_quiet_night_takes_no_room_each_turn_takes_one_step():
    """Turns a minute apart, then eight silent hours, then more turns: every turn is one step wide."""
    evening = [ContextSample(T0 + i * MIN, 1_000 * (i + 1)) for i in range(6)]
    morning = [ContextSample(T0 + 8 * 3600 + i * MIN, 7_000 + 1_000 * i) for i in range(6)]
    chart = context_chart(evening + morning, [], window=200_000)
    xs = [d.x for d in chart.dots]
    gaps = {round(b - a, 1) for a, b in zip(xs, xs[1:])}
    assert max(gaps) - min(gaps) <= 0.2  # the night is one step like any other
    assert chart.dots[0].x == chart.box.left and chart.dots[-1].x == chart.box.right


def test_step_ticks_are_at_most_five_and_name_their_events_times():
    for count in (1, 2, 3, 5, 9, 50):
        samples = [ContextSample(T0 + i * 3600, 10 * i) for i in range(count)]
        chart = context_chart(samples, [], window=1_000)
        ticks = chart.x_ticks
        assert 1 <= len(ticks) <= min(5, count)
        assert all(chart.box.left <= t.pos <= chart.box.right for t in ticks)
        assert [t.pos for t in ticks] == sorted(t.pos for t in ticks)
        dot_titles = {d.x: d.title for d in chart.dots}
        assert all(dot_titles[t.pos].startswith(t.label) for t in ticks)  # a tick names the time of the turn above it


def test_y_ticks_number_about_five_for_any_height():
    for top in (7, 13, 999, 13_300, 210_000, 1_000_000, 3_700_000):
        chart = context_chart([ContextSample(T0, top)], [], window=0)
        ys = [t.pos for t in chart.y_ticks]
        assert 3 <= len(ys) <= 7, (top, chart.y_ticks)
        assert ys == sorted(ys, reverse=True)


def test_cache_bars_stack_to_the_turns_prompt_tokens_in_time_order():
    turns = [CacheTurn(T0 + 2 * MIN, 5_000, 0, 1_000), CacheTurn(T0, 12_000, 800, 300), CacheTurn(T0 + MIN, 0, 0, 0)]
    chart = cache_chart(turns)
    first, empty, last = chart.bars
    assert first.x < empty.x < last.x
    assert first.title == "turn at 03:12:00 UTC: 12,000 read from cache, 800 written, 300 uncached"
    assert [s.css_class for s in first.segments] == ["cache-read", "cache-write", "cache-none"]
    assert empty.segments == ()
    assert [s.css_class for s in last.segments] == ["cache-read", "cache-none"]
    for bar, total in ((first, 13_100), (last, 6_000)):
        segs = bar.segments
        assert segs[0].y + segs[0].height == chart.box.bottom
        assert all(abs(upper.y + upper.height - lower.y) < 0.05 for lower, upper in zip(segs, segs[1:]))
        assert abs(sum(s.height for s in segs) - total / 13_100 * chart.box.height) <= 0.2
    assert first.segments[-1].y == chart.box.top  # the biggest turn fills the plot


def test_too_many_turns_keep_the_most_recent_and_count_the_rest():
    turns = [CacheTurn(T0 + i * MIN, 100, 10, i) for i in range(1_000)]
    chart = cache_chart(turns)
    fit = int(chart.box.width // 2)
    assert len(chart.bars) == fit and chart.omitted == 1_000 - fit
    assert chart.bars[-1].title.endswith(", 999 uncached")
    assert chart.bars[0].title.endswith(f", {1_000 - fit} uncached")
    assert all(a.x + a.width <= b.x for a, b in zip(chart.bars, chart.bars[1:]))
    assert all(chart.box.left <= b.x and b.x + b.width <= chart.box.right for b in chart.bars)
    assert f"{1_000 - fit} earlier turns not shown." in render("cache_chart", chart)
    assert cache_chart(turns[:10]).omitted == 0


def test_the_context_chart_renders_as_svg_without_inline_styles():
    samples, compactions = a_day()
    chart = context_chart(samples, compactions, window=200_000)
    root = parse(render("context_chart", chart))
    elements = list(root.iter())
    assert not any("style" in el.attrib for el in elements)
    assert not any(local(el.tag) in ("style", "script") for el in elements)
    (svg,) = [el for el in elements if local(el.tag) == "svg"]
    assert svg.get("class") == "chart context-chart" and svg.get("role") == "img"
    assert svg.get("viewBox") == "0 0 720 260" and svg.get("aria-label")
    (line,) = [el for el in svg.iter() if local(el.tag) == "polyline"]
    assert line.get("points") == chart.polyline
    circles = [el for el in svg.iter() if local(el.tag) == "circle"]
    assert [local(c[0].tag) for c in circles] == ["title"] * len(samples)
    manual = [el for el in svg.iter() if el.get("data-kind") == "manual"]
    assert len(manual) == 1 and "kind-manual" in manual[0].get("class")
    assert manual[0].find("{http://www.w3.org/2000/svg}title").text == chart.markers[1].title
    legend = [el.text for el in root.iter("li")] + [el.tail for el in root.iter("span") if el.tail]
    assert "hygiene (85%)" in legend and "manual /compress" in legend
    labels = [el.text for el in svg.iter() if local(el.tag) == "text"]
    assert "window 200K" in labels and "03:12" in labels and "150K" in labels


def test_the_cache_chart_renders_as_svg_without_inline_styles():
    chart = cache_chart([CacheTurn(T0 + i * MIN, 12_000, 800, 300) for i in range(5)])
    root = parse(render("cache_chart", chart))
    elements = list(root.iter())
    assert not any("style" in el.attrib for el in elements)
    (svg,) = [el for el in elements if local(el.tag) == "svg"]
    assert svg.get("class") == "chart cache-chart" and svg.get("viewBox") == "0 0 720 180"
    rects = [el for el in svg.iter() if local(el.tag) == "rect"]
    assert len(rects) == 15
    assert {r.get("class") for r in rects} == {"cache-read", "cache-write", "cache-none"}
    bars = [el for el in svg.iter() if local(el.tag) == "g" and el.get("class") == "cache-bar"]
    assert [local(bar[0].tag) for bar in bars] == ["title"] * 5  # one hover text per turn
    assert all("read from cache" in bar[0].text for bar in bars)


def test_markup_in_a_kind_or_label_comes_out_escaped():
    evil = "<script>alert(1)</script>"
    chart = context_chart(
        [ContextSample(T0, 100)], [CompactionMark(T0 + MIN, 100, 50, evil)], window=1_000, thresholds=((0.5, evil),)
    )
    html = render("context_chart", chart)
    assert "<script" not in html and "&lt;script&gt;" in html
    root = parse(html)
    assert not any(local(el.tag) == "script" for el in root.iter())
    assert [el.get("data-kind") for el in root.iter() if el.get("data-kind") and local(el.tag) == "g"] == [evil]
    assert evil in [el.text for el in root.iter() if local(el.tag) == "text"]


def test_every_drawn_class_has_a_colour_and_kinds_have_distinct_colours():
    css = CSS.read_text()
    assert "@import" not in css and "url(" not in css
    used = {
        "context-line",
        "context-dot",
        "threshold",
        "window-line",
        "marker-drop",
        "marker-symbol",
        "cache-read",
        "cache-write",
        "cache-none",
        "gridline",
        "axis-line",
        "tick-label",
        "swatch",
    }
    used |= {f"kind-{k}" for k in charts.KIND_NAMES} | {"kind-other"}
    assert [name for name in sorted(used) if not re.search(rf"\.{name}\b", css)] == []
    colours = {
        k: re.search(rf"\.{k}\s*\{{\s*color:\s*([^;]+);", css).group(1)
        for k in [f"kind-{k}" for k in charts.KIND_NAMES] + ["kind-other"]
    }
    assert len(set(colours.values())) == len(colours), colours
    assert re.search(r"\.threshold\s*\{[^}]*stroke-dasharray", css)


def test_time_labels_follow_the_span():
    from gateway.web.charts import clock, time_format

    assert clock(T0, time_format(120)) == "03:12:00"  # minutes of a chat: seconds tell turns apart
    assert clock(T0, time_format(6 * 3600)) == "03:12"
    assert time_format(3 * 86_400) == "%m-%d %H:%M"
