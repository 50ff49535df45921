# -*- coding: utf-8 -*-
"""The cluster report: the artifacts of the runs so far -> one self-contained HTML page.

``collect(artifacts_dir)`` reads what the stages saved (plan.json, preflight.json,
versions.json, net_check/results.json, bench/*.json) into one dict; ``render(data)`` turns that
dict into the page, with no I/O: the topology drawn as inline SVG from the plan (hosts on a
circle, one line per cable labelled with its ports, addresses, speed and link class; TB4/TB3,
slow and missing cables highlighted), the preflight findings with their fixes, the collective
check per cable, the benchmark runs as a table and inline SVG charts, and the versions per Mac.
No script, stylesheet, font or image is loaded from anywhere: the page works offline. Every
text from the data is escaped. The same data gives the same page, byte for byte (no clock is
read), so the report is rewritten only when something it shows changed.
"""

from __future__ import annotations

import datetime
import html
import json
import math
import os
from collections import Counter

from ansible_collections.mlx.cluster.plugins.plugin_utils import preflight as preflight_rules
from ansible_collections.mlx.cluster.plugins.plugin_utils.bench_runs import SIDE_BY_SIDE_SUFFIX
from ansible_collections.mlx.cluster.plugins.plugin_utils.plan_common import cable_name
from ansible_collections.mlx.cluster.plugins.plugin_utils.preflight import is_number

REPORT_NAME = "report.html"
PREFLIGHT_NAME = "preflight.json"
VERSIONS_NAME = "versions.json"
# what the models stage's last run that copied anything moved (roles/model_sync)
MODEL_SYNC_NAME = "model_sync.json"
PLAN_NAME = "plan.json"
NET_CHECK_RESULTS = os.path.join("net_check", "results.json")
BENCH_DIR = "bench"

COLORS = {
    "cable": "#2f6fb3",
    "tb4": "#e07b00",
    "slow": "#c62828",
    "missing": "#c62828",
    "grey": "#888888",
    "text": "#1d2733",
    "ok": "#2e7d32",
}
SERIES_COLORS = ["#2f6fb3", "#e07b00", "#2e7d32", "#8e44ad", "#c62828", "#00838f", "#6d4c41", "#ad1457"]

# The benchmark result's keys, in the order the table shows them (roles/benchmark/files/
# mlx_cluster_bench.py writes them, the role adds the wiring and each Mac's macOS); a result of
# an older benchmark lacks some, a newer one may have more: its other plain values follow.
# `gen_spread` and `mlx` are made here from `stats` and `versions`.
BENCH_COLUMNS = [
    ("backend", "backend"),
    ("fallback_from", "fell back from"),
    ("compared_as", "as asked"),
    ("over", "over"),
    ("round", "round"),
    ("world_size", "ranks"),
    ("mode", "mode"),
    ("prompt_tokens", "prompt tok"),
    ("generation_tokens", "gen tok"),
    ("num_trials", "trials"),
    ("prompt_tps", "prompt tok/s"),
    ("generation_tps", "gen tok/s"),
    ("gen_spread", "gen tok/s min–max"),
    ("peak_memory_gb", "peak GB (largest rank)"),
    ("fast_synch", "FAST_SYNCH"),
    ("mlx", "mlx / mlx-lm"),
    ("tokens_sha256", "tokens sha256"),
]
# Shown elsewhere (versions per Mac, the topology) or too long for a cell.
BENCH_HIDDEN = {
    "tokens",
    "hostname",
    "model",
    "trials",
    "stats",
    "versions",
    "topology",
    "cables",
    "macos",
    "macos_build",
    "fallback_reason",
}
# Above this many cables the picture labels only the cables with a finding.
DENSE_CABLES = 12
# A Mac's box on the picture, in px.
HOST_W, HOST_H = 176, 58


# --------------------------------------------------------------------------------------------
# reading the artifacts (the only I/O here)
# --------------------------------------------------------------------------------------------


def _mtime(path):
    """A file's modification time as text (UTC, to the second): when its stage last wrote it."""
    stamp = datetime.datetime.fromtimestamp(os.stat(path).st_mtime, datetime.timezone.utc)
    return stamp.strftime("%Y-%m-%d %H:%M:%S UTC")


def _read_json(path, notes):
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        notes.append("%s is unreadable (%s): it is left out" % (path, exc))
        return None


def collect(artifacts_dir):
    """Everything the report shows, from the artifacts directory. Missing files leave their
    section empty (the stage has not run yet); unreadable ones are named in ``notes``."""
    notes = []
    data = {"notes": notes, "bench": []}
    for key, name in (
        ("plan", PLAN_NAME),
        ("preflight", PREFLIGHT_NAME),
        ("versions", VERSIONS_NAME),
        ("model_sync", MODEL_SYNC_NAME),
        ("net_check", NET_CHECK_RESULTS),
    ):
        path = os.path.join(artifacts_dir, name)
        value = _read_json(path, notes)
        if value is not None:
            data[key] = value
            data[key + "_time"] = _mtime(path)
    bench = os.path.join(artifacts_dir, BENCH_DIR)
    names = sorted(n for n in os.listdir(bench) if n.endswith(".json")) if os.path.isdir(bench) else []
    for name in names:
        run = _read_json(os.path.join(bench, name), notes)
        if isinstance(run, dict) and "generation_tps" in run:
            data["bench"].append(dict(run, _run=name.split("-", 1)[0], _time=_mtime(os.path.join(bench, name))))
        elif name.endswith(SIDE_BY_SIDE_SUFFIX) and isinstance(run, dict) and isinstance(run.get("modes"), dict):
            # the comparison of a run that compared backends (bench_runs.side_by_side): the latest
            stamp = _mtime(os.path.join(bench, name))
            if stamp >= (data.get("bench_compare") or {}).get("_time", ""):
                data["bench_compare"] = dict(run, _time=stamp)
    return data


# --------------------------------------------------------------------------------------------
# small pieces
# --------------------------------------------------------------------------------------------


def _e(value):
    return html.escape("" if value is None else str(value), quote=True)


def _num(value, digits=2):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "" if value is None else str(value)
    if isinstance(value, int):
        return str(value)
    if 0 < abs(value) < 1:  # 0.00093 GB, 0.872 Gb/s: three significant digits
        return "%.3g" % value
    return "%.*f" % (digits, value)


def _table(headers, rows, cls=""):
    """rows: lists of cells; a cell is text (escaped here) or (text, css class)."""
    out = ['<table class="%s">' % _e(cls), "<thead><tr>"]
    out += ["<th>%s</th>" % _e(h) for h in headers]
    out.append("</tr></thead><tbody>")
    for row in rows:
        out.append("<tr>")
        for cell in row:
            text, klass = cell if isinstance(cell, tuple) else (cell, "")
            out.append('<td class="%s">%s</td>' % (_e(klass), _e(text)) if klass else "<td>%s</td>" % _e(text))
        out.append("</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _section(ident, title, body, when=None):
    stamp = ' <span class="when">as of %s</span>' % _e(when) if when else ""
    return '<section id="%s"><h2>%s%s</h2>%s</section>' % (_e(ident), _e(title), stamp, body)


def _empty(text):
    return '<p class="empty">%s</p>' % _e(text)


def _svg_text(x, y, text, size=12, anchor="middle", weight="normal", color=None, cls=None):
    fill = ' fill="%s"' % color if color else ""
    klass = ' class="%s"' % cls if cls else ""
    return '<text x="%.1f" y="%.1f" font-size="%d" text-anchor="%s" font-weight="%s"%s%s>%s</text>' % (
        x,
        y,
        size,
        anchor,
        weight,
        fill,
        klass,
        _e(text),
    )


# --------------------------------------------------------------------------------------------
# what the data says about each cable
# --------------------------------------------------------------------------------------------


def _measured(net_check, cables):
    """(cable id -> {gbps, slow, runs}, the slow ratio) from the collective check's per-cable results
    (matched by cable id, or by the name the check gives when the id is absent)."""
    results = [r for r in ((net_check or {}).get("cables") or []) if isinstance(r, dict)]
    ratio = (net_check or {}).get("slow_ratio")
    ratio = ratio if is_number(ratio) else preflight_rules.SLOW_RATIO
    slow_named = {(r.get("cable"), r.get("name")) for r in preflight_rules.slow_cables(results, ratio)}
    by_name = {cable_name(c["a"], c["b"]): c["id"] for c in cables}
    out = {}
    for r in results:
        cid = r.get("cable") or by_name.get(r.get("name"))
        if cid:
            runs = r.get("runs") if isinstance(r.get("runs"), list) else []
            out[cid] = {"gbps": r.get("gbps"), "slow": (r.get("cable"), r.get("name")) in slow_named, "runs": len(runs)}
    return out, ratio


def _cable_status(cable, no_rdma, measured):
    """[(label, css class)] for a cable: what is wrong with it, worst first; [] when fine."""
    marks = []
    m = measured.get(cable["id"]) or {}
    if m.get("slow"):
        marks.append(("slow in the collective check", "bad"))
    if cable.get("link_class") in ("TB4", "TB3"):
        marks.append(("%s link (%s Gb/s)" % (cable["link_class"], cable.get("speed_gbps")), "warn"))
    if cable.get("sighting") == "one-sided":
        marks.append(("seen from one side only", "warn"))
    if cable.get("via"):
        marks.append(("through %s" % ", ".join(cable["via"]), "warn"))
    if cable["id"] in no_rdma:
        marks.append(("no RDMA: %s" % "; ".join(no_rdma[cable["id"]]), "warn"))
    return marks


def _no_rdma(topology):
    out = {}
    for e in (topology or {}).get("no_rdma") or []:
        if isinstance(e, dict) and e.get("cable"):
            out[e["cable"]] = [str(r) for r in e.get("reasons") or []] or ["not RDMA-capable"]
    return out


# --------------------------------------------------------------------------------------------
# the topology picture
# --------------------------------------------------------------------------------------------


class _Boxes:
    """Label placement: the first candidate position whose box overlaps nothing placed yet."""

    def __init__(self):
        self.boxes = []

    @staticmethod
    def _overlap(a, b):
        return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]

    def add(self, box):
        self.boxes.append(box)

    def place(self, candidates, width, height):
        """candidates: [(cx, cy)]; returns the chosen centre and records its box."""
        best, best_hits = None, None
        for cx, cy in candidates:
            box = (cx - width / 2 - 3, cy - height / 2 - 2, cx + width / 2 + 3, cy + height / 2 + 2)
            hits = sum(self._overlap(box, b) for b in self.boxes)
            if hits == 0:
                self.boxes.append(box)
                return cx, cy
            if best_hits is None or hits < best_hits:
                best, best_hits = (cx, cy, box), hits
        self.boxes.append(best[2])
        return best[0], best[1]


def _text_width(lines, size):
    return max(len(str(t)) for t in lines) * size * 0.6 + 8


def _label(boxes, candidates, lines, size, colors, out, weight="normal"):
    """A label of several lines on a white ground, at the first free candidate position."""
    width = _text_width(lines, size)
    height = len(lines) * (size + 3) + 4
    cx, cy = boxes.place(candidates, width, height)
    out.append(
        '<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" rx="3" fill="#ffffff" '
        'fill-opacity="0.92" stroke="#d0d7de" stroke-width="0.6"/>' % (cx - width / 2, cy - height / 2, width, height)
    )
    y = cy - height / 2 + size + 1
    for text, color in zip(lines, colors):
        out.append(_svg_text(cx, y, text, size=size, color=color, weight=weight))
        y += size + 3


def _picture_hosts(plan, topology, cables):
    """The hosts in drawing order: the ring's, then the plan's, then any other a cable names."""
    hosts = list(topology.get("ring") or [])
    hosts += [h for h in plan.get("hosts") or topology.get("hosts") or [] if h not in hosts]
    hosts += sorted({c[s]["host"] for c in cables for s in ("a", "b")} - set(hosts))
    return hosts


def _host_positions(hosts, cx, cy):
    """{host: (x, y)}: the centres of the hosts' boxes, round (cx, cy)."""
    n = len(hosts)
    # an ellipse as wide as the page allows; an even count starts half a step round, so four
    # Macs make a square (the ring on its sides, the mesh's other cables on its diagonals)
    rx, ry = (0, 0) if n <= 1 else (300, 0) if n == 2 else (340 if n < 7 else 380, 250)
    start = -math.pi / 2 + (math.pi / n if n and n % 2 == 0 and n > 2 else 0)
    return {
        h: (
            cx + rx * math.cos(start + 2 * math.pi * i / max(n, 1)),
            cy + ry * math.sin(start + 2 * math.pi * i / max(n, 1)),
        )
        for i, h in enumerate(hosts)
    }


def _edge_point(centre, dx, dy, extra):
    """Where the line from a host box's centre along (dx, dy) leaves the box, plus `extra` px."""
    tx = (HOST_W / 2) / abs(dx) if dx else float("inf")
    ty = (HOST_H / 2) / abs(dy) if dy else float("inf")
    t = min(tx, ty) + extra
    return centre[0] + dx * t, centre[1] + dy * t


def _cable_line(c, start, end, shift, slow, tb4, color):
    """The <line> of a cable from its a end to its b end, moved sideways by `shift` (dx, dy)."""
    stroke = 5 if (slow or tb4) else 2.5
    dash = ' stroke-dasharray="9 5"' if c.get("sighting") == "one-sided" or c.get("via") else ""
    return (
        '<line class="cable%s" data-cable="%s" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" '
        'stroke="%s" stroke-width="%s"%s/>'
        % (
            " slow" if slow else " tb4" if tb4 else "",
            _e(c["id"]),
            start[0] + shift[0],
            start[1] + shift[1],
            end[0] + shift[0],
            end[1] + shift[1],
            color,
            stroke,
            dash,
        )
    )


def _middle_text(c, marks, m, slow, tb4, color):
    """(lines, colours) of the label in a cable's middle: speed and class, measured bandwidth,
    what is wrong."""
    speed = "%s Gb/s %s" % (c.get("speed_gbps") or "?", c.get("link_class") or "")
    lines, colors = [speed.strip()], [color if tb4 else COLORS["text"]]
    if m and is_number(m.get("gbps")):
        lines.append("measured %s Gb/s%s" % (_num(m["gbps"]), " (slow)" if slow else ""))
        colors.append(COLORS["slow"] if slow else COLORS["text"])
    for text, klass in marks:
        if klass == "warn" and not text.startswith(c.get("link_class") or "-"):
            lines.append(text if len(text) <= 44 else text[:43] + "…")
            colors.append(COLORS["tb4"])
    return lines, colors


def _end_labels(c, start, end, length, shift, pos, entry):
    """[(candidate centres, lines, colours)]: each end's port and address, near its Mac."""
    out = []
    for end_name, (hx, hy), (ox, oy) in (("a", start, end), ("b", end, start)):
        addr = (entry.get(end_name) or {}).get("address")
        dx, dy = (ox - hx) / length, (oy - hy) / length
        cands = []
        for extra in (22, 40, 58, 76):
            ex_, ey_ = _edge_point(pos[c[end_name]["host"]], dx, dy, extra)
            cands.append((ex_ + shift[0], ey_ + shift[1]))
        out.append((cands, [c[end_name]["iface"]] + ([addr] if addr else []), [COLORS["text"], "#555"]))
    return out


def _pair_drawings(h1, h2, group, pos, known, dense):
    """The cables between two Macs, side by side: ([<line>], [end labels], [middle labels])."""
    measured, no_rdma, ip_cables = known
    (x1, y1), (x2, y2) = pos[h1], pos[h2]
    length = math.hypot(x2 - x1, y2 - y1) or 1
    ux, uy = (x2 - x1) / length, (y2 - y1) / length
    px, py = -uy, ux
    body, ends, middles = [], [], []
    for i, c in enumerate(sorted(group, key=lambda c: c["id"])):
        off = (i - (len(group) - 1) / 2) * 16
        marks = _cable_status(c, no_rdma, measured)
        slow = (measured.get(c["id"]) or {}).get("slow")
        tb4 = c.get("link_class") in ("TB4", "TB3")
        color = COLORS["slow"] if slow else COLORS["tb4"] if tb4 else COLORS["cable"]
        start, end = ((x1, y1), (x2, y2)) if c["a"]["host"] == h1 else ((x2, y2), (x1, y1))
        shift = (px * off, py * off)
        body.append(_cable_line(c, start, end, shift, slow, tb4, color))
        lines, colors = _middle_text(c, marks, measured.get(c["id"]), slow, tb4, color)
        # beside the line first (above a flat one), then along it
        cands = [
            (x1 + (x2 - x1) * t + px * (off + side), y1 + (y2 - y1) * t + py * (off + side))
            for side in (0, -40, 40)
            for t in (0.5, 0.4, 0.6, 0.32, 0.68)
        ]
        if not dense or marks:
            middles.append((cands, lines, colors))
        if not dense:
            ends += _end_labels(c, start, end, length, shift, pos, ip_cables.get(c["id"]) or {})
    return body, ends, middles


def _cable_drawings(topology, cables, pos, known, dense):
    """([<line>], [end labels], [middle labels]) of every cable and every missing one; a label is
    (candidate centres, lines, colours). known: (measured, no_rdma, the plan's addresses)."""
    body, ends, middles = [], [], []
    # one line per cable; several cables between the same two Macs run side by side
    pairs = {}
    for c in cables:
        pairs.setdefault(tuple(sorted((c["a"]["host"], c["b"]["host"]))), []).append(c)
    missing = [tuple(p) for p in topology.get("missing") or [] if len(p) == 2 and p[0] in pos and p[1] in pos]
    for (h1, h2), group in sorted(pairs.items()):
        if h1 not in pos or h2 not in pos or h1 == h2:
            continue
        drawn = _pair_drawings(h1, h2, group, pos, known, dense)
        body += drawn[0]
        ends += drawn[1]
        middles += drawn[2]
    for h1, h2 in missing:
        (x1, y1), (x2, y2) = pos[h1], pos[h2]
        body.append(
            '<line class="missing" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" '
            'stroke-width="2.5" stroke-dasharray="3 6"/>' % (x1, y1, x2, y2, COLORS["missing"])
        )
        cands = [(x1 + (x2 - x1) * t, y1 + (y2 - y1) * t) for t in (0.5, 0.4, 0.6, 0.3, 0.7)]
        middles.append((cands, ["missing: %s <-> %s" % (h1, h2)], [COLORS["missing"]]))
    return body, ends, middles


def _placed_labels(hosts, pos, ends, middles):
    """The labels' SVG, each where it overlaps no host box and no label placed before it."""
    boxes = _Boxes()
    for h in hosts:
        x, y = pos[h]
        boxes.add((x - HOST_W / 2, y - HOST_H / 2, x + HOST_W / 2, y + HOST_H / 2))
    labels = []
    # the ends first (each has little room, by its Mac), then the middles
    for cands, lines, colors in ends:
        _label(boxes, cands, lines, 10, colors, labels)
    for cands, lines, colors in middles:
        _label(boxes, cands, lines, 11, colors, labels)
    return labels


def _host_nodes(hosts, pos, plan, macs):
    """The hosts' boxes: name, rank (and coordinator role), macOS version."""
    rank = {h: i for i, h in enumerate(plan.get("hosts") or [])}
    nodes = []
    for h in hosts:
        x, y = pos[h]
        osv = (macs.get(h) or {}).get("os") or {}
        sub = "rank %s" % rank[h] if h in rank else "not in the plan"
        if (plan.get("coordinators") or {}).get(h):
            sub += " · %s" % plan["coordinators"][h]
        third = ""
        if osv.get("product_version"):
            third = "macOS %s (%s)" % (osv.get("product_version"), osv.get("build_version") or "?")
        nodes.append(
            '<g class="host" data-host="%s"><rect x="%.1f" y="%.1f" width="%d" height="%d" rx="9" '
            'fill="#f6f8fa" stroke="%s" stroke-width="1.6"/>'
            % (_e(h), x - HOST_W / 2, y - HOST_H / 2, HOST_W, HOST_H, COLORS["text"])
        )
        nodes.append(_svg_text(x, y - HOST_H / 2 + 18, h, size=15, weight="bold"))
        nodes.append(_svg_text(x, y - HOST_H / 2 + 34, sub, size=10, color="#555"))
        if third:
            nodes.append(_svg_text(x, y - HOST_H / 2 + 48, third, size=10, color="#555"))
        nodes.append("</g>")
    return nodes


def _picture_header(topology, cables, dense):
    """The picture's title (backend, ring) and, on a dense one, why most cables have no label."""
    title = "backend %s" % (topology.get("backend") or "none fits the wiring")
    if topology.get("ring"):
        title += " · ring %s" % " → ".join(topology["ring"])
    header = _svg_text(16, 24, title, size=13, anchor="start", weight="bold")
    if dense:
        header += _svg_text(
            16,
            42,
            "%d cables: only those with a finding are labelled; the table below "
            "has every cable's ports, addresses and speed" % len(cables),
            size=11,
            anchor="start",
            color="#555",
        )
    return header


def topology_svg(plan, macs=None, net_check=None):
    """The cluster as an SVG drawing: hosts on a circle (ring order when there is a ring), one
    line per cable, labels with ports, addresses, speed, class and measured bandwidth."""
    plan = plan or {}
    topology = plan.get("topology") or {}
    cables = [c for c in (plan.get("links") or {}).get("cables") or [] if isinstance(c, dict)]
    ip_cables = (plan.get("ip_plan") or {}).get("cables") or {}
    hosts = _picture_hosts(plan, topology, cables)
    measured, _ = _measured(net_check, cables)
    known = (measured, _no_rdma(topology), ip_cables)
    width, height = 1000, 660
    pos = _host_positions(hosts, width / 2, 310)
    # a dense picture (a mesh of 6 Macs and more) labels only the cables with a finding: every
    # cable's ports, addresses and speed are in the table below it
    dense = len(cables) > DENSE_CABLES
    body, ends, middles = _cable_drawings(topology, cables, pos, known, dense)
    labels = _placed_labels(hosts, pos, ends, middles)
    nodes = _host_nodes(hosts, pos, plan, macs or {})
    return (
        '<svg xmlns="http://www.w3.org/2000/svg" class="topology" role="img" '
        'aria-label="cluster topology" viewBox="0 0 %d %d" width="%d" height="%d" '
        'font-family="Helvetica, Arial, sans-serif">'
        % (width, height, width, height)
        + '<rect width="100%" height="100%" fill="#ffffff"/>'
        + _picture_header(topology, cables, dense)
        + "".join(body)
        + "".join(nodes)
        + "".join(labels)
        + _legend(width, height - 62)
        + "</svg>"
    )


def _legend(width, y):
    items = [
        ("cable (Thunderbolt 5)", COLORS["cable"], 2.5, ""),
        ("TB4/TB3 link: slower, no RDMA", COLORS["tb4"], 5, ""),
        ("slow in the collective check", COLORS["slow"], 5, ""),
        ("missing (a full mesh needs it)", COLORS["missing"], 2.5, "3 6"),
        ("seen from one side / through a dock", COLORS["grey"], 2.5, "9 5"),
    ]
    out = [
        '<g class="legend"><rect x="10" y="%d" width="%d" height="56" rx="5" fill="#fafbfc" '
        'stroke="#d0d7de"/>' % (y - 4, width - 20)
    ]
    x, row = 24, 0
    for text, color, stroke, dash in items:
        step = 40 + len(text) * 6.2 + 22
        if x + step > width - 20:
            x, row = 24, row + 1
        ly = y + 12 + 22 * row
        dash_attr = ' stroke-dasharray="%s"' % dash if dash else ""
        out.append(
            '<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="%s"%s/>'
            % (x, ly, x + 34, ly, color, stroke, dash_attr)
        )
        out.append(_svg_text(x + 40, ly + 4, text, size=11, anchor="start"))
        x += step
    out.append("</g>")
    return "".join(out)


# --------------------------------------------------------------------------------------------
# charts
# --------------------------------------------------------------------------------------------


def _nice_max(value, ticks=4):
    """The top of an axis at or above `value` that `ticks` round steps (1, 2, 2.5, 5 x 10^k) reach."""
    if value <= 0:
        return float(ticks)
    raw = value / ticks
    exp = 10 ** math.floor(math.log10(raw))
    for step in (1, 2, 2.5, 5, 10):
        if raw <= step * exp:
            return step * exp * ticks
    return 10 * exp * ticks


def line_chart(title, unit, labels, series, width=960, height=280):
    """series: [(name, [value, (value, low, high) or None per label])] -> SVG with one line (and
    dots) per series; a low-high range is drawn as a bar through the dot."""
    left, right, top, bottom = 70, 200, 34, 52
    plot_w, plot_h = width - left - right, height - top - bottom
    ranges = [[v if isinstance(v, tuple) else (v, None, None) for v in vals] for _, vals in series]
    series = [(name, [v[0] for v in rng]) for (name, _), rng in zip(series, ranges)]
    values = [v for _, vals in series for v in vals if is_number(v)]
    values += [hi for rng in ranges for _, _, hi in rng if is_number(hi)]
    ymax = _nice_max(max(values) if values else 1.0)
    n = len(labels)

    def xpos(i):
        return left + (plot_w * (i + 0.5) / n if n else 0)

    def ypos(v):
        return top + plot_h - plot_h * v / ymax

    out = [
        '<svg xmlns="http://www.w3.org/2000/svg" class="chart" role="img" aria-label="%s" '
        'viewBox="0 0 %d %d" width="%d" height="%d" font-family="Helvetica, Arial, sans-serif">'
        % (_e(title), width, height, width, height),
        '<rect width="100%" height="100%" fill="#ffffff"/>',
        _svg_text(left, 20, title, size=13, anchor="start", weight="bold"),
    ]
    for k in range(5):
        v = ymax * k / 4
        y = ypos(v)
        out.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#e1e4e8"/>' % (left, y, left + plot_w, y))
        out.append(_svg_text(left - 6, y + 4, ("%g" % round(v, 6)), size=10, anchor="end", color="#555"))
    out.append(
        _svg_text(16, top + plot_h / 2, unit, size=10, anchor="middle", color="#555").replace(
            "<text ", '<text transform="rotate(-90 16 %.1f)" ' % (top + plot_h / 2), 1
        )
    )
    out.append(
        '<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#555"/>' % (left, top + plot_h, left + plot_w, top + plot_h)
    )
    step = max(1, math.ceil(n / 10))
    for i, lab in enumerate(labels):
        if i % step == 0 or i == n - 1:
            out.append(_svg_text(xpos(i), top + plot_h + 16, lab, size=10, color="#555"))
    for s, (name, vals) in enumerate(series):
        color = SERIES_COLORS[s % len(SERIES_COLORS)]
        pts = [(xpos(i), ypos(v)) for i, v in enumerate(vals) if is_number(v)]
        if len(pts) > 1:
            out.append(
                '<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>'
                % (color, " ".join("%.1f,%.1f" % p for p in pts))
            )
        for i, v in enumerate(vals):
            if is_number(v):
                _, lo, hi = ranges[s][i]
                if is_number(lo) and is_number(hi):
                    out.append(
                        '<line class="range" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" '
                        'stroke-width="2" stroke-opacity="0.6"/>' % (xpos(i), ypos(lo), xpos(i), ypos(hi), color)
                    )
                out.append(
                    '<circle cx="%.1f" cy="%.1f" r="4" fill="%s"><title>%s: %s</title></circle>'
                    % (xpos(i), ypos(v), color, _e(name), _e(_num(v)))
                )
        last = [(i, v) for i, v in enumerate(vals) if is_number(v)]
        if last:
            i, v = last[-1]
            out.append(_svg_text(xpos(i) + 7, ypos(v) - 6, _num(v), size=10, anchor="start", color=color))
        ly = top + 8 + 18 * s
        out.append(
            '<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="3"/>'
            % (left + plot_w + 16, ly, left + plot_w + 36, ly, color)
        )
        out.append(_svg_text(left + plot_w + 42, ly + 4, name, size=11, anchor="start"))
    out.append("</svg>")
    return "".join(out)


def bar_chart(title, unit, bars, marker=None, width=960):
    """bars: [(label, value, css color)] -> horizontal bars; marker: (value, text) dashed line."""
    left, right, top, row = 230, 110, 34, 24
    height = top + row * max(len(bars), 1) + 34
    plot_w = width - left - right
    values = [v for _, v, _ in bars if is_number(v)] + ([marker[0]] if marker and is_number(marker[0]) else [])
    xmax = _nice_max(max(values) if values else 1.0)
    out = [
        '<svg xmlns="http://www.w3.org/2000/svg" class="chart" role="img" aria-label="%s" '
        'viewBox="0 0 %d %d" width="%d" height="%d" font-family="Helvetica, Arial, sans-serif">'
        % (_e(title), width, height, width, height),
        '<rect width="100%" height="100%" fill="#ffffff"/>',
        _svg_text(16, 20, title, size=13, anchor="start", weight="bold"),
    ]
    for i, (label, value, color) in enumerate(bars):
        y = top + row * i
        out.append(_svg_text(left - 8, y + 15, label, size=11, anchor="end"))
        if is_number(value):
            w = plot_w * value / xmax
            out.append('<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>' % (left, y + 3, w, row - 7, color))
            out.append(_svg_text(left + w + 6, y + 15, "%s %s" % (_num(value), unit), size=11, anchor="start"))
        else:
            out.append(_svg_text(left + 6, y + 15, "no result", size=11, anchor="start", color=COLORS["slow"]))
    if marker and is_number(marker[0]):
        x = left + plot_w * marker[0] / xmax
        out.append(
            '<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#555" stroke-dasharray="4 4"/>'
            % (x, top - 4, x, top + row * len(bars))
        )
        out.append(_svg_text(x, top + row * len(bars) + 16, marker[1], size=10, color="#555"))
    out.append("</svg>")
    return "".join(out)


# --------------------------------------------------------------------------------------------
# the sections
# --------------------------------------------------------------------------------------------


def _summary(data):
    plan = data.get("plan") or {}
    topology = plan.get("topology") or {}
    cables = (plan.get("links") or {}).get("cables") or []
    problems = data.get("preflight")
    cards = [
        ("Macs", str(len(plan.get("hosts") or [])) if plan else "—", ""),
        ("cables", str(len(cables)) if plan else "—", ""),
        (
            "backend",
            topology.get("backend") or ("none fits" if plan else "—"),
            "" if topology.get("backend") or not plan else "bad",
        ),
    ]
    if isinstance(problems, list):
        n_err = sum(p.get("severity") == "error" for p in problems if isinstance(p, dict))
        n_warn = sum(p.get("severity") == "warning" for p in problems if isinstance(p, dict))
        cards.append(
            (
                "preflight",
                "%d error(s), %d warning(s)" % (n_err, n_warn) if problems else "no problems",
                "bad" if n_err else "warn" if n_warn else "good",
            )
        )
    else:
        cards.append(("preflight", "not run yet", ""))
    nc = data.get("net_check")
    if isinstance(nc, dict):
        sums = [r.get("ok") for r in ((nc.get("sweep") or {}).get("results") or []) if isinstance(r, dict)]
        measured, _ = _measured(nc, [c for c in cables if isinstance(c, dict)])
        slow = sum(1 for m in measured.values() if m.get("slow"))
        text = "every sum right" if sums and all(sums) else "WRONG SUMS" if sums else "no sweep"
        if slow:
            text += ", %d slow cable(s)" % slow
        cards.append(("collective check", text, "good" if sums and all(sums) and not slow else "bad"))
    else:
        cards.append(("collective check", "not run yet", ""))
    runs = data.get("bench") or []
    if runs:
        last = _runs_in_order(runs)[-1]
        best = max(
            (
                (r.get("generation_tps"), str(r.get("mode")))
                for r in runs
                if r.get("_run") == last[0] and is_number(r.get("generation_tps"))
            ),
            default=None,
        )
        cards.append(
            ("benchmark, last run", "%s gen tok/s (%s)" % (_num(best[0]), best[1]) if best else "no numbers", "")
        )
    else:
        cards.append(("benchmark", "not run yet", ""))
    out = ['<div class="cards">']
    for name, value, klass in cards:
        out.append(
            '<div class="card %s"><div class="k">%s</div><div class="v">%s</div></div>'
            % (_e(klass), _e(name), _e(value))
        )
    out.append("</div>")
    if topology.get("backend_reason") or topology.get("message"):
        out.append('<p class="reason">%s</p>' % _e(topology.get("message") or topology.get("backend_reason")))
    if topology.get("backend_fix"):
        out.append('<p class="fix">Fix: %s</p>' % _e(topology["backend_fix"]))
    return "".join(out)


def _measured_cell(m):
    """A cable's measured bandwidth as a table cell: best of how many runs, slow or not."""
    return (
        (
            _num(m.get("gbps"))
            + (" (best of %d)" % m["runs"] if m.get("runs", 0) > 1 else "")
            + (" (slow)" if m.get("slow") else ""),
            "bad" if m.get("slow") else "",
        )
        if m
        else ""
    )


def _cable_row(c, entry, m, marks, rdma):
    """A cable's row in the topology's table: its ends and their addresses, network, speed, class,
    RDMA, measured bandwidth and status."""
    status = (
        ("; ".join(t for t, _ in marks), "bad" if any(k == "bad" for _, k in marks) else "warn")
        if marks
        else ("ok", "good")
    )
    return [
        c["a"]["host"] + ":" + c["a"]["iface"],
        (entry.get("a") or {}).get("address") or "",
        c["b"]["host"] + ":" + c["b"]["iface"],
        (entry.get("b") or {}).get("address") or "",
        entry.get("network") or "",
        "%s Gb/s" % c["speed_gbps"] if c.get("speed_gbps") else "unknown",
        (c.get("link_class") or "?", "warn" if c.get("link_class") in ("TB4", "TB3") else ""),
        "yes" if rdma else "no",
        _measured_cell(m),
        status,
    ]


def _missing_note(topology):
    """The paragraph naming the missing cables and what that means for the backend; "" when none."""
    missing = [p for p in topology.get("missing") or [] if len(p) == 2]
    if not missing:
        return ""
    return '<p class="missing">Missing cables (host pairs without one): %s. %s</p>' % (
        _e(", ".join("%s <-> %s" % tuple(p) for p in missing)),
        _e("A full mesh needs them; the %s backend runs without them." % topology["backend"])
        if topology.get("backend")
        else _e("No backend fits: add them, or cable a ring."),
    )


def _external_note(plan):
    """The paragraph naming the cables to Macs outside the inventory; "" when none."""
    external = (plan.get("links") or {}).get("external") or []
    if not external:
        return ""
    return '<p class="warn">Cabled to Macs outside the inventory: %s</p>' % _e(
        ", ".join("%s:%s -> %s" % (e.get("host"), e.get("iface"), e.get("peer_name") or "unknown") for e in external)
    )


def _topology_section(data):
    plan = data.get("plan")
    if not isinstance(plan, dict):
        return _section("topology", "Topology", _empty("No plan yet: run site.yml (discovery plans the cluster)."))
    topology = plan.get("topology") or {}
    cables = [c for c in (plan.get("links") or {}).get("cables") or [] if isinstance(c, dict)]
    ip_cables = (plan.get("ip_plan") or {}).get("cables") or {}
    measured, _ = _measured(data.get("net_check"), cables)
    no_rdma = _no_rdma(topology)
    rdma_cables = set(topology.get("rdma_cables") or [])
    parts = ['<div class="picture">', topology_svg(plan, data.get("macs"), data.get("net_check")), "</div>"]
    rows = []
    for c in sorted(cables, key=lambda c: c["id"]):
        entry = ip_cables.get(c["id"]) or {}
        m = measured.get(c["id"]) or {}
        rows.append(_cable_row(c, entry, m, _cable_status(c, no_rdma, measured), c["id"] in rdma_cables))
    headers = ["end A", "address A", "end B", "address B", "network", "speed", "class", "RDMA", "measured Gb/s"]
    parts.append(_table(headers + ["status"], rows, "cables"))
    parts.append(_missing_note(topology))
    parts.append(_external_note(plan))
    return _section("topology", "Topology", "".join(parts), data.get("plan_time"))


def _preflight_section(data):
    problems = data.get("preflight")
    if not isinstance(problems, list):
        return _section(
            "preflight", "Preflight", _empty("Preflight has not run yet (ansible-playbook site.yml --tags rdma_check).")
        )
    if not problems:
        return _section("preflight", "Preflight", '<p class="good">No problems found.</p>', data.get("preflight_time"))
    order = {"error": 0, "warning": 1}
    rows = []
    for p in sorted(
        (p for p in problems if isinstance(p, dict)),
        key=lambda p: (order.get(p.get("severity"), 2), p.get("host") or "", p.get("port") or "", p.get("check") or ""),
    ):
        where = (p.get("host") or "cluster") + (":" + p["port"] if p.get("port") else "")
        sev = p.get("severity") or "?"
        rows.append(
            [
                (sev, "bad" if sev == "error" else "warn"),
                p.get("check") or "",
                where,
                p.get("msg") or "",
                p.get("fix") or "",
            ]
        )
    return _section(
        "preflight",
        "Preflight",
        _table(["severity", "check", "where", "finding", "fix"], rows, "preflight"),
        data.get("preflight_time"),
    )


def _sweep_parts(sweep):
    """The all_sum sweep's HTML: over how many ranks on which backend, a fallback to the ring,
    the table of sizes; [] without results."""
    results = [r for r in sweep.get("results") or [] if isinstance(r, dict)]
    if not results:
        return []
    parts = [
        "<p>all_sum over %s ranks (%s backend), every size checked:</p>"
        % (_e(sweep.get("world_size")), _e(sweep.get("backend")))
    ]
    if sweep.get("fallback_from"):
        parts.append(
            '<p class="fix">Fell back from %s to the ring backend: %s</p>'
            % (_e(sweep["fallback_from"]), _e(sweep.get("fallback_reason") or ""))
        )
    rows = [
        [
            str(r.get("bytes")),
            _num(r.get("latency_us_median"), 1),
            _num(r.get("bus_bandwidth_gbps"), 3),
            ("right", "good") if r.get("ok") else ("WRONG", "bad"),
        ]
        for r in results
    ]
    parts.append(_table(["bytes", "latency µs (median)", "bus bandwidth Gb/s", "sum"], rows, "sweep"))
    return parts


def _per_cable_status(r, slow_names, ratio, median):
    """A cable's status cell in the per-cable table: slow, no result or ok."""
    if r.get("name") in slow_names:
        return ("slow: below %s × the median %s Gb/s" % (_num(ratio), _num(median)), "bad")
    if not is_number(r.get("gbps")):
        return ("no result", "bad")
    return ("ok", "good")


def _per_cable_parts(nc, cables, per_cable):
    """Each cable measured alone: a bar chart against the median, a table, the fix when one is slow."""
    _, ratio = _measured(nc, cables)
    slow = preflight_rules.slow_cables(per_cable, ratio)
    slow_names = {r.get("name") for r in slow}
    median = preflight_rules.median([r["gbps"] for r in per_cable if is_number(r.get("gbps"))])
    bars = [
        (
            r.get("name") or r.get("cable") or "?",
            r.get("gbps"),
            COLORS["slow"] if r.get("name") in slow_names else COLORS["cable"],
        )
        for r in per_cable
    ]
    parts = [
        bar_chart(
            "Each cable alone (all_sum, 2 ranks)",
            "Gb/s",
            bars,
            (median, "median %s Gb/s" % _num(median)) if median is not None else None,
        )
    ]
    rows = [
        [
            r.get("name") or r.get("cable") or "?",
            _num(r.get("gbps"), 3),
            _per_cable_status(r, slow_names, ratio, median),
        ]
        for r in per_cable
    ]
    parts.append(_table(["cable", "bus bandwidth Gb/s", "status"], rows, "per-cable"))
    if slow:
        parts.append(
            '<p class="fix">Fix: a TB4 cable, a dock or a bad cable on that port: replace it with a '
            "Thunderbolt 5 cable directly between the two Macs.</p>"
        )
    return parts


def _net_check_section(data):
    nc = data.get("net_check")
    if not isinstance(nc, dict):
        return _section(
            "net_check",
            "Collective check",
            _empty("The collective check has not run yet (opt-in: ansible-playbook site.yml --tags net_check)."),
        )
    parts = _sweep_parts(nc.get("sweep") or {})
    plan = data.get("plan") or {}
    cables = [c for c in (plan.get("links") or {}).get("cables") or [] if isinstance(c, dict)]
    per_cable = [r for r in nc.get("cables") or [] if isinstance(r, dict)]
    if per_cable:
        parts += _per_cable_parts(nc, cables, per_cable)
    if not parts:
        parts.append(_empty("The collective check saved no results."))
    return _section("net_check", "Collective check", "".join(parts), data.get("net_check_time"))


def _runs_in_order(runs):
    """[(run id, time)] oldest first."""
    seen = {}
    for r in runs:
        key = r.get("_run") or "?"
        t = r.get("_time") or ""
        seen[key] = max(seen.get(key, ""), t)
    return sorted(seen.items(), key=lambda kv: (kv[1], kv[0]))


def _bench_row(run):
    """A benchmark result with the cells the table makes from its nested values."""
    row = dict(run)
    spread = ((run.get("stats") or {}).get("generation_tps") or {}) if isinstance(run.get("stats"), dict) else {}
    if is_number(spread.get("min")) and is_number(spread.get("max")):
        row["gen_spread"] = "%s–%s" % (_num(spread["min"]), _num(spread["max"]))
    peaks = run.get("peak_memory_gb")
    if isinstance(peaks, list) and peaks and all(is_number(p) for p in peaks):
        row["peak_memory_gb"] = max(peaks)
    if isinstance(run.get("fast_synch"), bool):
        row["fast_synch"] = "on" if run["fast_synch"] else "off"
    versions = run.get("versions") if isinstance(run.get("versions"), dict) else {}
    if versions.get("mlx") or versions.get("mlx_lm"):
        row["mlx"] = "%s / %s" % (versions.get("mlx") or "?", versions.get("mlx_lm") or "?")
    return row


def _spread(run, key):
    """(median, min, max) of a benchmark number over its trials; (value, None, None) without."""
    stats = (run.get("stats") or {}).get(key) if isinstance(run.get("stats"), dict) else None
    if isinstance(stats, dict) and is_number(stats.get("min")) and is_number(stats.get("max")):
        return run.get(key), stats["min"], stats["max"]
    return run.get(key), None, None


def _cell(key, value):
    if key == "tokens_sha256" and isinstance(value, str):
        return value[:12]
    if isinstance(value, list):
        return " / ".join(_num(v) if is_number(v) else str(v) for v in value)
    if isinstance(value, dict):
        return ", ".join("%s=%s" % (k, _cell(k, v)) for k, v in sorted(value.items()))
    text = _num(value)
    return text if len(text) <= 80 else text[:79] + "…"


def _compare_table(compare):
    """The latest comparison of backends, as HTML parts: each backend's tokens/s per mode and its
    ratio to the first one listed; [] without one."""
    if not isinstance(compare, dict) or not isinstance(compare.get("modes"), dict):
        return []
    rows = []
    for mode, entries in compare["modes"].items():
        for r in entries if isinstance(entries, list) else []:
            if not isinstance(r, dict):
                continue
            name = str(r.get("name")) + (" (fell back to the ring)" if r.get("fell_back") else "")
            rows.append(
                [str(mode), name, str(r.get("over"))]
                + [_num(r.get(k)) if is_number(r.get(k)) else "-" for k in ("prompt_tps", "generation_tps")]
                + ["%sx" % _num(r.get(k)) if is_number(r.get(k)) else "-" for k in ("prompt_ratio", "generation_ratio")]
            )
    headers = ["mode", "backend", "over", "prompt tok/s", "gen tok/s", "prompt ratio", "gen ratio"]
    return [
        "<h3>Backends side by side (run %s, %s round(s); ratios to %s, per round, then the median)</h3>"
        % (_e(str(compare.get("run_id") or "?")[:8]), _e(compare.get("rounds")), _e(compare.get("reference"))),
        _table(headers, rows, "bench"),
    ]


def _bench_section(data):
    runs = [r for r in data.get("bench") or [] if isinstance(r, dict)]
    if not runs:
        return _section(
            "benchmark",
            "Benchmark",
            _empty(
                "No benchmark yet (set model_sync_name or benchmark_model, then "
                "ansible-playbook site.yml --tags benchmark)."
            ),
        )
    order = _runs_in_order(runs)
    table_rows = [_bench_row(r) for r in runs]
    known = [k for k, _ in BENCH_COLUMNS]
    # a column only when some run has it; other plain values a newer benchmark writes follow
    columns = [(k, h) for k, h in BENCH_COLUMNS if any(r.get(k) is not None for r in table_rows)]
    columns += [
        (k, k)
        for k in sorted(
            {
                k
                for r in table_rows
                for k, v in r.items()
                if not k.startswith("_")
                and k not in known
                and k not in BENCH_HIDDEN
                and (v is None or isinstance(v, (str, int, float, bool)))
            }
        )
    ]
    headers = ["run", "time (UTC)"] + [h for _, h in columns] + ["model"]
    index = {run: i for i, (run, _) in enumerate(order)}
    rows = []
    for r in sorted(table_rows, key=lambda r: (-index.get(r.get("_run") or "?", 0), str(r.get("mode")))):
        rows.append(
            [(r.get("_run") or "?")[:8], (r.get("_time") or "")[5:16]]
            + [_cell(k, r.get(k)) for k, _ in columns]
            + [os.path.basename(str(r.get("model") or ""))]
        )
    parts = _compare_table(data.get("bench_compare")) + [
        '<div class="scroll">',
        _table(headers, rows, "bench"),
        "</div>",
    ]
    fell_back = [r for r in table_rows if r.get("fallback_reason")]
    if fell_back:  # the latest run that had to: RDMA could not be brought up, it ran on the ring
        last = max(fell_back, key=lambda r: (index.get(r.get("_run") or "?", 0), str(r.get("mode"))))
        parts.append(
            '<p class="fix">Run %s fell back from %s to the ring backend: %s</p>'
            % (_e((last.get("_run") or "?")[:8]), _e(last.get("fallback_from")), _e(last["fallback_reason"]))
        )
    labels = ["%s %s" % ((t or "")[5:16], run[:6]) for run, t in order]
    names = sorted(
        {(str(r.get("compared_as") or r.get("backend")), r.get("world_size"), str(r.get("mode"))) for r in runs},
        key=lambda k: (k[0], k[1] if isinstance(k[1], int) else 0, k[2]),
    )
    for key, title in (
        ("generation_tps", "Generation tokens/s per run (median; bar: min–max over trials)"),
        ("prompt_tps", "Prompt tokens/s per run (median; bar: min–max over trials)"),
    ):
        series = []
        for backend, world, mode in names:
            vals = []
            for run, _ in order:
                hits = [
                    _spread(r, key)
                    for r in runs
                    if r.get("_run") == run
                    and str(r.get("compared_as") or r.get("backend")) == backend
                    and r.get("world_size") == world
                    and str(r.get("mode")) == mode
                    and is_number(r.get(key))
                ]
                vals.append(hits[-1] if hits else None)
            series.append(("%s ×%s %s" % (backend, world, mode), vals))
        parts.append(line_chart(title, "tokens/s", labels, series))
    return _section("benchmark", "Benchmark", "".join(parts), order[-1][1] if order else None)


def _versions_section(data):
    plan = data.get("plan") or {}
    macs = data.get("macs") or {}
    versions = data.get("versions") if isinstance(data.get("versions"), dict) else {}
    hosts = list(plan.get("hosts") or [])
    hosts += sorted((set(macs) | set(versions)) - set(hosts))
    if not hosts:
        return _section("versions", "Versions per Mac", _empty("No Mac known yet."))

    def field(h, key):
        f, v = macs.get(h) or {}, versions.get(h) or {}
        osv, hw = f.get("os") or {}, f.get("hw") or {}
        if key == "mac":
            mac = (f.get("thunderbolt") or {}).get("mac") or {}
            name = mac.get("name") or mac.get("model")
            return " ".join(x for x in (name, "(%s)" % hw["model"] if hw.get("model") else "") if x)
        if key == "memory":
            return "%d GB" % round(hw["memsize"] / 2**30) if is_number(hw.get("memsize")) else ""
        if key == "macos":
            return (
                "%s (%s)" % (osv["product_version"], osv.get("build_version") or "?")
                if osv.get("product_version")
                else ""
            )
        if key == "rdma":
            return (f.get("rdma") or {}).get("rdma_ctl") or ("" if not f else "no rdma_ctl")
        return v.get(key) or ""

    keys = [
        ("mac", "Mac"),
        ("memory", "memory"),
        ("macos", "macOS (build)"),
        ("rdma", "RDMA"),
        ("python", "Python"),
        ("mlx", "mlx"),
        ("mlx_lm", "mlx-lm"),
    ]
    table = {h: {k: field(h, k) for k, _ in keys} for h in hosts}
    rows = []
    for h in hosts:
        row = [h]
        for k, _ in keys:
            counts = Counter(table[x][k] for x in hosts if table[x][k])
            differs = len(counts) > 1 and table[h][k] != counts.most_common(1)[0][0]
            row.append((table[h][k] or "—", "bad" if differs else ""))
        rows.append(row)
    notes = []
    if not macs:
        notes.append("macOS and hardware come from this run's discovery.")
    if not versions:
        notes.append("Python, mlx and mlx-lm come from the env stage, which has not run yet.")
    elif data.get("versions_time"):
        notes.append("Python, mlx and mlx-lm as the env stage read them at %s." % data["versions_time"])
    body = _table(["host"] + [h for _, h in keys], rows, "versions")
    body += "".join('<p class="note">%s</p>' % _e(n) for n in notes)
    return _section("versions", "Versions per Mac", body)


CSS = """
body{font-family:Helvetica,Arial,sans-serif;color:#1d2733;margin:0;background:#f3f5f7}
main{max-width:1040px;margin:0 auto;padding:18px 20px 40px}
h1{font-size:24px;margin:8px 0 4px}h2{font-size:19px;margin:0 0 10px;border-bottom:1px solid #d0d7de;padding-bottom:4px}
section{background:#fff;border:1px solid #d0d7de;border-radius:8px;padding:14px 16px;margin:14px 0}
.when{font-size:12px;font-weight:normal;color:#666;margin-left:8px}
table{border-collapse:collapse;font-size:12.5px;margin:8px 0;width:100%}
th,td{border:1px solid #d8dee4;padding:4px 7px;text-align:left;vertical-align:top}
th{background:#f0f3f6}td.bad{background:#fde8e8;color:#9b1c1c;font-weight:bold}
td.warn{background:#fff4e0;color:#8a4b00}td.good{color:#2e7d32}
.cards{display:flex;flex-wrap:wrap;gap:10px;margin:10px 0}
.card{flex:1 1 150px;background:#fff;border:1px solid #d0d7de;border-radius:8px;padding:8px 12px}
.card .k{font-size:12px;color:#666}.card .v{font-size:16px;font-weight:bold;margin-top:2px}
.card.bad{border-color:#c62828;background:#fdecea}.card.warn{border-color:#e07b00;background:#fff4e0}
.card.good{border-color:#2e7d32}
.reason{font-size:13px;color:#444}.fix{font-size:13px;color:#8a4b00}p.missing{color:#c62828;font-weight:bold}
p.warn{color:#8a4b00}p.good{color:#2e7d32;font-weight:bold}.empty,.note{color:#666;font-size:13px}
.scroll{overflow-x:auto}table.bench td{white-space:nowrap}svg{max-width:100%;height:auto;display:block;margin:6px 0}
"""


def render(data):
    """The report page for ``data`` (the shape ``collect`` returns, plus ``macs``: this run's
    discovery facts per host, optional). Pure: the same data gives the same page."""
    data = data or {}
    plan = data.get("plan") if isinstance(data.get("plan"), dict) else None
    hosts = (plan or {}).get("hosts") or []
    title = "mlx-cluster report" + (": %s" % ", ".join(hosts) if hosts else "")
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>%s</title>" % _e(title),
        "<style>%s</style></head><body><main>" % CSS,
        "<h1>%s</h1>" % _e(title),
        _summary(dict(data, plan=plan)),
        _topology_section(dict(data, plan=plan)),
        _preflight_section(data),
        _net_check_section(dict(data, plan=plan)),
        _bench_section(data),
        _versions_section(dict(data, plan=plan)),
    ]
    notes = [n for n in data.get("notes") or []]
    if notes:
        parts.append(_section("notes", "Notes", "".join('<p class="note">%s</p>' % _e(n) for n in notes)))
    parts.append("</main></body></html>\n")
    return "\n".join(parts)
