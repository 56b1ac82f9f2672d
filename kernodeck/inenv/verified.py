"""The application's code runs only from verified bytes: each file read once, its sha256 checked against the
declared fingerprint, then compiled from exactly those bytes and executed. No ``__pycache__`` is read or written.

Two ways the application's code is loaded, both here:

- its entry and criterion files, by path (:func:`load_source`, through ``_common.load_file``);
- the modules it imports itself from outside the env and the standard library (a ``src/`` it put on ``sys.path``):
  :class:`ProjectSources`, ahead of the standard path finder, finds them as that finder does and loads them from
  their source bytes; a bytecode file without source or a compiled extension there is never run.

The import machinery's own source loader would read a timestamp-valid ``__pycache__/*.pyc`` instead of the source
(``sys.dont_write_bytecode`` stops writing, not reading), so a planted one ran in place of the fingerprinted file.
Kernodeck's own in-env files are loaded the same way by ``_package.py``. Standard library only.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types
import zipimport
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from ._common import CheckFailed
from .protocol import Layer

TIP = "nox -s reference -- --new   (if the change is intended: a new reference for this code)"


def read_verified(path: Path, sha256: str | None, shown: str) -> bytes:
    """The file's bytes, read once; with a fingerprint, only when they are its bytes (CheckFailed otherwise)."""
    source = path.read_bytes()
    if sha256 is not None and hashlib.sha256(source).hexdigest() != sha256:
        raise CheckFailed(
            f"{shown} is not the file fingerprinted for this run (sha256 {sha256[:12]}...): it changed, so it is "
            "not run",
            Layer.APPLICATION,
            {"file": shown, "expected_sha256": sha256, "tip": TIP},
        )
    return source


APP_PREFIX = "kernodeck_app_"  # the names of the application's files loaded by path (application._function)


def from_project(module: types.ModuleType) -> bool:
    """Whether ``module`` is the application's own code as loaded here: one of its files loaded by path (under
    :data:`APP_PREFIX`) or a module it imported from its verified source bytes (:class:`ProjectSources`)."""
    spec = getattr(module, "__spec__", None)
    name = getattr(module, "__name__", None)
    return isinstance(getattr(spec, "loader", None), _SourceBytes) or (
        isinstance(name, str) and name.startswith(APP_PREFIX))


def _run(module: types.ModuleType, source: bytes, path: Path) -> None:
    exec(compile(source, str(path), "exec", dont_inherit=True), module.__dict__)


def load_source(path: Path, name: str, sha256: str | None = None, shown: str = "") -> types.ModuleType:
    """The module ``name`` from the file ``path``: read once, checked against ``sha256`` when given, compiled from
    those bytes; nothing is put on sys.path and no bytecode is read or written."""
    if name in sys.modules:
        return sys.modules[name]
    source = read_verified(path, sha256, shown or path.name)
    spec = importlib.util.spec_from_loader(name, loader=None, origin=str(path))
    assert spec is not None
    spec.has_location = True
    module = importlib.util.module_from_spec(spec)
    module.__file__ = str(path)
    sys.modules[name] = module
    try:
        _run(module, source, path)
    except BaseException:
        del sys.modules[name]
        raise
    return module


class _SourceBytes(importlib.machinery.SourceFileLoader):
    """One module of the project, from its source bytes (checked when the file is a declared source). The standard
    source loader's own API stays (``get_data``, ``get_resource_reader``: ``importlib.resources`` and
    ``pkgutil.get_data`` read a package's data through it, each read an audited open); only its code comes from the
    verified bytes, never from bytecode, and none is written."""

    def __init__(self, fullname: str, path: str, sha256: str | None, shown: str) -> None:
        super().__init__(fullname, path)
        self.sha256, self.shown = sha256, shown

    def get_code(self, fullname: str) -> types.CodeType:
        path = Path(self.get_filename(fullname))
        return compile(read_verified(path, self.sha256, self.shown), str(path), "exec", dont_inherit=True)


class ProjectSources(importlib.abc.MetaPathFinder):
    """Imports from outside the env and the standard library (``trusted`` says which paths are theirs), found as the
    standard path finder finds them, loaded from their verified source bytes instead of any bytecode."""

    def __init__(self, trusted: Callable[[str], bool], expected: Mapping[str, str], shown: Callable[[str], str],
                 active: Callable[[], bool]) -> None:
        self.trusted, self.expected, self.shown, self.active = trusted, expected, shown, active

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not self.active():  # only the application's code (world.window) imports through here
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or spec.origin is None or not spec.has_location:
            return spec
        origin = os.path.normpath(spec.origin)
        if self.trusted(origin):
            return spec
        if isinstance(spec.loader, importlib.machinery.SourceFileLoader):
            digest = self.expected.get(origin) or self.expected.get(os.path.realpath(origin))
            spec.loader = _SourceBytes(fullname, spec.origin, digest, self.shown(origin))
            spec.cached = None
            return spec
        if isinstance(spec.loader, zipimport.zipimporter):  # the archive may be declared: its members never are
            raise CheckFailed(
                f"a module from an archive (zipimport: {self.shown(origin)}) is not run from the project: declare its "
                "sources unpacked (code runs only from a file's own verified bytes)",
                Layer.APPLICATION, {"file": self.shown(origin), "module": fullname})
        if origin.endswith(".pyc"):
            why = ("bytecode without its source, outside the env and the declared sources: code that neither the lock "
                   "nor a declared source describes is never run")
        elif self.expected.get(origin) or self.expected.get(os.path.realpath(origin)):
            why = ("a compiled extension in the project's folder: declared, but native code is not run from the "
                   "project, where nothing checks it against this torch (the extensions step checks the env's); "
                   "build it into a wheel the lock pins")
        else:
            why = ("compiled code, outside the env and the declared sources: code that neither the lock nor a declared "
                   "source describes is never run")
        raise CheckFailed(
            f"the application imports {self.shown(origin)} ({why})",
            Layer.APPLICATION,
            {"file": self.shown(origin), "module": fullname},
        )


def install(finder: ProjectSources) -> None:
    """``finder`` ahead of the standard path finder, in place of an earlier one (another run's declarations)."""
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, ProjectSources)]
    at = next((i for i, f in enumerate(sys.meta_path) if f is importlib.machinery.PathFinder), len(sys.meta_path))
    sys.meta_path.insert(at, finder)
