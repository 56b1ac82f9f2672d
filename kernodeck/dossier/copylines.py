"""Each path export writes, in the form the file's own parser reads back as that path, or refused.

A declared path may hold a space, a glob character, a ``#``, a quote or a backslash (``files = ["my data/labels
#1.txt"]``); written bare, a shell-form ``COPY`` splits it on the space, a ``.dockerignore`` line reads it as a pattern
and Apptainer's ``%files`` as two words. Each writer below follows what its reader does, read from the readers' sources
(docs/containers.md, "Paths with special characters"):

- Dockerfile ``COPY``: the JSON-array form (BuildKit's parser: a JSON array of strings); each string is then expanded
  as a shell word (``$VAR``, quotes, ``\\`` escapes: the same expansion as the shell form), and a source is then a
  ``filepath.Match`` pattern, where the Dockerfile reference escapes ``[`` as ``[[]``.
- ``Dockerfile.dockerignore``: one pattern a line, trimmed of white space (after the ``!`` too), compiled by
  moby/patternmatcher to a regular expression in which ``\\`` escapes the next character (Linux) and ``[...]`` passes
  through as a class; which other regex characters are escaped for you differs between versions, so each is escaped
  here.
- Apptainer ``%files``: a line splits into words at white space outside ``"..."`` (no escapes; a quote cannot be
  inside one), then the source is expanded by ``/bin/sh`` in ``for n in SRC; do printf "$n\\0"; done`` with its spaces
  escaped first (so its other shell characters are escaped here, and a ``%`` or ``\\``, which printf reads, has no
  form), the destination used as it is.

A path with no form in a file (a line break or other control character anywhere; for Apptainer a ``"``, ``%``,
``\\`` or a ``{{ name }}`` its templating would replace) is refused with one ERROR line naming it and a TIP.
"""

from __future__ import annotations

import json
import re

from kernodeck import tips
from kernodeck.errors import ConfigError

# Characters no shell, glob or pattern reads specially: a path of only these is written as it is.
_PLAIN = re.compile(r"[A-Za-z0-9_./+,:@=-]+")
# What Apptainer replaces in a definition before parsing it (its build arguments).
_TEMPLATE = re.compile(r"\{\{\s*\w+\s*\}\}")
# Characters moby/patternmatcher's regular expression would read and that not every version escapes itself (all
# escape "." and "$"; left bare, an ordinary name is written as it is and BuildKit keeps its walk by prefix).
_PATTERN = set("\\*?[]^+(){}|")


def _control(path: str) -> str | None:
    bad = next((ch for ch in path if ord(ch) < 0x20 or ord(ch) == 0x7F), None)
    return None if bad is None else f"a control character ({bad!r})"


def refused(path: str, why: str, fmt: str) -> ConfigError:
    """The one ERROR (the path named as Python writes it, so a line break stays on the line) and its TIP."""
    return ConfigError(
        f"export: the path {path!r} has no form in the {fmt} file: {why}; rename it (a declared one in "
        "pyproject.toml too) and export again",
        tip=tips.nox("export", "--format", "apptainer" if fmt == "Apptainer" else "dockerfile", "--out",
                     "runs/export"),
    )


def _shell_word(text: str) -> str:
    """``text`` as BuildKit's shell-word expansion reads it back unchanged: its escape, quotes and ``$`` escaped."""
    return re.sub(r"""([\\$'"])""", r"\\\1", text)


def _glob_literal(path: str) -> str:
    """``path`` as a ``filepath.Match`` pattern matching only itself: ``[[]`` as the Dockerfile reference writes it."""
    return re.sub(r"([*?\[\\])", lambda m: "[\\\\]" if m.group(1) == "\\" else f"[{m.group(1)}]", path)


def docker_copy(src: str, dest: str) -> str:
    """``COPY ["SRC", "DEST"]``: the JSON-array form, each string escaped for the expansion BuildKit applies to it."""
    for path in (src, dest):
        if (why := _control(path)) is not None:
            raise refused(path, why, "Dockerfile")
    return "COPY " + json.dumps([_shell_word(_glob_literal(src)), _shell_word(dest)], ensure_ascii=False)


def dockerignore_allow(path: str) -> str:
    """``!PATH`` as a pattern matching only ``path``: each character its regular expression reads escaped with
    ``\\``, white space at either end (which the reader trims) as a one-character class."""
    if (why := _control(path)) is not None:
        raise refused(path, why, "Dockerfile.dockerignore")
    chars = [f"\\{ch}" if ch in _PATTERN else ch for ch in path]
    for i in (0, len(chars) - 1):
        if path[i].isspace():
            chars[i] = f"[{path[i]}]"
    return "!" + "".join(chars)


def _apptainer_check(path: str) -> None:
    why = _control(path)
    if why is None and (bad := sorted(set(path) & set('"%\\'))):
        why = (f"{' '.join(bad)}: Apptainer's %files reads a path between double quotes, with no escape, and expands "
               "its source with printf, which reads % and \\")
    if why is None and _TEMPLATE.search(path):
        why = "a {{ name }} Apptainer replaces with a build argument"
    if why is not None:
        raise refused(path, why, "Apptainer")


def _quoted(word: str) -> str:
    return word if _PLAIN.fullmatch(word) else f'"{word}"'


def apptainer_files(src: str, dest: str) -> str:
    """``SRC DEST`` of a ``%files`` line (without its indent): the source's shell characters escaped but its spaces
    (Apptainer escapes those itself), ``./`` before one starting with ``-`` (cp would read an option), and each word
    between double quotes unless it is plain."""
    _apptainer_check(src)
    _apptainer_check(dest)
    word = re.sub(r"([^A-Za-z0-9_./+,:@=\- \x80-\U0010ffff])", r"\\\1", src)
    word = f"./{word}" if word.startswith("-") else word
    return f"{_quoted(word)} {_quoted(dest)}"

