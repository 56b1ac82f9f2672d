"""Inventories: what an env holds, observed NOW, compared with the lock (the contract) or another.

The observation reads every distribution's metadata, so editable installs (``-e``) and direct references
(``name @ url``) are part of the comparison. It is taken on every verify, never read back from what was saved when
the env was built. A rebuilt env is read from outside (``*.dist-info`` files; its files are held by
:mod:`kernodeck.env.envfiles`); another interpreter (``--python``) reports itself (``kernodeck/inenv/observe.py``, run
with ``-I -S`` so that no code of its site-packages runs) and checks each distribution's installed files against its
``RECORD`` (present, same size). The env's interpreter never starts with its ``site``: docs/env-integrity.md.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.markers import Marker
from packaging.utils import canonicalize_name

from kernodeck import tips
from kernodeck._proc import clean_env, run
from kernodeck.env.records import site_dirs
from kernodeck.errors import CommandFailed, KernodeckError, RebuildFailed
from kernodeck.lock.lockfile import Lockfile

OBSERVER = Path(__file__).resolve().parents[1] / "inenv" / "observe.py"
# How the env's interpreter is started: -I (no PYTHON* variable, no user site, no script folder on the path) and -S
# (no site: no .pth line executed, no sitecustomize/usercustomize imported, site-packages not on sys.path).
SAFE_FLAGS = ("-I", "-S")

# What a venv holds by construction (its installer), not by the lock's choice.
BOOTSTRAP = frozenset({"pip", "setuptools", "wheel"})


def require_the_locks(lock: Lockfile, markers: dict[str, str], installed: dict[str, str]) -> None:
    """The env as installed holds every pin that applies here (``markers``) at its version and nothing else: an
    installer option of this machine (a pip config file's ``target``, ``python``...) that sent the install elsewhere,
    or left a pin out, fails the build; no env is promoted that is not the lock's (red-team pass 59, PIP1)."""
    delta = diff(expected_from_lock(lock, markers), installed)
    if not delta.empty:
        raise RebuildFailed(
            f"the installed env is not the lock's ({delta.summary()}): an installer option of this machine sent "
            "the install elsewhere or left pins out (pip's config files; PIP_* or UV_* variables)",
            tip=f"pip config list (and PIP_*, UV_* variables): remove such an option; then {tips.REBUILD_FRESH}")


def without(freeze: str, names: list[str]) -> str:
    """A freeze's text without the lines of ``names`` (lower-case names)."""
    return "".join(line for line in freeze.splitlines(keepends=True)
                   if line.split("==", 1)[0].strip().lower() not in names)


def parse_freeze(text: str) -> dict[str, str]:
    """Freeze lines -> {canonical name: version}; ``name @ url`` keeps ``@ url``; an editable keeps ``-e url``.

    An editable's name comes from pip's comment line before it (``# Editable install ... (name==1.0)``) or from its
    ``#egg=name`` fragment.
    """
    found: dict[str, str] = {}
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            match = re.search(r"\(([A-Za-z0-9._-]+)==[^)]*\)", line)
            pending = match.group(1) if match else pending
            continue
        if line.startswith(("-e ", "--editable ")):
            url = line.split(None, 1)[1].strip()
            egg = re.search(r"[#&]egg=([A-Za-z0-9._-]+)", url)
            name = egg.group(1) if egg else pending
            if name:
                found[canonicalize_name(name)] = "-e " + url
            pending = ""
            continue
        pending = ""
        if " @ " in line:
            name, _, ref = line.partition(" @ ")
            found[canonicalize_name(name)] = "@ " + ref.strip()
        elif "==" in line:
            name, _, version = line.partition("==")
            found[canonicalize_name(name)] = version.strip()
    return found


@dataclass
class Observation:
    """An environment's distributions as observed now (by its own interpreter, or read from outside a rebuilt env)."""

    packages: dict[str, str]  # canonical name -> version, "@ url" (direct reference) or "-e url" (editable)
    damaged: dict[str, list[str]]  # name -> installed files that do not match its RECORD
    unrecorded: list[str]  # distributions without a RECORD (their files cannot be checked)
    shadowed: dict[str, list[str]]  # a name found more than once on the path: the later locations
    files_checked: int
    depth: str
    seconds: float
    text: str  # the inventory in freeze form (inventory.txt)

    def as_dict(self) -> dict[str, object]:
        return {
            "packages": len(self.packages),
            "files_checked": self.files_checked,
            "integrity": f"installed files vs RECORD ({self.depth})",
            "observe_s": self.seconds,
            **({"damaged": self.damaged} if self.damaged else {}),
            **({"without_record": self.unrecorded} if self.unrecorded else {}),
            **({"shadowed": self.shadowed} if self.shadowed else {}),
        }

    def damage_summary(self, limit: int = 3) -> str:
        parts = []
        for name, files in sorted(self.damaged.items()):
            more = f" (+{len(files) - limit} more)" if len(files) > limit else ""
            parts.append(f"{name}: {', '.join(files[:limit])}{more}")
        return "; ".join(parts)


def observe(python: Path | str, *, hashes: bool = False, files: bool = True) -> Observation:
    """What an env holds: its distributions (and, with ``files``, whether their files match each ``RECORD``).

    ``files=False`` is a rebuilt env (``<env>/bin/python``) whose files :mod:`kernodeck.env.envfiles` holds from
    outside: its packages are read from outside too (:func:`observe_outside`), and its interpreter is not started,
    so nothing dropped into it (a ``.pth``, a ``sitecustomize.py``) runs before those files are known clean.
    Otherwise the env's own interpreter reports (:func:`observe_inside`), started so that no code of its
    site-packages can run.
    """
    env = Path(python).parent.parent
    if not files and not hashes and (env / "pyvenv.cfg").is_file():
        return observe_outside(env)
    return observe_inside(python, hashes=hashes, files=files)


def observe_inside(python: Path | str, *, hashes: bool = False, files: bool = True) -> Observation:
    """Ask the env's interpreter, with ``-I -S``: nothing of the caller on its path (``-I``), no ``site`` (``-S``):
    no ``.pth`` line executed, no ``sitecustomize``/``usercustomize`` imported, site-packages not on ``sys.path``;
    observe.py reads the folders ``site`` would add without importing from them."""
    argv = [str(python), *SAFE_FLAGS, str(OBSERVER), *(["--hashes"] if hashes else []),
            *([] if files else ["--no-files"])]
    try:
        proc = run(argv, env=clean_env(), quiet=True)
        data = json.loads(proc.stdout)
    except CommandFailed as exc:
        raise KernodeckError(
            f"the environment's interpreter {python} cannot report its own packages: {exc.first_error}",
            tip=tips.REBUILD_FRESH,
        ) from exc
    except ValueError:
        raise KernodeckError(
            f"the environment's interpreter {python} gave no readable inventory", tip=tips.REBUILD_FRESH
        ) from None
    return _observation(data)


def observe_outside(env: Path) -> Observation:
    """A rebuilt env's distributions read from outside it: each ``*.dist-info``/``*.egg-info`` folder of its
    site-packages (and of the folders its ``.pth`` files name as paths) by :class:`importlib.metadata.PathDistribution`,
    which reads files and runs nothing. The same record as :func:`observe_inside` with ``files=False``."""
    start = time.perf_counter()
    dists = []
    for folder in search_path(env):
        try:
            infos = sorted(p for p in folder.iterdir() if p.suffix in (".dist-info", ".egg-info") and p.is_dir())
        except OSError:
            continue
        dists += [_distribution(importlib.metadata.PathDistribution(info), info) for info in infos]
    return _observation({"distributions": dists, "files_checked": 0, "depth": "none (checked outside the env)",
                         "seconds": round(time.perf_counter() - start, 3)})


def search_path(env: Path) -> list[Path]:
    """The env's site-packages folders, each followed by the folders its ``.pth`` files name (read as text; a line
    ``site`` would execute is neither run nor followed), in the order ``site`` adds them."""
    found: list[Path] = []
    for site in site_dirs(env):
        folder = env / site
        found.append(folder)
        for pth in sorted(folder.glob("*.pth")):
            if pth.name.startswith("."):
                continue
            try:
                lines = pth.read_text(encoding="utf-8-sig").splitlines()
            except (OSError, UnicodeDecodeError):
                continue
            for line in lines:
                if not line.strip() or line.startswith(("#", "import ", "import\t")):
                    continue
                named = Path(os.path.abspath(folder / line.rstrip()))
                if named.is_dir():
                    found.append(named)
    return list(dict.fromkeys(found))


def _distribution(dist: importlib.metadata.PathDistribution, info: Path) -> dict[str, object]:
    """One distribution as observe.py reports it (name, version, direct URL, location, whether it has a RECORD)."""
    location = str(dist.locate_file(""))
    try:
        meta = dist.metadata  # parsed once: importlib parses it again on every access (``version`` included)
        name = meta["Name"]
    except (OSError, TypeError, ValueError):  # no METADATA/PKG-INFO to read
        name = None
    direct: dict[str, object] | None = None
    raw = dist.read_text("direct_url.json")
    if raw:
        try:
            data = json.loads(raw)
            url = str(data.get("url", ""))
            vcs = data.get("vcs_info") or {}
            if vcs.get("commit_id"):
                url = f"{vcs.get('vcs', 'git')}+{url}@{vcs['commit_id']}"
            direct = {"url": url, "editable": bool((data.get("dir_info") or {}).get("editable"))}
        except (ValueError, AttributeError):
            direct = {"url": "(unreadable direct_url.json)", "editable": False}
    return {"name": name or f"(no name: {location})", "version": meta["Version"] if name else "",
            "direct_url": direct, "location": location, "record": _readable(info / "RECORD"), "damaged": []}


def _readable(path: Path) -> bool:
    """Whether ``read_text`` of a distribution would give this file's text (not None), without reading a RECORD of
    megabytes whole: the errors importlib turns into None are the ones that say no."""
    try:
        with path.open("rb") as handle:
            handle.read(1)
    except (FileNotFoundError, IsADirectoryError, KeyError, NotADirectoryError, PermissionError):
        return False
    return True


def _observation(data: dict[str, Any]) -> Observation:
    """The record of observe.py's JSON (or the same shape read from outside)."""
    packages: dict[str, str] = {}
    damaged: dict[str, list[str]] = {}
    shadowed: dict[str, list[str]] = {}
    unrecorded: list[str] = []
    lines: list[str] = []
    for dist in data["distributions"]:
        name = canonicalize_name(str(dist["name"]))
        if name in packages:  # the first on the path is the one imported; a later one is recorded, not counted
            shadowed.setdefault(name, []).append(f"{dist['version']} at {dist['location']}")
            continue
        direct = dist.get("direct_url")
        if direct and direct.get("editable"):
            packages[name] = "-e " + str(direct["url"])
            lines += [f"# Editable install ({dist['name']}=={dist['version']})", f"-e {direct['url']}"]
        elif direct:
            packages[name] = "@ " + str(direct["url"])
            lines.append(f"{dist['name']} @ {direct['url']}")
        else:
            packages[name] = str(dist["version"])
            lines.append(f"{dist['name']}=={dist['version']}")
        if dist.get("damaged"):
            damaged[name] = list(dist["damaged"])
        if not dist.get("record"):
            unrecorded.append(name)
    blocks: list[str] = []  # freeze order: by name, an editable's comment line kept above its -e line
    for line in lines:
        if blocks and blocks[-1].startswith("# Editable") and "\n" not in blocks[-1]:  # its -e line only
            blocks[-1] += "\n" + line
        else:
            blocks.append(line)
    blocks.sort(key=lambda b: b.removeprefix("# Editable install (").lower())
    return Observation(
        packages=packages,
        damaged=damaged,
        unrecorded=sorted(unrecorded),
        shadowed=shadowed,
        files_checked=int(data.get("files_checked", 0)),
        depth=str(data.get("depth", "size")),
        seconds=float(data.get("seconds", 0.0)),
        text="\n".join(blocks) + "\n",
    )


def bytecode_validator(python: Path | str) -> Callable[[list[tuple[str, str]]], list[tuple[str, str]]]:
    """Check bytecode files against their sources with the env's own interpreter (``observe.py --bytecode``), started
    with ``-I -S``: compiling a source by path needs nothing of site-packages, so none of its code runs.

    :func:`kernodeck.env.envfiles.check` calls it only when every other file of the env is the build's."""

    def validate(pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
        with tempfile.TemporaryDirectory(prefix="kernodeck-bytecode-") as tmp:
            listing = Path(tmp) / "bytecode.json"
            listing.write_text(json.dumps(pairs), encoding="utf-8")
            try:
                argv = [str(python), *SAFE_FLAGS, str(OBSERVER), "--bytecode", str(listing)]
                proc = run(argv, env=clean_env(), quiet=True)
                return [(str(a), str(b)) for a, b in json.loads(proc.stdout)]
            except CommandFailed as exc:
                raise KernodeckError(
                    f"the environment's interpreter {python} cannot check its bytecode: {exc.first_error}",
                    tip=tips.REBUILD_FRESH,
                ) from exc
            except ValueError:
                raise KernodeckError(f"the environment's interpreter {python} gave no readable bytecode check",
                                     tip=tips.REBUILD_FRESH) from None

    return validate


@dataclass
class InventoryDiff:
    added: dict[str, str] = field(default_factory=dict)  # in the observed, not the expected
    removed: dict[str, str] = field(default_factory=dict)  # expected, not observed
    changed: dict[str, tuple[str, str]] = field(default_factory=dict)  # name -> (expected, observed)

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.changed)

    def as_dict(self) -> dict[str, object]:
        return {
            "added": self.added,
            "removed": self.removed,
            "changed": {k: {"expected": a, "observed": b} for k, (a, b) in self.changed.items()},
        }

    def summary(self) -> str:
        def pin(name: str, value: str) -> str:
            return f"{name} {value}" if value.startswith(("@ ", "-e ")) else f"{name}=={value}"

        parts = [f"+{pin(n, v)}" for n, v in sorted(self.added.items())]
        parts += [f"-{pin(n, v)}" for n, v in sorted(self.removed.items())]
        parts += [f"{n} {a} -> {b}" for n, (a, b) in sorted(self.changed.items())]
        return ", ".join(parts) if parts else "identical"


def diff(expected: dict[str, str], observed: dict[str, str], ignore: frozenset[str] = frozenset()) -> InventoryDiff:
    result = InventoryDiff()
    for name in sorted(set(expected) | set(observed)):
        if name in ignore:
            continue
        exp, obs = expected.get(name), observed.get(name)
        if exp is None and obs is not None:
            result.added[name] = obs
        elif obs is None and exp is not None:
            result.removed[name] = exp
        elif exp != obs and exp is not None and obs is not None:
            result.changed[name] = (exp, obs)
    return result


def expected_from_lock(lock: Lockfile, environment: dict[str, str]) -> dict[str, str]:
    """The pins that apply to an environment: markers evaluated with its values (env/pythons.marker_values: what its
    own interpreter reports, never those of the interpreter running Kernodeck, which may be another Python)."""
    out = {}
    for pin in lock.pins:
        if pin.marker and not Marker(pin.marker).evaluate(environment):
            continue
        out[pin.name] = pin.version
    return out
