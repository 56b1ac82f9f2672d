"""The pip that reads a build before its seal: ``pip freeze --all`` and ``pip check`` in ONE process, and (a seeded
env, the fallback) the removal of the seeds the lock does not pin.

Nothing of the env runs there: a declared built-here pin's wheel writes what its build decides, pip's own folder
included (red-team pass 74, PIPCODE1: a hash-based pyc it put in the env's pip's ``__pycache__`` ran in place of
``check.py``). So the pip is never the env's, even when the lock pins pip: Kernodeck's own (the one pip-tools runs
with, a dependency of Kernodeck) when its ``Requires-Python`` admits the env's Python; where its modules were compiled
when it was installed (pip's own install does; uv's does not unless asked), the process reads their bytecode
(0.25 CPU-s here, for the env of the Python Kernodeck runs on); else the pip the base interpreter bundles for
ensurepip, run from its zipped wheel (1.2 CPU-s: its ~450 modules compiled again in every process); the env's own
pip only when there is neither (stated in docs/rebuild.md).

How the process runs: the base interpreter the env was made from, not the env's own (which reads at start-up what the
build could write in the env's ``bin/``: a ``python._pth`` naming another standard library: pass 77, PTHDOOR1), with
``-I -S -B``: neither the project's folder (the current one) nor
``site`` (so no ``.pth`` line of the env runs, nor prints the lines that separate the outputs: pass 72, SITEREACH1),
no bytecode written. The env's site folders are on sys.path, where pip reads the distributions' metadata, but no
module is imported from them: top-level names are looked up on the rest of the path (the standard library, pip's
wheel), and a name found only in the env is absent (before, a module of the env named like a standard one ran in its
place: pass 73, STDSHADOW1; then one named as an optional import the standard library lacks, ``socks``: pass 74,
OPTIMPORT1). Kernodeck's pip folder is loaded as the package ``pip`` itself (its parent folder on no path). It
starts no program (an audit hook refuses it; no PATH either): pip freeze started the VCS tool of an editable record's
folder, whose settings may run the env's code (Mercurial's hooks: pass 75, VCSFREEZE1). The line after each command's
output carries a nonce drawn for the process: pip prints a dist-info's data as it is (pass 75, SEPFORGE1: forged
lines in a ``direct_url.json``). The process gets no ``PIP_*`` variable and no config file (installenv.reading_env).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import secrets
from pathlib import Path

from packaging.specifiers import SpecifierSet

from kernodeck.env.records import site_dirs

# The line after each command's output: with a nonce drawn for the run, which nothing written before it (a
# dist-info's data that pip prints as it is: red-team pass 75, SEPFORGE1) can hold.
_SEP = "--- kernodeck {}: {} exited {} ---"
# No program starts there: pip freeze starts the VCS tool of an editable distribution's folder (git, hg) in that
# folder, whose repository settings may run code of the env (Mercurial's hooks: pass 75, VCSFREEZE1).
_NO_PROGRAM = ("def _no_program(event, args):\n"
               "    if event in ('subprocess.Popen', 'os.system', 'os.exec', 'os.posix_spawn', 'os.spawn', 'os.fork',"
               " 'os.forkpty'):\n"
               "        raise PermissionError(f'kernodeck: no program starts while the env is read before its seal "
               "({event})')\n"
               "sys.addaudithook(_no_program)\n")
# Kernodeck's pip loaded as the package ``pip`` from its folder (argv[1]), its submodules found under it.
_LOAD = ("import importlib.util\nfolder = sys.argv.pop(1)\n"
         "spec = importlib.util.spec_from_file_location('pip', folder + '/__init__.py', "
         "submodule_search_locations=[folder])\n"
         "sys.modules['pip'] = module = importlib.util.module_from_spec(spec)\nspec.loader.exec_module(module)\n")
# The env's site folders (the rest of argv) on sys.path, where pip reads the distributions' metadata, but never a
# module's: a top-level name is looked up on the path without them (the standard library, pip's wheel); one it lacks
# is absent, even if the env has it (pip and the standard library try names they may lack: ``socks``, ``attr``, ``org``:
# red-team pass 74, OPTIMPORT1). Placed before PathFinder, after the builtin and frozen importers.
_CLOSE = ("from importlib.machinery import PathFinder\nsites = sys.argv[1:]\n"
          "class EnvFolders:\n"
          "    @staticmethod\n"
          "    def find_spec(name, path=None, target=None):\n"
          "        if path is not None or name in OWN:\n"
          "            return None\n"
          "        spec = PathFinder.find_spec(name, [p for p in sys.path if p not in sites], target)\n"
          "        if spec is None:\n"
          "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
          "        return spec\n"
          "sys.meta_path.insert(sys.meta_path.index(PathFinder), EnvFolders)\n"
          "sys.path += sites\n")
_WHEEL = "sys.path.append(sys.argv.pop(1))\n"  # pip's zipped wheel: after the standard library
FREEZE_AND_CHECK = (("freeze", "--all"), ("check",))


def tool_pip(python_version: str) -> Path | None:
    """The folder of Kernodeck's own pip when its ``Requires-Python`` admits the env's ``python_version``; None when it
    does not, or when pip is not a plain folder of modules here (its distribution's own)."""
    spec = importlib.util.find_spec("pip")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if len(locations) != 1 or not (folder := Path(locations[0])).joinpath("__init__.py").is_file():
        return None
    try:
        dist = importlib.metadata.distribution("pip")
    except importlib.metadata.PackageNotFoundError:
        return None
    if Path(str(dist.locate_file("pip"))).resolve() != folder.resolve():
        return None
    return folder if SpecifierSet(dist.metadata["Requires-Python"] or "").contains(python_version) else None


def tool_version(folder: Path) -> str:
    """The version a pip folder declares (``__version__`` in its ``__init__.py``), read, not imported."""
    found = re.search(r"""^__version__\s*=\s*["']([^"']+)["']""", (folder / "__init__.py").read_text(encoding="utf-8"),
                      re.MULTILINE)
    return found.group(1) if found else "unknown"


def nonce() -> str:
    """A new nonce for the lines of :func:`argv`."""
    return secrets.token_hex(16)


def argv(pip: list[str], env: Path, commands: tuple[tuple[str, ...], ...], drawn: str) -> list[str]:
    """One process of the env at ``env`` running pip's ``commands`` in turn, each one's output followed by a line
    naming its exit status and the nonce ``drawn`` (:func:`split`); it starts no program. ``pip``: ``[python, "-I",
    "-m", "pip"]`` (the env's own), ``[python, "-I", WHEEL/pip]`` (a zipped wheel) or ``[python, "-I", FOLDER]``
    (Kernodeck's pip's folder)."""
    python, rest = pip[0], [a for a in pip[1:] if a != "-I"]
    outside = rest[0] if rest and rest[0] != "-m" else None
    folder = outside is not None and not outside.endswith(".whl/pip")  # else a zipped wheel, run as WHEEL/pip
    script = "import io, sys\n" + _NO_PROGRAM + (_LOAD if folder else "") + (_WHEEL if outside and not folder else "")
    script += f"OWN = {set() if outside else {'pip'}!r}\n" + _CLOSE  # the env's own pip: the one module it may give
    script += "from pip._internal.cli.main import main\n"
    # each command's output as it wrote it; a failed one's errors (pip's stderr) before it, so that its first line
    # names the cause
    script += (f"for args in {[list(c) for c in commands]!r}:\n"
               "    sys.stdout, sys.stderr = out, err = io.StringIO(), io.StringIO()\n"
               "    code = main(args)\n"
               "    sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__\n"
               "    sys.stdout.write((err.getvalue() if code else '') + out.getvalue())\n"
               f"    print({_SEP!r}.format({drawn!r}, args[0], code), flush=True)\n")
    lead = [] if outside is None else [outside if folder else outside.removesuffix("/pip")]
    return [python, "-I", "-S", "-B", "-c", script, *lead,
            *(str(env / d) for d in site_dirs(env))]


def split(out: str, names: tuple[str, ...], drawn: str) -> dict[str, tuple[str, int]]:
    """{command: (its output, its exit status)} from that process's output, the commands named in the order they ran:
    each one's output is the text before its line; -1 for one whose line is missing."""
    found: dict[str, tuple[str, int]] = {}
    rest = out
    for name in names:
        head, sep, tail = rest.partition(_SEP.format(drawn, name, "").removesuffix(" ---"))
        code, _, rest = tail.partition(" ---\n")
        found[name] = (head, int(code) if sep and code.lstrip("-").isdigit() else -1)
    return found


def check_and_freeze_argv(pip: list[str], env: Path, drawn: str) -> list[str]:
    """``pip freeze --all`` then ``pip check`` in one process (:func:`argv`)."""
    return argv(pip, env, FREEZE_AND_CHECK, drawn)


def split_check_and_freeze(out: str, drawn: str) -> tuple[str, str, int, int]:
    """(freeze's output, check's, freeze's exit status, check's) from that process's output."""
    (freeze, froze), (check, checked) = split(out, ("freeze", "check"), drawn).values()
    return freeze, check, froze, checked
