#!/usr/bin/env python3
"""Draw a window of a Chrome trace-event file as an SVG timeline.

Not a trace viewer: a static picture for the docs, drawn from the same
file Perfetto or chrome://tracing would open. One row per track (thread
or device stream, named by the file's thread_name metadata), complete
events (ph "X") as boxes, nested calls one level lower, each box labelled
with its name where it fits; a millisecond axis on top.

The window:
  --from-ms A --to-ms B          explicit, in ms since the trace's start;
  --from-name N [--to-name M]    from the start of the first event named N
                                 to the end of the first run of events
                                 named M after it (default M = N).

    python3 tools/trace_to_svg.py trace.json out.svg \\
        --from-name conv2d --to-name adam_update

stdlib only.
"""
import argparse
import html
import json
import math
import sys

ROW_H = 18
LEFT = 190
WIDTH = 1400
TOP = 56
PALETTE = ['#4e79a7', '#f28e2b', '#59a14f', '#b07aa1', '#76b7b2',
           '#edc948', '#e15759', '#9c755f', '#bab0ac', '#86bcb6']
CAT_COLOUR = {'copy': '#e15759', 'sync': '#7f7f7f'}


def colour(e):
    if e.get('cat') in CAT_COLOUR:
        return CAT_COLOUR[e['cat']]
    name = e['name']
    if name.endswith('_grad'):
        name = name[:-5]
    return PALETTE[sum(map(ord, name)) % len(PALETTE)]


def window(events, args):
    if args.from_ms is not None:
        return args.from_ms * 1e3, args.to_ms * 1e3
    to = args.to_name or args.from_name
    marks = sorted((e['ts'], e['name'], e['ts'] + e['dur']) for e in events
                   if e['name'] in (args.from_name, to))
    starts = [m for m in marks if m[1] == args.from_name]
    if not starts:
        sys.exit(f'trace_to_svg: no event named {args.from_name}')
    lo = starts[0][0]
    end = None
    for ts, name, stop in marks:
        if ts < lo:
            continue
        if name == to and (end is None or ts >= lo):
            end = max(end or stop, stop)
        elif end is not None:
            break  # the next from-event after a run of to-events
    if end is None:
        sys.exit(f'trace_to_svg: no event named {to} after {args.from_name}')
    return lo, end


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('trace')
    ap.add_argument('svg')
    ap.add_argument('--from-ms', type=float)
    ap.add_argument('--to-ms', type=float)
    ap.add_argument('--from-name')
    ap.add_argument('--to-name')
    ap.add_argument('--title', default='')
    args = ap.parse_args()
    if (args.from_ms is None) == (args.from_name is None) or \
            (args.from_ms is not None and args.to_ms is None):
        ap.error('give --from-ms and --to-ms, or --from-name')

    with open(args.trace, encoding='utf-8') as f:
        doc = json.load(f)
    evs = doc['traceEvents'] if isinstance(doc, dict) else doc
    names = {}
    for e in evs:
        if e.get('ph') == 'M' and e.get('name') == 'thread_name':
            names[(e['pid'], e['tid'])] = e['args']['name']
    xs = [e for e in evs if e.get('ph') == 'X']
    lo, hi = window(xs, args)
    span = max(hi - lo, 1e-3)
    inside = [e for e in xs if e['ts'] < hi and e['ts'] + e['dur'] > lo]

    # Depth per track: a stack of end times, events sorted by start.
    tracks = {}
    for e in sorted(inside, key=lambda e: (e['ts'], -e['dur'])):
        t = tracks.setdefault((e['pid'], e['tid']), {'stack': [], 'ev': []})
        while t['stack'] and t['stack'][-1] <= e['ts']:
            t['stack'].pop()
        t['ev'].append((len(t['stack']), e))
        t['stack'].append(e['ts'] + e['dur'])

    plot_w = WIDTH - LEFT - 20
    scale = plot_w / span
    out = []
    y = TOP
    rows = []
    for key in sorted(tracks):
        depth = max(d for d, _ in tracks[key]['ev']) + 1
        rows.append((key, y, depth))
        y += depth * ROW_H + 10
    height = y + 40
    out.append(f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" '
               f'height="{height}" font-family="sans-serif" font-size="11">')
    out.append(f'<rect width="{WIDTH}" height="{height}" fill="white"/>')
    title = args.title or (f'{args.trace}: {span / 1e3:.2f} ms from '
                           f'{lo / 1e3:.2f} ms')
    out.append(f'<text x="10" y="18" font-size="14">{html.escape(title)}'
               f'</text>')
    # Axis: about ten ticks at a round step (1, 2 or 5 times a power of 10).
    raw = span / 10
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    tick = lo + step
    while tick < hi:
        x = LEFT + (tick - lo) * scale
        out.append(f'<line x1="{x:.1f}" y1="{TOP - 14}" x2="{x:.1f}" '
                   f'y2="{height - 30}" stroke="#ddd"/>')
        out.append(f'<text x="{x:.1f}" y="{TOP - 18}" text-anchor="middle">'
                   f'{(tick - lo) / 1e3:g} ms</text>')
        tick += step
    for key, y0, depth in rows:
        label = names.get(key, f'pid {key[0]} tid {key[1]}')
        out.append(f'<text x="10" y="{y0 + 13}">{html.escape(label)}</text>')
        out.append(f'<line x1="{LEFT}" y1="{y0 + depth * ROW_H + 4}" '
                   f'x2="{WIDTH - 20}" y2="{y0 + depth * ROW_H + 4}" '
                   f'stroke="#eee"/>')
        for d, e in tracks[key]['ev']:
            x0 = LEFT + max(e['ts'] - lo, 0) * scale
            x1 = LEFT + min(e['ts'] + e['dur'] - lo, span) * scale
            w = max(x1 - x0, 0.5)
            yy = y0 + d * ROW_H
            tip = (f"{e['name']} {e['dur']:.1f} us "
                   f"{json.dumps(e.get('args', {}))}")
            out.append(f'<rect x="{x0:.2f}" y="{yy}" width="{w:.2f}" '
                       f'height="{ROW_H - 2}" fill="{colour(e)}" '
                       f'stroke="white" stroke-width="0.5">'
                       f'<title>{html.escape(tip)}</title></rect>')
            if w > 6.5 * len(e['name']) + 4:
                out.append(f'<text x="{x0 + 3:.2f}" y="{yy + 12}" '
                           f'fill="white">{html.escape(e["name"])}</text>')
    out.append(f'<text x="10" y="{height - 12}" fill="#555">Boxes: ops on '
               f'host threads (nested calls one row lower), copies (red) and '
               f'synchronizes (grey) on device streams; host clock.</text>')
    out.append('</svg>')
    with open(args.svg, 'w', encoding='utf-8') as f:
        f.write('\n'.join(out) + '\n')
    print(f'{args.svg}: {len(inside)} events, {span / 1e3:.3f} ms')
    return 0


if __name__ == '__main__':
    sys.exit(main())
