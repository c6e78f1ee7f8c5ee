#!/usr/bin/env python3
"""What a run's writes were made of, per configuration and rate over the runs.

Usage: scripts/analysis/write-anatomy.py RUN_DIR [CSV] > RUN_DIR/writes.md

Writes CSV (default RUN_DIR/writes-per-run.csv: one row per run, the figures the table's
brackets are made of) and prints the table.

For every `ok` cell: its writes after the warm-up — a traced (command) cell's connection that
carried the most (conn-N/writes.csv, as table.md), an sbm-send cell's writes.csv (plain or
.xz) — how many, the bytes each send call queued (`bytes_accepted`), the unsent bytes already queued ahead of it
(`notsent_before`), and the delay of its last byte (the exact departure for traced cells,
the snd_nxt sampler's bracket midpoint for sbm-send's: `depart_lo_ns`/`depart_hi_ns` −
`write_ns`) — each the median over the run's writes; per table cell the median of the runs'
medians with the smallest and largest run in brackets. The delay of a write's last byte is the
time to drain what was queued ahead of it plus the write itself, so these columns say which of
the two a configuration shortened. Standard library only.
"""
import csv
import json
import os
import statistics as st
import sys
from collections import defaultdict


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cellfiles import exists, open_text as open_csv  # noqa: E402


def spread(values, fmt):
    if not values:
        return '—'
    return f"{fmt(st.median(values))} [{fmt(min(values))}–{fmt(max(values))}]"


def kb(v):
    return f"{v / 1000:.1f} kB"


def ms(v):
    return f"{v / 1e6:.1f} ms" if v < 1e9 else f"{v / 1e9:.2f} s"


def plain(v):
    """A median as the CSV writes it: whole numbers without '.0', none as empty."""
    if v is None:
        return ''
    return int(v) if v == int(v) else v


PER_RUN = ['cell', 'rate', 'config', 'repetition', 'writes', 'bytes_per_write_p50',
           'unsent_ahead_p50_bytes', 'last_byte_delay_p50_ns']


def main(run_dir, csv_path):
    rows = list(csv.DictReader(open(os.path.join(run_dir, 'summary.csv'))))
    groups = defaultdict(list)
    order = []
    per_run = []
    for r in rows:
        if r['status'] != 'ok':
            continue
        cell = os.path.join(run_dir, r['cell'])
        trace_path = os.path.join(cell, 'trace.json')
        if exists(trace_path):
            conns = json.load(open_csv(trace_path))['connections']
            if not conns:
                continue
            main_conn = max(conns, key=lambda c: c['bytes_written'])
            data = os.path.join(cell, f"conn-{main_conn['id']}")
        else:
            data = cell  # sbm-send's own writes.csv
        try:
            writes = [w for w in csv.DictReader(open_csv(os.path.join(data, 'writes.csv')))
                      if w['warmup'] == 'false']
        except FileNotFoundError:
            continue
        if not writes:
            continue
        # The exact departure where there is one (sbm-trace: depart_lo = depart_hi), else the
        # snd_nxt sampler's bracket midpoint.
        departed = [(int(w['depart_lo_ns']) + int(w['depart_hi_ns'])) // 2 - int(w['write_ns'])
                    for w in writes if w['depart_lo_ns'] and w['depart_hi_ns']]
        key = (r['rate'], r['label'])
        if key not in groups:
            order.append(key)
        run = {
            'writes': len(writes),
            'size': st.median(int(w['bytes_accepted']) for w in writes),
            'ahead': st.median(int(w['notsent_before']) for w in writes),
            'delay': st.median(departed) if departed else None,
        }
        groups[key].append(run)
        per_run.append({'cell': r['cell'], 'rate': r['rate'], 'config': r['config'],
                        'repetition': r['repetition'], 'writes': run['writes'],
                        'bytes_per_write_p50': plain(run['size']),
                        'unsent_ahead_p50_bytes': plain(run['ahead']),
                        'last_byte_delay_p50_ns': plain(run['delay'])})
    with open(csv_path, 'w', newline='') as f:
        w = csv.DictWriter(f, fieldnames=PER_RUN, lineterminator='\n')
        w.writeheader()
        w.writerows(per_run)
    print(f"# What the writes were made of: {os.path.basename(os.path.normpath(run_dir))}\n")
    print("Per run, over the writes after the warm-up of the connection that carried the most: the median "
          "bytes a send call queued, the median unsent bytes queued ahead of it, and the median delay of its "
          "last byte (exact departure); per cell the median of the runs with the smallest and largest in "
          "brackets (scripts/analysis/write-anatomy.py).\n")
    print("| rate | configuration | runs | writes per run | bytes per write | unsent ahead of a write | delay of its last byte |")
    print("|---|---|---|---|---|---|---|")
    for key in order:
        g = groups[key]
        print(f"| {key[0]} | {key[1]} | {len(g)} | {spread([x['writes'] for x in g], lambda v: f'{v:.0f}')} | "
              f"{spread([x['size'] for x in g], kb)} | {spread([x['ahead'] for x in g], kb)} | "
              f"{spread([x['delay'] for x in g if x['delay'] is not None], ms)} |")


if __name__ == '__main__':
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__.split('\n\n')[1])
    run = sys.argv[1]
    main(run, sys.argv[2] if len(sys.argv) == 3 else os.path.join(run, 'writes-per-run.csv'))
