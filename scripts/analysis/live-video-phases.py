#!/usr/bin/env python3
"""Where a frame's age came from, before, during and after the rate dip of a live-video run.

Usage: scripts/analysis/live-video-phases.py results/live-video > results/live-video/phases.md

Per cell, from frames.csv(.xz) (every frame: content time, write start, departure of its
last byte, the sink's read) and intervals.csv (per second: unsent bytes, threshold, sRTT),
over the frames whose content time falls in each window (seconds after the first frame):
before 10-20 s (2 Mb/s), dip 25-40 s (500 kb/s, 5 s after the change), after 50-60 s
(2 Mb/s again). A written frame's age at the sink splits into app wait (content time ->
write start), socket wait (write start -> departure of its last byte) and network
(departure -> the sink's read). Each figure is the median over the window's frames (or
seconds) of one run; the table gives the median of the runs with the smallest and largest
in brackets. Standard library only.
"""
import csv
import os
import statistics as st
import sys
from collections import defaultdict

WINDOWS = {'before': (10, 20), 'dip': (25, 40), 'after': (50, 60)}
FIGURES = [
    ('age', 'age at the sink', 'ms'),
    ('app', 'app wait', 'ms'),
    ('socket', 'socket wait', 'ms'),
    ('network', 'network', 'ms'),
    ('written', 'frames written /s', ''),
    ('size', 'frame size', 'B'),
    ('notsent', 'unsent', 'B'),
    ('threshold', 'threshold', 'B'),
    ('srtt', 'sRTT', 'ms'),
]


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cellfiles import cells, exists, open_text  # noqa: E402


def open_csv(path):
    return csv.DictReader(open_text(path))


def cell_figures(d):
    frames = list(open_csv(os.path.join(d, 'frames.csv')))
    intervals = list(open_csv(os.path.join(d, 'intervals.csv')))
    t0 = int(frames[0]['content_ns'])
    out = {}
    for w, (lo, hi) in WINDOWS.items():
        def inside(r):
            return lo <= (int(r['content_ns']) - t0) / 1e9 < hi
        written = [r for r in frames if inside(r) and r['fate'] == 'written' and r['age_sink_us']]
        secs = [r for r in intervals if lo <= float(r['start_s']) < hi]
        if not written:
            continue
        us = lambda k: [int(r[k]) for r in written]
        f = {
            'age': st.median(us('age_sink_us')) / 1e3,
            'app': st.median(us('age_write_start_us')) / 1e3,
            'socket': st.median(a - b for a, b in zip(us('age_depart_us'), us('age_write_start_us'))) / 1e3,
            'network': st.median(a - b for a, b in zip(us('age_sink_us'), us('age_depart_us'))) / 1e3,
            'written': len(written) / (hi - lo),
            'size': st.median(us('bytes')),
        }
        for key, col, scale in [('notsent', 'notsent_bytes', 1), ('threshold', 'threshold_bytes', 1),
                                ('srtt', 'srtt_us', 1e3)]:
            v = [float(r[col]) / scale for r in secs if r.get(col)]
            if v:
                f[key] = st.median(v)
        out[w] = f
    return out


def fmt(values, unit):
    m, lo, hi = st.median(values), min(values), max(values)
    nd = 0 if m >= 100 or unit == 'B' else 1
    s = f'{m:.{nd}f} ({lo:.{nd}f}–{hi:.{nd}f})'
    return s + (f' {unit}' if unit else '')


def main(root):
    by = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    order = []
    for cell in cells(root):
        d = os.path.join(root, cell)
        if not exists(os.path.join(d, 'summary.json')):
            continue
        if not exists(os.path.join(d, 'frames.csv')):
            continue
        config = cell.rsplit('-r', 1)[0]
        if config not in order:
            order.append(config)
        for w, f in cell_figures(d).items():
            for k, v in f.items():
                by[config][w][k].append(v)
    print(f'# {os.path.basename(os.path.normpath(root))}: content age by phase of the rate dip\n')
    print('Made by `scripts/analysis/live-video-phases.py` from every cell\'s frames.csv.xz and '
          'intervals.csv (its docstring says how). Windows by content time after the first frame: '
          'before 10–20 s (2 Mb/s), dip 25–40 s (500 kb/s since 20 s), after 50–60 s (2 Mb/s since 40 s). '
          'Median of the runs (smallest–largest), n runs per row.\n')
    for w in WINDOWS:
        print(f'## {w} ({WINDOWS[w][0]}–{WINDOWS[w][1]} s)\n')
        print('| cell | n | ' + ' | '.join(name for _, name, _ in FIGURES) + ' |')
        print('|---|---|' + '---|' * len(FIGURES))
        for c in order:
            f = by[c][w]
            n = len(f['age'])
            cols = [fmt(f[k], unit) if f.get(k) else '—' for k, _, unit in FIGURES]
            print(f'| {c} | {n} | ' + ' | '.join(cols) + ' |')
        print()


if __name__ == '__main__':
    if len(sys.argv) != 2:
        sys.exit('usage: live-video-phases.py RUN_DIR')
    main(sys.argv[1])
