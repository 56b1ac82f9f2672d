"""The files a lock's inputs name by ``-r``/``-c`` (``--requirement``, ``--constraint``), read as pip reads them.

pip-compile and ``uv pip compile`` both read a file an input names by one of these options, with its path relative to
the file that names it, and follow the files it names in turn. Each such file decides the lock as much as the input
itself, so each is an input of the lock, fingerprinted beside it (:func:`kernodeck.lock.inputs.compute_inputs`;
red-team pass 44, LOCK4). One the project cannot hold to (a URL, a file outside the project, a path that goes through
an environment variable, a file that does not exist) is refused with one ERROR naming the ``.in`` file and line.

The lines are read as pip's requirements parser reads them: backslash continuations joined, comments left out, and an
option line's tokens split as a shell splits them; the long options may be abbreviated as optparse allows, and a short
option's value may follow it directly (``-cconstraints.txt``). Every ``-r``/``-c`` of a line is followed (pip reads
the first, uv each): reading one more file than the resolver only makes the check stricter.

A local package source an input names (``-f``/``--find-links``, ``-i``/``--index-url``, ``--extra-index-url`` with a
path or a ``file:`` URL) decides the lock too: each is a :class:`Linked` folder (:func:`linked`), whose files are
inputs of the lock by their path and sha256 (red-team pass 46, LOCK8): a find-links folder's direct entries (what pip
and uv list there), a local PEP 503 index's files at any depth. One outside the project is refused as an ``-r`` file
outside it is. A remote source (``https:``) is left to the resolver, as before.
"""

from __future__ import annotations

import os
import posixpath
import re
import shlex
import urllib.parse
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

from kernodeck import tips
from kernodeck.errors import ConfigError
from kernodeck.sources import redact_text

# optparse takes a long option by any unambiguous prefix: pip's requirement-file options include --require-hashes,
# --config-settings and --editable, so "--requirem", "--cons" and "--ex" are the shortest prefixes that name these.
_LONG = {"--requirement": ("-r", len("--requirem")), "--constraint": ("-c", len("--cons")),
         "--find-links": ("-f", len("--f")), "--index-url": ("-i", len("--i")),
         "--extra-index-url": ("--extra-index-url", len("--ex"))}
_SHORT = ("-r", "-c", "-f", "-i")
_FILES = ("-r", "-c")  # the options that name a requirements file; the others name a package source
_SOURCE_NAMES = {"-f": "--find-links", "-i": "--index-url", "--extra-index-url": "--extra-index-url"}
_COMMENT = re.compile(r"(^|\s+)#.*$")  # pip's COMMENT_RE
_URL = re.compile(r"^(?:[A-Za-z][A-Za-z0-9+.-]*://|(?:https?|file):)", re.IGNORECASE)  # pip reads these as URLs
_ENV = re.compile(r"\$\{[A-Za-z0-9_]+\}")  # pip expands ${NAME} in every line


@dataclass(frozen=True)
class Named:
    """A file an input names by ``-r``/``-c``: its path relative to the project (``/`` separated) and where it is
    named (``by``: the naming file, relative to the project; ``line``: the line the option starts on)."""

    rel: str
    by: str
    line: int

    @property
    def where(self) -> str:
        return f"{self.by}:{self.line}"


def logical_lines(text: str) -> list[tuple[int, str]]:
    """The lines pip's parser reads (``join_lines`` then ``ignore_comments``): a line ending in a backslash continues
    on the next one (a comment line never does), comments are left out; each with its first physical line's number."""
    joined: list[tuple[int, str]] = []
    parts: list[str] = []
    start = 0
    for number, line in enumerate(text.splitlines(), 1):
        if not line.endswith("\\") or _COMMENT.match(line):
            if parts:
                joined.append((start, "".join(parts) + (" " + line if _COMMENT.match(line) else line)))
                parts = []
            else:
                joined.append((number, line))
        else:
            start = start if parts else number
            parts.append(line.strip("\\"))
    if parts:
        joined.append((start, "".join(parts)))
    stripped = [(number, _COMMENT.sub("", line).strip()) for number, line in joined]
    return [(number, line) for number, line in stripped if line]


def _option(token: str) -> tuple[str, str | None] | None:
    """(the option's short name, the value when the token holds it) for a token that opens one of :data:`_LONG`."""
    if token.startswith("--"):
        name, eq, value = token.partition("=")
        for long, (short, shortest) in _LONG.items():
            if len(name) >= shortest and long.startswith(name):
                return short, value if eq else None
        return None
    if token[:2] in _SHORT:
        return token[:2], token[2:] or None
    return None


def named_in(text: str) -> list[tuple[int, str, str]]:
    """Each ``-r``/``-c`` of an option line: (line number, ``-r`` or ``-c``, the path or URL it names as written)."""
    return [found for found in options_in(text) if found[1] in _FILES]


def options_in(text: str) -> list[tuple[int, str, str]]:
    """Each ``-r``/``-c``/``-f``/``-i``/``--extra-index-url`` of an option line (one whose first token is an option,
    as pip's ``break_args_options`` decides): (line number, the option's short name, its value as written)."""
    found: list[tuple[int, str, str]] = []
    for number, line in logical_lines(text):
        if not line.startswith("-"):
            continue  # a requirement, whose options (--hash ...) name no file
        try:
            tokens = shlex.split(line)
        except ValueError:  # an unclosed quote: the resolver says so; its -r/-c are still followed
            tokens = line.split()
        index = 0
        while index < len(tokens):
            opened = _option(tokens[index])
            index += 1
            if opened is None:
                continue
            short, value = opened
            if value is None and index < len(tokens):
                value, index = tokens[index], index + 1
            if value:
                found.append((number, short, value))
    return found


_WHY_FILES = "every file an input names by -r/-c is an input of the lock, fingerprinted with it"
_WHY_SOURCES = "every local package source an input names is an input of the lock, each file in it fingerprinted"


def _refuse(where: str, shown: str, problem: str, tip: str, why: str = _WHY_FILES) -> ConfigError:
    return ConfigError(f"{where}: `{shown}` {problem}; {why}", tip=tip)


def _target(root: Path, by: str, number: int, option: str, value: str) -> str:
    """The file ``option value`` on ``by``'s line ``number`` names, relative to the project; refused when the project
    cannot hold to it."""
    where, shown = f"{by}:{number}", redact_text(f"{option} {value}")
    relative = f"name a file of the project relative to {by}, as pip and uv read it"
    if _ENV.search(value):
        raise _refuse(where, shown, "names its file through an environment variable (each machine may read another)",
                      f"{relative}, then: {tips.LOCK}")
    if _URL.match(value):
        raise _refuse(where, shown, "names a URL (what it serves can change under the same name, unseen)",
                      f"download it into the project and {relative} (e.g. `{option} "
                      f"{posixpath.basename(value.split('?', 1)[0].rstrip('/')) or 'constraints.txt'}`), "
                      f"then: {tips.LOCK}")
    if posixpath.isabs(value) or os.path.isabs(value):
        raise _refuse(where, shown, "names a file by its absolute path (another clone reads another file)",
                      f"{relative}, then: {tips.LOCK}")
    rel = posixpath.normpath(posixpath.join(posixpath.dirname(by), value.replace(os.sep, "/")))
    path = root / rel
    if rel == ".." or rel.startswith("../") or not path.resolve().is_relative_to(root.resolve()):
        raise _refuse(where, shown, "names a file outside the project",
                      f"copy it into the project (e.g. beside {by}) and name that copy, then: {tips.LOCK}")
    if not path.is_file():
        raise _refuse(where, shown, f"names {rel}, which does not exist" if not path.exists()
                      else f"names {rel}, which is not a file",
                      f"create {rel}, or remove that line from {by}; then: {tips.LOCK}")
    return rel


def _expanded(by: str, text: str) -> None:
    """Refuse a line of ``by`` that pip would fill from the caller's environment (``${NAME}``, in any line: pip
    expands it in a requirement as much as in an option), naming the file and line (red-team pass 47, LOCK9)."""
    for number, line in logical_lines(text):
        found = _ENV.search(line)
        if found:  # an option's value names its file or place through one: refused before, by _target or _places
            raise _refuse(f"{by}:{number}", redact_text(line), f"takes {found.group(0)} from the environment of "
                          "whoever runs the resolver (each machine may pin another version)",
                          f"write the value itself in {by}, then: {tips.LOCK}",
                          "every input of the lock is held by its bytes, and a variable is none of them")


# The marker variables a platform id fixes (its Python's major.minor, the OS and architecture, the interpreter kind;
# the legacy dotted spellings too) and ``extra``. Any other (the full Python version, the kernel's release or version,
# the implementation's version) is the resolving machine's, which no input records: the same inputs pin another
# version on another machine of the platform (red-team pass 49, LOCK10).
PLATFORM_MARKERS = frozenset({
    "python_version", "sys_platform", "platform_system", "platform_machine", "os_name", "implementation_name",
    "platform_python_implementation", "extra", "os.name", "sys.platform", "platform.machine",
    "platform.python_implementation", "python_implementation",
})


def _variables(node: object) -> set[str]:
    """The variables a parsed marker (packaging's ``Marker._markers``: nested lists of (variable, op, value)) reads."""
    if isinstance(node, (list, tuple)):
        return {name for item in node for name in _variables(item)}
    return {str(node.value)} if type(node).__name__ == "Variable" else set()  # type: ignore[attr-defined]


def _machine_markers(by: str, text: str) -> None:
    """Refuse a requirement of ``by`` whose marker reads a variable the platform id does not fix, naming its line."""
    for number, line in logical_lines(text):
        if line.startswith("-"):
            continue
        try:  # a line pip reads that packaging does not (a direct URL with ``;`` in it): pip-compile judges it
            marker = Requirement(line.split(" --", 1)[0]).marker  # inline options (--hash) left out
        except InvalidRequirement:
            continue
        machine = sorted(_variables(getattr(marker, "_markers", [])) - PLATFORM_MARKERS) if marker else []
        if machine:
            raise _refuse(f"{by}:{number}", redact_text(line), f"has a marker on {', '.join(machine)}, which the "
                          "machine that resolves decides, not the platform (another machine of it may pin another "
                          "version)", "write it on python_version, sys_platform, platform_machine or another "
                          f"variable the platform fixes (docs/locks.md), or drop it; then: {tips.LOCK}",
                          "every input of the lock is held by its bytes, and the resolving machine is none of them")


def included(root: Path, declared: Sequence[str]) -> list[Named]:
    """Every file the ``declared`` inputs (paths relative to ``root``) name by ``-r``/``-c``, nested ones too, each
    once, in the order they are first named (the declared files themselves left out; a cycle ends where it closes).
    Raises ConfigError, naming the file and line, for one the project cannot hold to (:func:`_target`)."""
    return read_inputs(root, declared).named


@dataclass(frozen=True)
class Linked:
    """A place of the project an input names as a package source (``-f``, ``-i``, ``--extra-index-url``): its path
    relative to the project, where it is named, and whether the resolver reads it at any depth (an index) or only
    its direct entries (a find-links folder)."""

    rel: str
    by: str
    line: int
    option: str
    deep: bool

    @property
    def where(self) -> str:
        return f"the folder {self.rel} that {self.by}:{self.line} names by {self.option}"

    def files(self, root: Path) -> list[str]:
        """The files the resolver may read there, relative to the project (``/`` separated), sorted."""
        place = root / self.rel
        if place.is_file():
            return [self.rel]
        found = place.rglob("*") if self.deep else place.iterdir()
        return sorted(f"{self.rel}/{path.relative_to(place).as_posix()}" if self.rel != "." else
                      path.relative_to(place).as_posix() for path in found if path.is_file())


def _local_path(value: str) -> str | None:
    """The path a source value names (a ``file:`` URL's path, ``~`` expanded), or None for a remote URL."""
    if _URL.match(value):
        parsed = urllib.parse.urlsplit(value)
        if parsed.scheme.lower() != "file":
            return None
        return urllib.parse.unquote(parsed.path)
    return os.path.expanduser(value)


def _places(root: Path, by: str, number: int, option: str, value: str) -> list[str]:
    """The places of the project a source option on ``by``'s line ``number`` names (relative to the project): the
    path relative to ``by``'s folder (uv's reading, and pip's for find-links) and relative to the project (pip's
    when that one does not exist, and for an index), each that exists. Refused when one is outside the project, or
    none exists."""
    long = _SOURCE_NAMES[option]
    where, shown = f"{by}:{number}", redact_text(f"{long} {value}")
    relative = f"name a folder of the project relative to {by} (e.g. `{long} vendor`)"
    if _ENV.search(value):
        raise _refuse(where, shown, "names its place through an environment variable (each machine may read "
                      "another)", f"{relative}, then: {tips.LOCK}", _WHY_SOURCES)
    path = _local_path(value)
    if path is None:
        return []  # a remote index or page: the resolver's, as a machine's own sources are
    if posixpath.isabs(path) or os.path.isabs(path):
        candidates = [Path(path)]
    else:
        candidates = [root / posixpath.dirname(by) / path, root / path]
    found: list[str] = []
    for candidate in candidates:
        if not candidate.exists():
            continue
        try:
            rel = candidate.resolve().relative_to(root.resolve()).as_posix()
        except ValueError:
            raise _refuse(where, shown, "names a folder outside the project (what it holds is no input of the lock)",
                          f"copy what the lock needs into the project (e.g. a vendor folder beside {by}) and "
                          f"{relative}; then: {tips.LOCK}", _WHY_SOURCES) from None
        if rel == "." and option != "-f":  # an index is read at any depth: .git, the envs, the runs would be input
            raise _refuse(where, shown, "names the project's own folder as a package index (every file of the project "
                          "would be an input of the lock, the envs and runs included)",
                          f"keep the index in a folder of its own (e.g. requirements/index) and {relative}; then: "
                          f"{tips.LOCK}", _WHY_SOURCES)
        if rel not in found:
            found.append(rel)
    if not found:
        raise _refuse(where, shown, "names a local place that does not exist",
                      f"create it, or remove that line from {by}; then: {tips.LOCK}", _WHY_SOURCES)
    return found


@dataclass(frozen=True)
class Inputs:
    """The input files of a lock as read once: each file's bytes (the declared ones first, then each one they name by
    ``-r``/``-c`` in the order first named), the named ones, and the local package sources all of them name."""

    files: tuple[tuple[str, bytes], ...]
    named: list[Named]
    linked: list[Linked]


def read_inputs(root: Path, declared: Sequence[str]) -> Inputs:
    """Each input file read once: followed by its ``-r``/``-c`` (:func:`_target`), searched for ``${NAME}``
    (:func:`_expanded`) and for the local package sources it names (:func:`_places`). Raises ConfigError, naming the
    file and line, for what the project cannot hold to."""
    seen = {posixpath.normpath(rel) for rel in declared}
    files: list[tuple[str, bytes]] = []
    named: list[Named] = []
    sources: dict[str, Linked] = {}
    queue = deque(declared)
    while queue:
        by = queue.popleft()
        data = (root / by).read_bytes()
        files.append((by, data))
        text = data.decode("utf-8-sig", errors="replace")
        for number, option, value in options_in(text):
            if option not in _FILES:
                for rel in _places(root, by, number, option, value):
                    if rel not in sources or (option != "-f" and not sources[rel].deep):  # an index: any depth
                        sources[rel] = Linked(rel, by, number, _SOURCE_NAMES[option], option != "-f")
                continue
            rel = _target(root, by, number, option, value)
            if rel not in seen:
                seen.add(rel)
                named.append(Named(rel, by, number))
                queue.append(rel)
        _expanded(by, text)
        _machine_markers(by, text)
    return Inputs(tuple(files), named, list(sources.values()))
