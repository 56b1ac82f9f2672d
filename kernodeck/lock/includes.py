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
"""

from __future__ import annotations

import os
import posixpath
import re
import shlex
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kernodeck import tips
from kernodeck.errors import ConfigError
from kernodeck.sources import redact_text

# optparse takes a long option by any unambiguous prefix: pip's requirement-file options include --require-hashes
# and --config-settings, so "--requirem" and "--cons" are the shortest prefixes that name these two.
_LONG = {"--requirement": ("-r", len("--requirem")), "--constraint": ("-c", len("--cons"))}
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
    """(``-r`` or ``-c``, the value when the token holds it) for a token that opens one of the two options."""
    if token.startswith("--"):
        name, eq, value = token.partition("=")
        for long, (short, shortest) in _LONG.items():
            if len(name) >= shortest and long.startswith(name):
                return short, value if eq else None
        return None
    if token[:2] in ("-r", "-c"):
        return token[:2], token[2:] or None
    return None


def named_in(text: str) -> list[tuple[int, str, str]]:
    """Each ``-r``/``-c`` of an option line (one whose first token is an option, as pip's ``break_args_options``
    decides): (line number, the option as ``-r`` or ``-c``, the path or URL it names as written)."""
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


def _read(path: Path) -> str:
    return path.read_bytes().decode("utf-8-sig", errors="replace")


def _refuse(where: str, shown: str, problem: str, tip: str) -> ConfigError:
    return ConfigError(f"{where}: `{shown}` {problem}; every file an input names by -r/-c is an input of the lock, "
                       "fingerprinted with it", tip=tip)


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


def included(root: Path, declared: Sequence[str]) -> list[Named]:
    """Every file the ``declared`` inputs (paths relative to ``root``) name by ``-r``/``-c``, nested ones too, each
    once, in the order they are first named (the declared files themselves left out; a cycle ends where it closes).
    Raises ConfigError, naming the file and line, for one the project cannot hold to (:func:`_target`)."""
    seen = {posixpath.normpath(rel) for rel in declared}
    found: list[Named] = []
    queue = deque(declared)
    while queue:
        by = queue.popleft()
        for number, option, value in named_in(_read(root / by)):
            rel = _target(root, by, number, option, value)
            if rel not in seen:
                seen.add(rel)
                found.append(Named(rel, by, number))
                queue.append(rel)
    return found
