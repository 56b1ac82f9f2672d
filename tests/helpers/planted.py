"""A planted bytecode file: what a test uses to show that a timestamp-valid ``.pyc`` never runs in place of its
source (kernodeck/inenv/_package.py, verified.py), with a control that the plain import path would run it."""

from __future__ import annotations

import importlib.util
import marshal
from pathlib import Path

PLANT = "open({marker!r}, 'w').write('the planted bytecode ran')\n"  # .format(marker=PATH): the proof that it ran


def plant_pyc(source: Path, evil: str) -> Path:
    """A ``__pycache__`` file for ``source`` whose header carries the source's mtime and size (timestamp-valid: the
    standard source loader takes it instead of the source) but whose code is ``evil``."""
    stat = source.stat()
    code = compile(source.read_text() + "\n" + evil, str(source), "exec")
    cached = Path(importlib.util.cache_from_source(str(source)))
    cached.parent.mkdir(exist_ok=True)
    header = importlib.util.MAGIC_NUMBER + (0).to_bytes(4, "little")
    header += (int(stat.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little")
    header += (stat.st_size & 0xFFFFFFFF).to_bytes(4, "little")
    cached.write_bytes(header + marshal.dumps(code))
    return cached
