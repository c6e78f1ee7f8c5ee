#!/usr/bin/env python3
"""Underrun: how long a socket sat with nothing to send while its congestion window had room.

Usage: scripts/analysis/underrun.py RUN_DIR [CSV] > RUN_DIR/underrun.md

RUN_DIR is a matrix run whose sbm-send ran with `--rule-trace DUR` (each cell's
rule-trace.csv: the socket's tcp_info every DUR, a row whenever an ACK or a write moved it).
Writes CSV (default RUN_DIR/underrun.csv: one row per run) and prints the table.

A row's state holds from its time to the next row's. Between the end of the warm-up and the
end of the writing (summary.json `started_unix_ns` + `warmup_s`, + `time_limit_s`), per run:

- dry: the unsent backlog is 0 (`notsent`) while fewer packets are in flight than the
  congestion window allows (`unacked` < `cwnd`): the sender could have sent and had nothing.
  This is the draft's underrun. Its share of the window, its stretches and the longest.
- idle: dry with nothing in flight at all (`unacked` = 0).
- held: a sub-MSS tail waits unsent (`sub_mss_tail`: Nagle holds it behind an unacknowledged
  small segment) while the window has room — a stall with data in the socket, not an underrun.

The tracer sees a change up to DUR after it happened, so each stretch's ends are each late
by up to DUR (the `trace_every_ms` column); a stretch shorter than DUR can be missed. What
the window would have let the receiver take (rwnd) is not in the trace; `cwnd` is the
sender's limit only. The table gives, per rate and rule, the median over runs with the
smallest and largest run in brackets.

Standard library only.
"""
import csv
import json
import os
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cellfiles  # noqa: E402
import runtable  # noqa: E402

FIELDS = ['cell', 'rate', 'config', 'repetition', 'status', 'goodput_bps', 'trace_every_ms',
          'window_s', 'dry_share', 'dry_stretches', 'dry_longest_ms', 'idle_share',
          'held_share']
UNITS = {'ms': 1e-3, 'us': 1e-6, 'µs': 1e-6, 's': 1.0}


def trace_every_ms(cell_dir):
    """The `--rule-trace DUR` sbm-send ran with, in ms (from meta.json), or None."""
    meta = json.load(cellfiles.open_text(os.path.join(cell_dir, 'meta.json')))
    args = meta.get('send_command') or []
    if '--rule-trace' not in args:
        return None
    dur = args[args.index('--rule-trace') + 1]
    for unit in sorted(UNITS, key=len, reverse=True):
        if dur.endswith(unit):
            return float(dur[:-len(unit)]) * UNITS[unit] * 1e3
    return float(dur) * 1e3


def stretches(rows, start, end, state):
    """The [from, to) stretches within [start, end) in which `state(row)` holds, a row's
    state lasting until the next row's time."""
    out = []
    for row, nxt in zip(rows, rows[1:] + [None]):
        lo = max(row['t_ns'], start)
        hi = min(nxt['t_ns'] if nxt else end, end)
        if hi <= lo or not state(row):
            continue
        if out and out[-1][1] == lo:
            out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return out


def one_run(run_dir, s):
    """The row for one summary.csv row (one run)."""
    out = {k: '' for k in FIELDS}
    for k in ('cell', 'rate', 'config', 'repetition', 'status', 'goodput_bps'):
        out[k] = s[k]
    cell = os.path.join(run_dir, s['cell'])
    trace = os.path.join(cell, 'rule-trace.csv')
    if s['status'] != 'ok' or not cellfiles.exists(trace):
        return out
    out['trace_every_ms'] = runtable.fmt_g(trace_every_ms(cell))
    summary = json.load(cellfiles.open_text(os.path.join(cell, 'summary.json')))
    config = summary['config']
    start = summary['started_unix_ns'] + round(config['warmup_s'] * 1e9)
    end = summary['started_unix_ns'] + round(config['time_limit_s'] * 1e9)
    rows = [{'t_ns': int(r['t_ns']), 'notsent': int(r['notsent']), 'unacked': int(r['unacked']),
             'cwnd': int(r['cwnd']), 'sub_mss_tail': r['sub_mss_tail'] == 'true'}
            for r in csv.DictReader(cellfiles.open_text(trace))]
    rows.sort(key=lambda r: r['t_ns'])
    if end <= start or not rows or rows[0]['t_ns'] > start:
        # No row holds the state at the window's start: nothing to say about it.
        return out
    window = end - start
    room = lambda r: r['unacked'] < r['cwnd']  # noqa: E731
    dry = stretches(rows, start, end, lambda r: r['notsent'] == 0 and room(r))
    idle = stretches(rows, start, end, lambda r: r['notsent'] == 0 and r['unacked'] == 0)
    held = stretches(rows, start, end, lambda r: r['notsent'] > 0 and r['sub_mss_tail']
                     and room(r))
    total = lambda spans: sum(hi - lo for lo, hi in spans)  # noqa: E731
    out['window_s'] = f'{window / 1e9:.3f}'
    out['dry_share'] = f'{total(dry) / window:.4f}'
    out['dry_stretches'] = len(dry)
    out['dry_longest_ms'] = f'{max((hi - lo for lo, hi in dry), default=0) / 1e6:.1f}'
    out['idle_share'] = f'{total(idle) / window:.4f}'
    out['held_share'] = f'{total(held) / window:.4f}'
    return out


def main(run_dir, csv_path):
    with open(os.path.join(run_dir, 'summary.csv'), newline='') as f:
        summary = list(csv.DictReader(f))
    rows = [one_run(run_dir, s) for s in summary]
    with open(csv_path, 'w', newline='') as f:
        w = csv.DictWriter(f, FIELDS, lineterminator='\n')
        w.writeheader()
        w.writerows(rows)
    groups = defaultdict(list)
    for r in rows:
        groups[(r['rate'], r['config'])].append(r)
    every = sorted({r['trace_every_ms'] for r in rows if r['trace_every_ms']})
    print('# Underrun: nothing to send while the window had room\n')
    print('`scripts/analysis/underrun.py` from each run\'s rule-trace.csv (underrun.csv: one row '
          'per run), after the warm-up, until the writing stopped. Dry: nothing unsent while '
          'fewer packets were in flight than the congestion window allows; idle: dry with '
          'nothing in flight; held: a sub-MSS tail waiting unsent (Nagle) while the window had '
          'room. Each stretch\'s ends are late by up to the trace\'s period '
          f'({", ".join(e + " ms" for e in every) or "—"}). Per rate and rule: the median over '
          'runs, the smallest and largest run in brackets.\n')
    order = list(dict.fromkeys(s['config'] for s in summary))
    pct = lambda v: f'{100 * v:.1f} %'  # noqa: E731
    for rate in dict.fromkeys(s['rate'] for s in summary):
        print(f'## {rate}\n')
        print('| rule | runs traced | dry | dry stretches | longest dry stretch | idle | held '
              '| goodput |')
        print('|---|---|---|---|---|---|---|---|')
        for config in order:
            runs = groups.get((rate, config), [])
            if not runs:
                continue
            traced = [r for r in runs if r['dry_share'] != '']
            print(f"| {config} | {len(traced)} of {len(runs)} "
                  f"| {runtable.spread([r['dry_share'] for r in traced], pct)} "
                  f"| {runtable.spread([r['dry_stretches'] for r in traced], lambda v: f'{v:.0f}')} "
                  f"| {runtable.spread([r['dry_longest_ms'] for r in traced], runtable.ms)} "
                  f"| {runtable.spread([r['idle_share'] for r in traced], pct)} "
                  f"| {runtable.spread([r['held_share'] for r in traced], pct)} "
                  f"| {runtable.spread([r['goodput_bps'] for r in traced], runtable.rate)} |")
        print()


if __name__ == '__main__':
    main(*runtable.main_args(sys.argv, __doc__, 'underrun.csv'))
