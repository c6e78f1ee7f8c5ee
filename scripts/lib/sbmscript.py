"""What sbm's Python scripts share: one-line argument errors, argument checks, spread,
gzipping a run's file."""

import argparse
import gzip
import os
import shutil
import statistics
import sys


class OneLineParser(argparse.ArgumentParser):
    """A bad argument is one line on stderr and exit status 2 (argparse prints its usage too)."""

    def error(self, message):
        print(f"{self.prog}: {message} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(2)


def at_least(low):
    """An argparse type: a whole number no smaller than `low`."""
    def check(text):
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}' is not a whole number")
        if v < low:
            raise argparse.ArgumentTypeError(f"'{text}' is under {low}")
        return v
    return check


def spread(values, fmt):
    """Median [smallest–largest], each formatted by `fmt`."""
    v = sorted(values)
    return f"{fmt(statistics.median(v))} [{fmt(v[0])}–{fmt(v[-1])}]"


def gzip_in_place(path):
    """`path` becomes `path`.gz."""
    with open(path, "rb") as src, gzip.open(path + ".gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    os.remove(path)
