"""Small inline SVG charts for the dashboard, so the page needs no script library and no network.

Every chart is an ``<svg class="chart">`` whose data marks carry ``class="mark"``; the page's
script counts them to tell that the charts rendered.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from html import escape

from markupsafe import Markup

PALETTE = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c"]
MUTED = "#b8b8b8"
WIDTH = 560
TITLE_H = 24
FONT = 'font-family="system-ui, sans-serif" font-size="12"'


def color(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


def _svg(name: str, title: str, height: int, body: list[str], width: int = WIDTH) -> Markup:
    # The title is drawn too (not only the tooltip <title>), so a screenshot says what each chart is.
    height += TITLE_H
    head = (f'<svg class="chart" data-chart="{escape(name)}" xmlns="http://www.w3.org/2000/svg" '
            f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
            f'aria-label="{escape(title)}" {FONT}><title>{escape(title)}</title>'
            f'<text x="4" y="15" font-weight="600" font-size="13">{escape(title)}</text>'
            f'<g transform="translate(0,{TITLE_H})">')
    return Markup(head + "".join(body) + "</g></svg>")


def hbars(name: str, title: str, rows: Sequence[tuple[str, float | None, str, int]],
          max_value: float | None = None) -> Markup:
    """One horizontal bar per row: (label, value or None for no data, text shown, colour index).

    A row with no value is drawn as a grey outline so the gap is visible, not silent.
    """
    label_w, right_w, bar_h, gap = 150, 120, 20, 8
    top = 8
    height = top + len(rows) * (bar_h + gap) + 4
    span = max_value if max_value else max([v for _, v, _, _ in rows if v is not None] + [1e-9])
    plot_w = WIDTH - label_w - right_w
    body: list[str] = []
    for i, (label, value, text, col) in enumerate(rows):
        y = top + i * (bar_h + gap)
        body.append(f'<text x="{label_w - 6}" y="{y + 14}" text-anchor="end">{escape(label)}</text>')
        if value is None:
            body.append(f'<rect class="mark nodata" x="{label_w}" y="{y}" width="{plot_w}" height="{bar_h}" '
                        f'fill="none" stroke="{MUTED}" stroke-dasharray="4 3"/>')
        else:
            w = max(1.0, plot_w * max(0.0, value) / span) if span > 0 else 1.0
            body.append(f'<rect class="mark" x="{label_w}" y="{y}" width="{w:.1f}" height="{bar_h}" '
                        f'fill="{color(col)}"><title>{escape(label)}: {escape(text)}</title></rect>')
        body.append(f'<text x="{WIDTH - right_w + 6}" y="{y + 14}">{escape(text)}</text>')
    return _svg(name, title, height, body)


def stacked(name: str, title: str, rows: Sequence[tuple[str, Sequence[tuple[str, int, str]]]]) -> Markup:
    """One bar per row split into segments (segment name, count, colour); bars scaled to their total."""
    label_w, bar_h, gap = 150, 20, 8
    plot_w = WIDTH - label_w - 20
    names: dict[str, str] = {seg: fill for _, segments in rows for seg, _, fill in segments}
    legend, legend_h = _legend([(seg, fill) for seg, fill in names.items()], label_w)
    height = legend_h + len(rows) * (bar_h + gap) + 4
    body: list[str] = list(legend)
    for r, (label, segments) in enumerate(rows):
        y = legend_h + r * (bar_h + gap)
        body.append(f'<text x="{label_w - 6}" y="{y + 14}" text-anchor="end">{escape(label)}</text>')
        total = sum(c for _, c, _ in segments)
        x = float(label_w)
        for seg, count, fill in segments:
            if total == 0 or count == 0:
                continue
            w = plot_w * count / total
            body.append(f'<rect class="mark" x="{x:.1f}" y="{y}" width="{w:.1f}" height="{bar_h}" fill="{fill}">'
                        f'<title>{escape(label)}: {escape(seg)} {count}</title></rect>')
            if w > 18:
                body.append(f'<text x="{x + w / 2:.1f}" y="{y + 14}" text-anchor="middle" fill="#fff">{count}</text>')
            x += w
    return _svg(name, title, height, body)


def _legend(items: Sequence[tuple[str, str]], left: float) -> tuple[list[str], int]:
    """Legend entries (name, fill) laid out in rows that wrap at the chart's width; returns the height used."""
    body: list[str] = []
    x, y = float(left), 4
    for label, fill in items:
        w = 24 + 7 * len(label)
        if x + w > WIDTH and x > left:
            x, y = float(left), y + 16
        body.append(f'<rect x="{x:.1f}" y="{y}" width="10" height="10" fill="{fill}"/>'
                    f'<text x="{x + 14:.1f}" y="{y + 9}">{escape(label)}</text>')
        x += w
    return body, y + 18


def intervals(name: str, title: str, rows: Sequence[tuple[str, float, float, float, str]],
              lo: float = -1.0, hi: float = 1.0, fmt: Callable[[float], str] = str) -> Markup:
    """Point estimates with interval whiskers around a zero line: (label, est, low, high, text)."""
    label_w, right_w, row_h, top = 120, 210, 28, 8
    plot_w = WIDTH - label_w - right_w
    height = top + len(rows) * row_h + 22

    def px(v: float) -> float:
        return label_w + plot_w * (min(hi, max(lo, v)) - lo) / (hi - lo)

    body = [f'<line x1="{px(0):.1f}" y1="{top - 4}" x2="{px(0):.1f}" y2="{top + len(rows) * row_h}" '
            f'stroke="#888" stroke-dasharray="3 3"/>']
    for tick in (lo, 0.0, hi):
        body.append(f'<text x="{px(tick):.1f}" y="{height - 6}" text-anchor="middle" fill="#666">{escape(fmt(tick))}</text>')
    for i, (label, est, low, high, text) in enumerate(rows):
        y = top + i * row_h + 10
        body.append(f'<text x="{label_w - 6}" y="{y + 4}" text-anchor="end">{escape(label)}</text>')
        body.append(f'<line class="mark" x1="{px(low):.1f}" y1="{y}" x2="{px(high):.1f}" y2="{y}" '
                    f'stroke="{color(i + 1)}" stroke-width="2"/>')
        body.append(f'<circle class="mark" cx="{px(est):.1f}" cy="{y}" r="5" fill="{color(i + 1)}">'
                    f'<title>{escape(label)}: {escape(text)}</title></circle>')
        body.append(f'<text x="{WIDTH - right_w + 8}" y="{y + 4}">{escape(text)}</text>')
    return _svg(name, title, height, body)


def grouped(name: str, title: str, categories: Sequence[str],
            series: Sequence[tuple[str, Sequence[float | None], int]], max_value: float | None = None,
            fmt: Callable[[float], str] = str) -> Markup:
    """Vertical bars, one group per category, one bar per series (name, values, colour index)."""
    left, bottom = 36, 40
    legend, top = _legend([(name_s, color(col)) for name_s, _, col in series], left)
    top += 8
    height = 214 + top
    plot_h = height - bottom - top
    plot_w = WIDTH - left - 10
    vals = [v for _, values, _ in series for v in values if v is not None]
    span = max_value if max_value else max(vals + [1e-9])
    group_w = plot_w / max(1, len(categories))
    bar_w = max(2.0, (group_w - 10) / max(1, len(series)))
    body = [f'<line x1="{left}" y1="{top + plot_h}" x2="{WIDTH - 10}" y2="{top + plot_h}" stroke="#888"/>',
            f'<text x="{left - 4}" y="{top + 4}" text-anchor="end" fill="#666">{escape(fmt(span))}</text>',
            f'<text x="{left - 4}" y="{top + plot_h}" text-anchor="end" fill="#666">{escape(fmt(0.0))}</text>']
    body.extend(legend)
    for c, cat in enumerate(categories):
        gx = left + c * group_w + 5
        for s, (name_s, values, col) in enumerate(series):
            value = values[c]
            x = gx + s * bar_w
            if value is None:
                continue
            h = plot_h * max(0.0, value) / span if span > 0 else 0.0
            body.append(f'<rect class="mark" x="{x:.1f}" y="{top + plot_h - h:.1f}" width="{bar_w - 1:.1f}" '
                        f'height="{max(h, 0.5):.1f}" fill="{color(col)}">'
                        f'<title>{escape(cat)} / {escape(name_s)}: {escape(fmt(value))}</title></rect>')
        short = cat if len(cat) <= 18 else cat[:17] + "…"
        body.append(f'<text x="{gx + group_w / 2 - 5:.1f}" y="{top + plot_h + 16}" text-anchor="middle">'
                    f'{escape(short)}</text>')
    return _svg(name, title, height, body)
