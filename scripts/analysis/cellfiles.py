"""A matrix cell's files opened by their plain paths, as sbm's own readers open them
(src/report/compressed.rs): `cell/writes.csv`, `cell/writes.csv.xz`, or either inside the
cell's archive `cell.tar.xz` (`sbm-matrix pack`). Standard library only.
"""
import functools
import io
import lzma
import os
import tarfile

SUFFIX = '.tar.xz'


@functools.lru_cache(maxsize=4)
def _members(archive):
    """An archive's files: path inside the cell -> bytes."""
    with tarfile.open(archive, 'r:xz') as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def _locate(path):
    """(archive, path inside it) for a path in a packed cell, else None."""
    path = os.path.normpath(path)
    d = os.path.dirname(path)
    while d and d != os.path.dirname(d):
        if os.path.isfile(d + SUFFIX) and not os.path.isdir(d):
            return d + SUFFIX, os.path.relpath(path, d)
        d = os.path.dirname(d)
    return None


def read_bytes(path):
    """The bytes of a cell file, decompressed; FileNotFoundError when it is in no form."""
    for p, xz in ((path, False), (path + '.xz', True)):
        if os.path.isfile(p):
            with open(p, 'rb') as f:
                data = f.read()
            return lzma.decompress(data) if xz else data
    found = _locate(path)
    if found:
        members = _members(found[0])
        for inner, xz in ((found[1], False), (found[1] + '.xz', True)):
            if inner in members:
                return lzma.decompress(members[inner]) if xz else members[inner]
    raise FileNotFoundError(path)


def open_text(path):
    """A cell file as text (for csv.DictReader or json.load)."""
    return io.StringIO(read_bytes(path).decode(), newline='')


def exists(path):
    try:
        read_bytes(path)
        return True
    except FileNotFoundError:
        return False


def cells(run_dir):
    """The names of a run's cells, packed or not, sorted."""
    names = set()
    for n in os.listdir(run_dir):
        p = os.path.join(run_dir, n)
        if os.path.isdir(p) and n not in ('plots', 'cells'):
            names.add(n)
        elif n.endswith(SUFFIX) and os.path.isfile(p):
            names.add(n[:-len(SUFFIX)])
    return sorted(names)


def subdirs(cell_dir, prefix):
    """The directories directly in a cell whose names start with prefix (flow-, conn-)."""
    if os.path.isdir(cell_dir):
        return sorted(os.path.join(cell_dir, n) for n in os.listdir(cell_dir)
                      if n.startswith(prefix) and os.path.isdir(os.path.join(cell_dir, n)))
    archive = cell_dir + SUFFIX
    if not os.path.isfile(archive):
        return []
    names = {m.split('/', 1)[0] for m in _members(archive) if '/' in m}
    return sorted(os.path.join(cell_dir, n) for n in names if n.startswith(prefix))
