#!/usr/bin/env python3
"""The BBR maintainer's scenarios, patch off against on, over their repetitions.

Usage: scripts/analysis/bbr-vm-scenarios.py results/bbr-vm-scenarios \
           > results/bbr-vm-scenarios/scenarios.md

From summary.csv (one row per run) and, for cells of more than one flow, each flow's
intervals.csv and summary.json: per bottleneck, scenario, CPU model and share, the stock
kernel (switch 0) beside the proposal as posted (switch 1):

- runs that ended `ok` out of the cell's repetitions, and every failed attempt the
  campaign logs (log-*.txt, `CELL: failed: ...`) recorded for the cell, rerun or not;
- goodput of all the cell's flows together: median [min-max] over the `ok` runs, and per
  run (repetition order) with the share of its intervals after the warm-up in which all
  flows together carried less than half the bottleneck rate (the time spent collapsed);
- per flow (flow order, so BBR before CUBIC in a `bbr,cubic` cell): the median over runs of
  its goodput, and the median Jain's index of the runs;
- each flow's retransmit share (retransmits x MSS / bytes acknowledged after the warm-up),
  its sRTT over its least RTT (median interval), and BBR's mode shares of the median run's
  BBR flows together.

Standard library only.
"""
import csv
import glob
import json
import os
import re
import statistics as st
import sys
from collections import Counter, defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cellfiles import open_text, subdirs  # noqa: E402

SCENARIOS = [('', '1 flow'), ('2f', '2 BBR flows'), ('4f', '4 BBR flows'),
             ('app', 'application-limited, 50 Mb/s')]
BOTTLENECKS = ['100mbit', '100mbit-shallow', '100mbit-deep', '100mbit-policer']


def mbit(v):
    return f"{v / 1e6:.1f}"


def spread(values, fmt):
    if not values:
        return '-'
    v = sorted(values)
    return f"{fmt(st.median(v))} [{fmt(v[0])}-{fmt(v[-1])}]"


def measured_intervals(path):
    return [r for r in csv.DictReader(open_text(path)) if r['warmup'] != 'true']


def flow_dirs(run_dir, row):
    """The run's per-flow output directories, flow 1 first; the cell directory itself for a
    single flow."""
    cell = os.path.join(run_dir, row['cell'])
    flows = sorted(subdirs(cell, 'flow-'), key=lambda p: int(p.rsplit('-', 1)[1]))
    return flows or [cell]


def flow_figures(d):
    """What one flow showed after the warm-up: goodput (its summary), congestion control,
    retransmit share, sRTT / least RTT (median interval), BBR mode per interval."""
    s = json.load(open_text(os.path.join(d, 'summary.json')))
    cc = next((o['effective'] for o in s.get('options', []) if o['name'] == 'congestion'), '?')
    iv = measured_intervals(os.path.join(d, 'intervals.csv'))
    acked = sum(int(r['bytes_acked'] or 0) for r in iv)
    retx = sum(int(r['retransmits'] or 0) * int(r['mss'] or 0) for r in iv)
    infl = [float(r['srtt_us']) / float(r['min_rtt_us']) for r in iv
            if r['srtt_us'] and r['min_rtt_us'] and float(r['min_rtt_us']) > 0]
    return {
        'goodput': float(s['totals']['goodput_bps']),
        'cc': cc,
        'retx': retx / acked if acked else None,
        'inflation': st.median(infl) if infl else None,
        'modes': [r['bbr_mode'] for r in iv if r.get('bbr_mode')],
        'gains': [float(r['bbr_pacing_gain']) for r in iv if r.get('bbr_pacing_gain')],
        'interval_goodput': [float(r['goodput_bps'] or 0) for r in iv],
        'offered': paced_rate(s),
    }


def paced_rate(summary):
    """The application-limited source's rate (`-b`), from its content description, or None
    for a bulk sender."""
    m = re.search(r'at ([0-9.]+) Mbit/s', (summary.get('content_age') or {}).get('description', ''))
    return float(m.group(1)) * 1e6 if m else None


def collapsed_share(flows, rate_bps):
    """Share of measured intervals in which all flows together were below half of what they
    could carry: the bottleneck rate, or a paced source's own rate where that is lower."""
    offered = [f['offered'] for f in flows]
    if all(offered):
        rate_bps = min(rate_bps, sum(offered))
    n = min(len(f['interval_goodput']) for f in flows)
    if n == 0:
        return None
    total = [sum(f['interval_goodput'][i] for f in flows) for i in range(n)]
    return sum(1 for t in total if t < rate_bps / 2) / n


def failed_attempts(run_dir):
    failed = Counter()
    for log in sorted(glob.glob(os.path.join(run_dir, 'log-*.txt'))):
        for line in open(log):
            m = re.match(r'\s+(\S+): failed: ', line)
            if m:
                failed[m.group(1)] += 1
    return failed


def main(run_dir):
    rows = list(csv.DictReader(open(os.path.join(run_dir, 'summary.csv'))))
    failed = failed_attempts(run_dir)
    groups = defaultdict(lambda: defaultdict(list))
    for r in rows:
        patch, _, scenario = r['config'].partition('-')
        model = 'slices' if r['cpu_slices'] else 'quota'
        share = int(r['cpu_slices'] or r['cpu_quota'] or 100)
        groups[(r['rate'], scenario, r['cc'], model, share)][patch].append(r)

    print('# bbr-vm-scenarios: patch off and on in every scenario, over the repetitions\n')
    print('Generated by scripts/analysis/bbr-vm-scenarios.py from summary.csv, each flow\'s '
          'intervals.csv and summary.json, and the campaign logs. Goodput in Mb/s of all the '
          'cell\'s flows together: median [min-max] of the `ok` runs; per run (repetition '
          'order) with, in parentheses, the share of its measured intervals below half the '
          'bottleneck rate (of the source\'s own rate for the application-limited cells), '
          'or the run\'s status where it did not end `ok`. The median run is the one of '
          'median goodput. "failed" counts every attempt a campaign log recorded as failed '
          '(a failed cell is rerun by `--resume`; the first chunk\'s log was not kept). Per '
          'flow: the median run\'s flows, flow 1 first (BBR before CUBIC in `bbr,cubic`). '
          'Retransmit share: retransmits x MSS / bytes acknowledged after the warm-up, median '
          'over runs and flows; sRTT/min: the median interval\'s sRTT over the least RTT, '
          'median over runs and flows. BBR modes: every BBR flow\'s measured intervals of the '
          'median run. High gain: per run, the share of its BBR flows\' measured intervals '
          'whose pacing gain was above 2 (the proposal paces at bbr_high_gain, 2.89; BBR\'s '
          'own PROBE_BW gains are 0.75-1.25; STARTUP paces at 2.89 too), each interval\'s '
          'gain as TCP_CC_INFO gave it at the interval\'s end.\n')
    print('| bottleneck | scenario | cc | CPU | patch | ok/runs | failed | goodput | runs | '
          'per flow | Jain | retransmit share | sRTT/min | BBR modes (median run) | high gain |')
    print('|---|---|---|---|---|---:|---:|---|---|---|---:|---:|---:|---|---|')
    scen_order = {s: i for i, (s, _) in enumerate(SCENARIOS)}
    scen_name = dict(SCENARIOS)

    def order(k):
        rate, scenario, cc, model, share = k
        return (BOTTLENECKS.index(rate) if rate in BOTTLENECKS else 99,
                scen_order.get(scenario, 99), cc, model, -share)

    for key in sorted(groups, key=order):
        rate, scenario, cc, model, share = key
        for patch in ('stock', 'posted'):
            runs = sorted(groups[key][patch], key=lambda r: int(r['repetition']))
            if not runs:
                continue
            rate_bps = float(runs[0]['rate_bps'])
            ok = [r for r in runs if r['status'] == 'ok' and r['goodput_bps']]
            per_run = []
            for r in ok:
                flows = [flow_figures(d) for d in flow_dirs(run_dir, r)]
                per_run.append((r, flows, collapsed_share(flows, rate_bps)))
            goodputs = [float(r['goodput_bps']) for r, _, _ in per_run]
            shown = {r['cell']: f"{mbit(float(r['goodput_bps']))} ({c:.2f})"
                     for r, _, c in per_run}
            each = ', '.join(shown.get(r['cell'], r['status']) for r in runs)
            mid = (sorted(per_run, key=lambda p: float(p[0]['goodput_bps']))[len(per_run) // 2]
                   if per_run else None)
            per_flow = (' / '.join(mbit(f['goodput']) for f in mid[1])
                        if mid and len(mid[1]) > 1 else '-')
            jains = [float(r['jain_index']) for r, _, _ in per_run if r['jain_index']]
            jain = f"{st.median(jains):.2f}" if jains else '-'
            retx = [x['retx'] for _, f, _ in per_run for x in f if x['retx'] is not None]
            infl = [x['inflation'] for _, f, _ in per_run for x in f
                    if x['inflation'] is not None]
            modes = '-'
            if mid:
                seen = Counter(m for x in mid[1] if x['cc'] == 'bbr' for m in x['modes'])
                total = sum(seen.values())
                if total:
                    modes = ';'.join(f"{m}={n / total:.2f}" for m, n in seen.most_common())
            # The proposal's high gain (bbr_high_gain, 2.89) in the sampled intervals: per run,
            # over its BBR flows.
            high = []
            for _, f, _ in per_run:
                g = [x for fl in f if fl['cc'] == 'bbr' for x in fl['gains']]
                if g:
                    high.append(f"{sum(1 for x in g if x > 2) / len(g):.2f}")
            high_s = ', '.join(high) if high else '-'
            fails = sum(failed[r['cell']] for r in runs)
            retx_s = spread(retx, lambda v: f"{v:.4f}")
            infl_s = f"{st.median(infl):.2f}" if infl else '-'
            name = 'BBR beside CUBIC' if ',' in cc else scen_name.get(scenario, scenario)
            print(f"| {rate} | {name} | {cc} | {model} {share} % | "
                  f"{patch} | {len(ok)}/{len(runs)} | {fails} | {spread(goodputs, mbit)} | "
                  f"{each} | {per_flow} | {jain} | {retx_s} | {infl_s} | {modes} | {high_s} |")

if __name__ == '__main__':
    main(sys.argv[1] if len(sys.argv) > 1 else 'results/bbr-vm-scenarios')
