# /// script
# dependencies = ["nox>=2025.2.9"]
# ///
"""Kernodeck sessions for this project (`nox -l` lists them): nox -s lock && nox -s reference && nox -s verify

Kernodeck is imported here from beside nox (`pip install nox kernodeck`, or a checkout or wheel of it), else from the
checkout $KERNODECK_SOURCE names. Each session installs the same Kernodeck into its own (reused) venv: from
$KERNODECK_SOURCE (a folder or a requirement) when set, else from where the one beside nox was installed from, else as
pinned below. Nothing of Kernodeck goes into the rebuilt env. Written by `kernodeck init`.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import nox

nox.needs_version = ">=2025.2.9"
KERNODECK = "kernodeck==0.1.0"

try:
    from kernodeck import noxsessions
except ModuleNotFoundError:  # not installed beside nox: the session module of the checkout $KERNODECK_SOURCE names
    _file = Path(os.environ.get("KERNODECK_SOURCE", "."), "kernodeck", "noxsessions.py")
    _spec = importlib.util.spec_from_file_location("kernodeck_noxsessions", _file)
    if _spec is None or _spec.loader is None or not _file.is_file():
        sys.exit(f"ERROR: Kernodeck is not installed beside nox and {_file} does not exist\n"
                 "TIP: pip install kernodeck (beside nox), or export KERNODECK_SOURCE=/path/to/a/kernodeck/checkout")
    noxsessions = sys.modules[_spec.name] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(noxsessions)

noxsessions.register(pin=KERNODECK)

if __name__ == "__main__":  # `uv run noxfile.py -s verify` / `pipx run noxfile.py -s verify`: nox from the block above
    nox.main()
