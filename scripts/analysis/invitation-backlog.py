#!/usr/bin/env python3
"""When Linux makes a socket writable: the unsent backlog at each invitation, per rule.

Usage: scripts/analysis/invitation-backlog.py RUN_DIR [CSV] > RUN_DIR/backlog.md

RUN_DIR is a matrix run (`sbm-matrix run invitation-backlog`, or any run whose cells have
writes.csv). Writes CSV (default RUN_DIR/invitations.csv: one row per run) and prints the
table.

A write's `notsent_before` is the socket's unsent backlog (SIOCOUTQNSD) read just before the
write, which sbm-send makes as soon as epoll invites it: so it is the backlog at which the
kernel said "writable" (plus what drained between the wakeup and the read, a few µs). Only
the writes an invitation started count (`invite_reason` not `burst` or `paced-start`), after
the warm-up. Per run: how many, the backlog's median and 95th percentile, the backlog over
the threshold in force (NOTSENT_LOWAT, or the patched kernel's own rate × T, `threshold_bytes`)
where there is one, the share of invitations at less than half that threshold, and how many
of the run's writes the kernel took only in part (short writes). The table gives, per rate
and rule, the median over runs with the smallest and largest run in brackets.

Standard library only.
"""
import csv
import functools
import os
import sys
import tomllib
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cellfiles  # noqa: E402
import runtable  # noqa: E402
from runtable import kb, ms, pct, spread  # noqa: E402

NOT_INVITATIONS = ('burst', 'paced-start')
FIELDS = ['cell', 'rate', 'config', 'repetition', 'status', 'goodput_bps', 'writes',
          'short_writes', 'accepted_p50_bytes', 'invitations', 'backlog_p50_bytes',
          'backlog_p95_bytes',
          'backlog_p50_ms',
          'threshold_p50_bytes', 'backlog_over_threshold_p50', 'below_half_threshold_share',
          'zero_backlog_share']


def threshold_of(row, lowat):
    t = row.get('threshold_bytes') or ''
    if t:
        return int(t)
    return lowat


def one_run(run_dir, s):
    """The row for one summary.csv row (one run)."""
    out = {k: '' for k in FIELDS}
    for k in ('cell', 'rate', 'config', 'repetition', 'status', 'goodput_bps'):
        out[k] = s[k]
    path = os.path.join(run_dir, s['cell'], 'writes.csv')
    if s['status'] != 'ok' or not cellfiles.exists(path):
        return out
    lowat = None
    args = ' '.join(config_args(run_dir).get(s['config'], []))
    if '--notsent-lowat' in args:
        lowat = int(args.split('--notsent-lowat', 1)[1].split()[0])
    rows = [r for r in csv.DictReader(cellfiles.open_text(path)) if r['warmup'] == 'false']
    out['writes'] = len(rows)
    out['short_writes'] = sum(1 for r in rows if int(r['bytes_accepted']) < int(r['bytes_asked']))
    if rows:
        out['accepted_p50_bytes'] = pct(sorted(int(r['bytes_accepted']) for r in rows), 50)
    invited = [r for r in rows if r['invite_reason'] not in NOT_INVITATIONS]
    out['invitations'] = len(invited)
    if not invited:
        return out
    backlog = sorted(int(r['notsent_before']) for r in invited)
    out['backlog_p50_bytes'] = pct(backlog, 50)
    out['backlog_p95_bytes'] = pct(backlog, 95)
    if s['goodput_bps']:
        # The backlog as time: how long the median invitation's backlog takes to drain at
        # the run's goodput.
        out['backlog_p50_ms'] = f"{out['backlog_p50_bytes'] * 8 / float(s['goodput_bps']) * 1e3:.1f}"
    out['zero_backlog_share'] = f"{sum(1 for b in backlog if b == 0) / len(backlog):.3f}"
    pairs = [(int(r['notsent_before']), threshold_of(r, lowat)) for r in invited]
    pairs = [(b, t) for b, t in pairs if t]
    if pairs:
        out['threshold_p50_bytes'] = pct(sorted(t for _, t in pairs), 50)
        out['backlog_over_threshold_p50'] = f"{pct(sorted(b / t for b, t in pairs), 50):.3f}"
        out['below_half_threshold_share'] = \
            f"{sum(1 for b, t in pairs if 2 * b < t) / len(pairs):.3f}"
    return out


@functools.lru_cache(maxsize=None)
def config_args(run_dir):
    """Each config's sbm-send arguments, from the run's matrix.toml."""
    with open(os.path.join(run_dir, 'matrix.toml'), 'rb') as f:
        configs = tomllib.load(f).get('configs', {})
    return {name: c.get('args', []) for name, c in configs.items()}


def main(run_dir, csv_path):
    summary = list(csv.DictReader(open(os.path.join(run_dir, 'summary.csv'))))
    rows = [one_run(run_dir, s) for s in summary]
    with open(csv_path, 'w', newline='') as f:
        w = csv.DictWriter(f, FIELDS)
        w.writeheader()
        w.writerows(rows)
    groups = defaultdict(list)
    for r in rows:
        groups[(r['rate'], r['config'])].append(r)
    print('# The unsent backlog at each invitation\n')
    print('`scripts/analysis/invitation-backlog.py` from the run\'s summary.csv and each run\'s '
          'writes.csv (invitations.csv: one row per run). Per rate and rule: the median over '
          'runs, the smallest and largest run in brackets. Backlog: `notsent_before` of the writes '
          'an invitation started, after the warm-up. Threshold: NOTSENT_LOWAT, or the patched '
          'kernel\'s rate × T as it reported it.\n')
    order = list(dict.fromkeys(s['config'] for s in summary))
    for rate in dict.fromkeys(s['rate'] for s in summary):
        print(f'## {rate}\n')
        print('| rule | runs ok | invitations | backlog p50 | as time at the goodput | backlog p95 | threshold | '
              'backlog ÷ threshold (p50) | below half the threshold | zero backlog | '
              'short writes | bytes a write took (p50) | goodput |')
        print('|---|---|---|---|---|---|---|---|---|---|---|---|---|')
        for config in order:
            runs = groups.get((rate, config), [])
            if not runs:
                continue
            ok = [r for r in runs if r['status'] == 'ok']
            print(f"| {config} | {len(ok)} of {len(runs)} "
                  f"| {spread([r['invitations'] for r in ok], lambda v: f'{v:.0f}')} "
                  f"| {spread([r['backlog_p50_bytes'] for r in ok], kb)} "
                  f"| {spread([r['backlog_p50_ms'] for r in ok], ms)} "
                  f"| {spread([r['backlog_p95_bytes'] for r in ok], kb)} "
                  f"| {spread([r['threshold_p50_bytes'] for r in ok], kb)} "
                  f"| {spread([r['backlog_over_threshold_p50'] for r in ok], lambda v: f'{v:.2f}')} "
                  f"| {spread([r['below_half_threshold_share'] for r in ok], lambda v: f'{100 * v:.0f} %')} "
                  f"| {spread([r['zero_backlog_share'] for r in ok], lambda v: f'{100 * v:.0f} %')} "
                  f"| {spread([r['short_writes'] for r in ok], lambda v: f'{v:.0f}')} "
                  f"| {spread([r['accepted_p50_bytes'] for r in ok], kb)} "
                  f"| {spread([r['goodput_bps'] for r in ok], runtable.rate)} |")
        print()


if __name__ == '__main__':
    main(*runtable.main_args(sys.argv, __doc__, 'invitations.csv'))
