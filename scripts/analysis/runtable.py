"""What the analysis scripts share: their command line (RUN_DIR [CSV]), a percentile by
nearest rank, and a value over a rule's runs written as 'median [smallest–largest]'.
Standard library only.
"""
import math
import os
import statistics as st
import sys


def pct(values, q):
    """The q-th percentile of a sorted list by nearest rank: the ceil(q/100 × n)-th value
    (Python's round() rounds halves to even, so it is not used here)."""
    if not values:
        return None
    k = max(1, min(len(values), math.ceil(q * len(values) / 100)))
    return values[k - 1]


def spread(values, fmt):
    """'median [min–max]' of the non-empty values, or '—'."""
    vals = [float(v) for v in values if v not in ('', None)]
    if not vals:
        return '—'
    med = st.median(vals)
    if len(vals) == 1:
        return fmt(med)
    return f"{fmt(med)} [{fmt(min(vals))}–{fmt(max(vals))}]"


def ms(v):
    """Milliseconds as a table writes a delay: 273.0 ms, 1.20 s."""
    return f"{v / 1000:.2f} s" if v >= 1000 else f"{v:.1f} ms"


def kb(v):
    return f"{v / 1000:.1f} KB" if v >= 1000 else f"{v:.0f} B"


def rate(v):
    """bit/s as Mb/s."""
    return f'{v / 1e6:.2f} Mb/s'


def fmt_g(v):
    """A number as short as it reads ('1', '0.5'), or '' for None."""
    return '' if v is None else f'{v:g}'


def main_args(argv, doc, default_csv):
    """(run directory, CSV path) from an analysis script's command line `RUN_DIR [CSV]`;
    `-h` prints `doc`, bad use one line and status 2, a directory without summary.csv
    status 1."""
    name = os.path.basename(argv[0])
    if argv[1:] in (['-h'], ['--help']):
        print(doc.strip())
        sys.exit(0)
    if len(argv) not in (2, 3) or argv[1].startswith('-'):
        print(f"{name}: expects a run directory (and where to write the CSV); "
              f"{doc.strip().splitlines()[2]}", file=sys.stderr)
        sys.exit(2)
    if not os.path.isfile(os.path.join(argv[1], 'summary.csv')):
        print(f"{name}: no summary.csv in {argv[1]} (a matrix run's directory)", file=sys.stderr)
        sys.exit(1)
    run = argv[1].rstrip('/')
    return run, argv[2] if len(argv) == 3 else os.path.join(run, default_csv)
