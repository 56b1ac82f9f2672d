"""The one way an in-env script reaches its siblings: this folder loaded as the package ``kernodeck_inenv``.

The scripts (runner.py, calibrate.py, drift.py, compare_outputs.py, resume.py's and resume_app.py's workers) run by
path with ``python -I``: their folder is not on sys.path, and nothing is put there (a project's ``numpy/`` folder must
never shadow the env's numpy). Each runs THIS file by its path, before anything else (its arguments included), which
also registers the process for its stacks when a supervisor runs it (``stackhooks.install``: every in-env process in
one place; ``tests/unit/test_stackhooks.py`` runs each script)::

    runpy.run_path(str(HERE / "_package.py"))  # then: from kernodeck_inenv.tolerance import compare

which loads this folder's ``__init__.py`` as ``kernodeck_inenv``: the siblings are then ``kernodeck_inenv.<module>``
(they import each other relatively), never the orchestrator's ``kernodeck`` package. Loading again is a no-op.
Standard library only.

Code runs only from verified bytes: the package's loader (:class:`VerifiedSources`, first on ``sys.meta_path``) reads
each sibling ONCE, records the sha256 of those bytes, and compiles and executes exactly them (or, where the runner was
told of the build's compiled siblings, ``compiled.py``, the code the build compiled from bytes of that very digest). No
``__pycache__`` is read or written (a timestamp-valid ``.pyc`` planted beside a sibling, in a checkout or in an
installed Kernodeck's site-packages, would otherwise run instead of the source). A script given the orchestrator's
fingerprints of this folder (``run-config.json``'s ``inenv_sha256``) calls :meth:`VerifiedSources.expect`: the files
already loaded are checked then, every later one before it runs. The scripts run by path (runner.py, this file) are
compiled from their source by the interpreter itself (running a file by path never reads bytecode); their digests are
recorded too.

``sys.dont_write_bytecode`` is left as it is: this loader writes no bytecode anyway, and the env's own modules (torch,
transformers: thousands of files) keep the cache the interpreter writes into the env's ``__pycache__`` (checked
against its source by the next verify's inventory step, docs/env-integrity.md). Set here, it made every in-env
process compile them from source again: a verify's torch import took twice as long (docs/speed.md). A file outside
the env and the stdlib (the project's, loaded the ordinary way by the application) gets no cache and is always
compiled from its own bytes, never from a ``.pyc`` (:func:`_cache_only_the_envs_bytecode`).
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

PACKAGE = "kernodeck_inenv"


class VerifiedSources(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """This folder's ``*.py`` files as the package ``kernodeck_inenv``: each read once, hashed, compiled from those
    bytes (the package's own ``__loader__``: ``sys.modules["kernodeck_inenv"].__loader__``)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.digests: dict[str, str] = {}  # file name -> sha256 of the bytes compiled (or run by path)
        self.expected: dict[str, str] | None = None
        # the build's compiled siblings (compiled.py), keyed by name, digest and path: given only where the env's
        # files were proven the build's (the runner's --compiled); a file of another digest is compiled here
        self.code: dict[tuple[str, str, str], Any] = {}

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname == PACKAGE:
            file, package = self.folder / "__init__.py", True
        elif fullname.startswith(PACKAGE + ".") and "." not in fullname[len(PACKAGE) + 1 :]:
            file, package = self.folder / (fullname[len(PACKAGE) + 1 :] + ".py"), False
        else:
            return None
        if not file.is_file():
            return None  # the package's __path__ is empty: nothing else can find a sibling (no sourceless .pyc)
        spec = importlib.util.spec_from_file_location(
            fullname, file, loader=self, submodule_search_locations=[] if package else None
        )
        assert spec is not None
        spec.cached = None  # no bytecode file belongs to it
        return spec

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        assert module.__spec__ is not None and module.__spec__.origin is not None
        path = Path(module.__spec__.origin)
        source = path.read_bytes()  # the one read: these bytes are hashed and compiled
        digest = hashlib.sha256(source).hexdigest()
        self._record(path.name, digest)
        code = self.code.get((path.name, digest, str(path)))  # what the build compiled from these very bytes
        exec(compile(source, str(path), "exec", dont_inherit=True) if code is None else code, module.__dict__)

    def ran(self, path: Path) -> None:
        """A script of this folder the interpreter ran by path (compiled from its source): its digest, for the check."""
        self._record(path.name, hashlib.sha256(path.read_bytes()).hexdigest())

    def check(self, script: Path, expected: Mapping[str, str] | None) -> None:
        """What a script run by path calls once it has the orchestrator's fingerprints (``inenv_sha256``, or None
        where it was given none): its own digest recorded, then every file checked (:meth:`expect`)."""
        self.ran(script)
        if expected:
            self.expect(expected)

    def _record(self, name: str, digest: str) -> None:
        self.digests[name] = digest
        if self.expected is not None and self.expected.get(name) != digest:
            raise ImportError(self._differs([name]))

    def expect(self, expected: Mapping[str, str]) -> None:
        """The orchestrator's fingerprints of this folder: every file loaded so far must match, and each later one
        before it runs (ImportError naming the files otherwise)."""
        self.expected = {str(k): str(v) for k, v in expected.items()}
        wrong = sorted(name for name, digest in self.digests.items() if self.expected.get(name) != digest)
        if wrong:
            raise ImportError(self._differs(wrong))

    def _differs(self, names: list[str]) -> str:
        return (
            f"Kernodeck's in-env file(s) {', '.join(names)} in {self.folder} are not the bytes the orchestrator "
            "fingerprinted for this run (changed during the run, or not Kernodeck's)"
        )


def _cache_only_the_envs_bytecode(homes: types.ModuleType) -> None:
    """The interpreter keeps reading and writing bytecode for the env's own modules and the stdlib (``homes``: the
    one list, which the closed world trusts too: torch is not compiled again by each run), never for a file elsewhere:
    a project file the application loads the ordinary way (``spec_from_file_location``, ``runpy``) is compiled from its
    own bytes, leaves no ``__pycache__`` in the project, and a planted ``.pyc`` of it (or of a ``.py`` inside a
    declared data source) never runs in its place. A file is judged where its cache would be (the path as given) and
    where its bytes are (resolved): a project file that is a link into the env gets no cache beside it either. The
    source loader's ``get_code`` is the one place bytecode is read and written (``_cache_bytecode`` is called from it
    alone), so only it is replaced."""
    plain_code = importlib.machinery.SourceFileLoader.get_code
    if getattr(plain_code, "kernodeck_env_only", False):
        return

    folders: dict[str, str] = {}  # a home folder -> where it resolves (the env is proven unchanged, links included)

    def resolved(path: str) -> str:
        """``os.path.realpath(path)`` for a path given inside a home: its folder resolved once per run (thousands of
        modules share a few hundred folders: 0.3 s of lstat calls for torch's import here), the file's own link each
        time."""
        folder, name = os.path.split(path)
        real = folders.get(folder)
        if real is None:
            real = folders[folder] = os.path.realpath(folder)
        found = os.path.join(real, name)
        return os.path.realpath(found) if os.path.islink(found) else found

    def get_code(self: Any, fullname: str) -> Any:
        given = self.get_filename(fullname)
        path = os.path.normpath(os.path.abspath(given))
        # a ".." is followed after the link before it, as the system opens the path: resolved as given, whole
        # (red-team pass 32, RULE1: folded as text first, a link's "/.." landed in the env)
        real = os.path.realpath(given) if ".." in given.split(os.sep) else resolved(path)
        if homes.home(path) and homes.home(real):
            return plain_code(self, fullname)
        return self.source_to_code(self.get_data(given), given)

    get_code.kernodeck_env_only = True  # type: ignore[attr-defined]
    get_code.kernodeck_homes = homes  # type: ignore[attr-defined]  # the list it reads (tests/unit/test_homes.py)
    importlib.machinery.SourceFileLoader.get_code = get_code  # type: ignore[method-assign]


def load(compiled: str = "", sha256: str = "") -> None:
    """This folder as the package ``kernodeck_inenv`` in ``sys.modules`` (once per process), then the bytecode rule
    (its list of homes is a sibling, loaded through the verified loader first: only the standard library ran before
    it, whose bytecode the rule keeps anyway), then the stacks hook (``stackhooks.install``). ``compiled``: the
    build's compiled siblings in the env (compiled.py), read only as the bytes of digest ``sha256``, which the loader
    then takes for the bytes it verified."""
    if PACKAGE in sys.modules:
        return
    here = Path(__file__).resolve().parent
    sources = VerifiedSources(here)
    sys.meta_path.insert(0, sources)
    sources.ran(here / "_package.py")
    try:
        importlib.import_module(PACKAGE)
        if compiled and sha256:
            sources.code = importlib.import_module(PACKAGE + ".compiled").read(Path(compiled), sha256)
        homes = importlib.import_module(PACKAGE + ".homes")
    except BaseException:
        sys.meta_path.remove(sources)
        raise
    _cache_only_the_envs_bytecode(homes)
    # Every in-env process loads its siblings here, first: here it registers for its stacks (a no-op outside a
    # supervised run), so that no script, the runner, a resume worker, calibrate's, can start without (red-team
    # pass 57, HANG1: resume_app.py's worker never registered).
    importlib.import_module(PACKAGE + ".stackhooks").install()


# what running this file by path is for; the runner gives COMPILED and COMPILED_SHA256 (runpy's init_globals) where it
# was told of the build's compiled siblings
load(str(globals().get("COMPILED") or ""), str(globals().get("COMPILED_SHA256") or ""))
