"""The one way an in-env script reaches its siblings: this folder loaded as the package ``kernodeck_inenv``.

The scripts (runner.py, calibrate.py, drift.py, compare_outputs.py, resume.py's worker) run by path with
``python -I``: their folder is not on sys.path, and nothing is put there (a project's ``numpy/`` folder must never
shadow the env's numpy). Each runs THIS file by its path::

    runpy.run_path(str(HERE / "_package.py"))  # then: from kernodeck_inenv.tolerance import compare

which loads this folder's ``__init__.py`` as ``kernodeck_inenv`` with this folder as its search location: the
siblings are then ``kernodeck_inenv.<module>`` (they import each other relatively), never the orchestrator's
``kernodeck`` package. Loading again is a no-op. Standard library only.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

PACKAGE = "kernodeck_inenv"


def load() -> None:
    """This folder as the package ``kernodeck_inenv`` in ``sys.modules`` (once per process)."""
    if PACKAGE in sys.modules:
        return
    here = Path(__file__).resolve().parent
    spec = importlib.util.spec_from_file_location(PACKAGE, here / "__init__.py", submodule_search_locations=[str(here)])
    assert spec is not None and spec.loader is not None
    package = importlib.util.module_from_spec(spec)
    sys.modules[PACKAGE] = package
    spec.loader.exec_module(package)


load()  # what running this file by path is for
