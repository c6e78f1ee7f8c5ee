#!/usr/bin/env python3
"""Lost timer expiries in a run of UML guest cells, from each guest's console.

Usage: scripts/analysis/uml-recoveries.py RUN_DIR [CSV] [--against OTHER_RUN] > RUN_DIR/recoveries.md

RUN_DIR is a matrix run of UML guest cells (`scripts/matrix run uml-hang-stress`). A guest
kernel with kernel/patches/0006 recovers a timer expiry that never reached it and says so on
its console at the 1st, 2nd, 4th, 8th … recovery:

    um: lost timer expiry recovered in idle (N so far; SIGALRMs dropped inside the timer handler: D)

Writes CSV (default RUN_DIR/recoveries.csv: one row per cell of summary.csv) with the last N
and D its console printed (0 where it printed none; N is exact up to 2, a lower bound above,
since 0006 prints only at powers of two), and prints the run's totals: cells and their
status, guests that recovered an expiry, and the attempts kept in RUN_DIR/hung/ (a guest
found hung is kept there and its cell run again).

With --against OTHER_RUN (a run of the same preset on another kernel, its recoveries.csv
made), it also compares the two: the share of guests that recovered an expiry in each, and
how likely a split at least as lopsided is if the two kernels lose expiries at one rate
(one-sided Fisher's exact test: the chance that this run gets this few of the two runs'
recovering guests, drawn at random from all the guests read).

Standard library only.
"""
import csv
import math
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cellfiles  # noqa: E402

RECOVERY = re.compile(
    r'um: lost timer expiry recovered in idle \((\d+) so far; '
    r'SIGALRMs dropped inside the timer handler: (\d+)\)')
FIELDS = ['cell', 'status', 'console', 'recovered', 'dropped_in_handler']


def one_cell(run_dir, row):
    """The cell's row: its console's last recovery line, read as numbers."""
    path = os.path.join(run_dir, row['cell'], 'guest-console.log')
    try:
        text = cellfiles.read_bytes(path).decode(errors='replace')
    except FileNotFoundError:
        return {'cell': row['cell'], 'status': row['status'], 'console': 'missing',
                'recovered': '', 'dropped_in_handler': ''}
    found = RECOVERY.findall(text)
    recovered, dropped = (int(found[-1][0]), int(found[-1][1])) if found else (0, 0)
    return {'cell': row['cell'], 'status': row['status'], 'console': 'yes',
            'recovered': recovered, 'dropped_in_handler': dropped}


def fisher_at_most(k, n, k_other, n_other):
    """P(X <= k), X the recovering guests among n when the k + k_other of all n + n_other
    guests are spread at random (hypergeometric)."""
    total, hits = n + n_other, k + k_other
    return sum(math.comb(n, i) * math.comb(n_other, hits - i)
               for i in range(0, min(k, hits) + 1)
               if hits - i <= n_other) / math.comb(total, hits)


def compare(name, read, recovering, other_dir):
    """The comparison section: this run against OTHER_RUN's recoveries.csv."""
    with open(os.path.join(other_dir, 'recoveries.csv'), newline='') as f:
        other = [r for r in csv.DictReader(f) if r['console'] == 'yes']
    other_name = os.path.basename(os.path.normpath(other_dir))
    k_other = sum(int(r['recovered']) > 0 for r in other)
    k, n, n_other = len(recovering), len(read), len(other)
    p = fisher_at_most(k, n, k_other, n_other)
    print(f'\n## Against {other_name}\n')
    print('| run | guests read | guests that recovered a lost expiry |')
    print('|---|---|---|')
    print(f'| {other_name} | {n_other} | {k_other} |')
    print(f'| {name} | {n} | {k} |')
    share = f'{k} or fewer' if k else 'none'
    print(f'\nIf both kernels lost expiries at one rate, {share} of the {k + k_other} '
          f'recovering guests would fall in {name} with probability {p:.3f} '
          '(one-sided Fisher\'s exact test).')


def main(run_dir, csv_path, other_dir=None):
    with open(os.path.join(run_dir, 'summary.csv'), newline='') as f:
        cells = list(csv.DictReader(f))
    rows = [one_cell(run_dir, r) for r in cells]
    with open(csv_path, 'w', newline='') as f:
        w = csv.DictWriter(f, fieldnames=FIELDS, lineterminator='\n')
        w.writeheader()
        w.writerows(rows)
    ok = sum(r['status'] == 'ok' for r in rows)
    read = [r for r in rows if r['console'] == 'yes']
    recovering = [r for r in read if r['recovered'] > 0]
    hung_dir = os.path.join(run_dir, 'hung')
    hung = sorted(os.listdir(hung_dir)) if os.path.isdir(hung_dir) else []
    name = os.path.basename(os.path.normpath(run_dir))
    print(f'# {name}: lost timer expiries\n')
    print('Made by scripts/analysis/uml-recoveries.py from each cell\'s guest-console.log '
          '(recoveries.csv: one row per cell).\n')
    print('| what | count |')
    print('|---|---|')
    print(f'| cells | {len(rows)} |')
    print(f'| cells `ok` | {ok} |')
    print(f'| consoles read | {len(read)} |')
    print(f'| guests that recovered a lost expiry | {len(recovering)} |')
    print(f'| recoveries (at least) | {sum(r["recovered"] for r in recovering)} |')
    print(f'| SIGALRMs dropped inside the timer handler | '
          f'{sum(r["dropped_in_handler"] for r in read)} |')
    print(f'| attempts kept in hung/ | {len(hung)} |')
    if recovering:
        print('\nGuests that recovered: ' + ', '.join(
            f'{r["cell"]} ({r["recovered"]})' for r in recovering) + '.')
    if other_dir:
        compare(name, read, recovering, other_dir)


if __name__ == '__main__':
    args = sys.argv[1:]
    against = None
    if '--against' in args:
        i = args.index('--against')
        if i + 1 == len(args):
            sys.exit('uml-recoveries.py: --against needs a run directory')
        against = args[i + 1]
        del args[i:i + 2]
    if len(args) not in (1, 2):
        sys.exit(__doc__.split('\n\n')[1])
    run = args[0]
    main(run, args[1] if len(args) == 2 else os.path.join(run, 'recoveries.csv'), against)
