"""The container files export writes, read back as their own readers read them (kernodeck/dossier/copylines.py says
which readers, from their sources): a Dockerfile ``COPY`` (BuildKit: JSON array, then the shell-word expansion, then
a source is a ``filepath.Match`` pattern), ``Dockerfile.dockerignore`` (moby/patternmatcher: the lines' preprocessing
and its translation to a regular expression, the oldest one: only ``.`` and ``$`` escaped for you), Apptainer's
``%files`` (its definition parser's word splitter, then the source through a real ``/bin/sh`` as Apptainer runs it)."""

from __future__ import annotations

import json
import posixpath
import re
import subprocess
import tempfile

# Apptainer's pkg/build/types/parser/deffile.go fileSplitter, as it is (Go's and Python's syntax agree here).
_FILE_SPLITTER = re.compile(r"""([^\s"']*{{\s*\w+\s*}}*[^\s{}"']*)+|([^\s"']+|"([^"]*)"|'([^']*))""")
_GO_SPACE = " \t\n\v\f\r\x85\xa0"


def shell_word(word: str) -> str:
    """BuildKit's shell-word expansion of one word without variables: ``\\`` takes the next character as it is,
    ``'...'`` as it is, ``"..."`` with ``\\`` escaping ``\\ " $``; a bare ``$`` would expand a variable: refused."""
    out, i = [], 0
    while i < len(word):
        ch = word[i]
        if ch == "\\":
            out.append(word[i + 1] if i + 1 < len(word) else "")
            i += 2
        elif ch == "'":
            end = word.index("'", i + 1)
            out.append(word[i + 1:end])
            i = end + 1
        elif ch == '"':
            i += 1
            while word[i] != '"':
                if word[i] == "\\" and word[i + 1] in '\\"$':
                    i += 1
                elif word[i] == "$":
                    raise ValueError(f"a variable in {word!r}")
                out.append(word[i])
                i += 1
            i += 1
        elif ch == "$":
            raise ValueError(f"a variable in {word!r}")
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def glob_literal(pattern: str) -> str:
    """The one name a ``filepath.Match`` pattern matches, or ValueError when it matches more (a ``*``, a ``?``, a
    class of more than one character)."""
    out, i = [], 0
    while i < len(pattern):
        ch = pattern[i]
        if ch in "*?":
            raise ValueError(f"{pattern!r}: a wildcard")
        if ch == "\\":
            out.append(pattern[i + 1])
            i += 2
        elif ch == "[":
            j, members = i + 1, []
            while pattern[j] != "]" or not members:
                if pattern[j] == "\\":
                    j += 1
                members.append(pattern[j])
                j += 1
            if len(members) != 1 or members[0] in "^":
                raise ValueError(f"{pattern!r}: a class of {members}")
            out.append(members[0])
            i = j + 1
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def copy_lines(dockerfile: str) -> list[tuple[str, str]]:
    """(source, destination) of each ``COPY``, as BuildKit reads them: the source the one path it names."""
    found = []
    for line in dockerfile.splitlines():
        if line.startswith("COPY "):
            args = json.loads(line.removeprefix("COPY "))  # a shell-form line is no JSON: it fails here
            assert isinstance(args, list) and len(args) == 2 and all(isinstance(a, str) for a in args), line
            found.append((glob_literal(shell_word(args[0])), shell_word(args[1])))
    return found


def shell_form_copy(line: str) -> list[str]:
    """The words of a shell-form ``COPY`` (the parser splits its arguments at white space)."""
    return line.removeprefix("COPY ").split()


def _regex(pattern: str) -> re.Pattern[str]:
    """moby/patternmatcher's translation of a pattern (fileutils of Docker 20.10: ``.`` and ``$`` escaped, ``\\``
    takes the next character, every other character passed as it is, ``[...]`` a class)."""
    out, i = "^", 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "*":
            if pattern[i + 1:i + 2] == "*":
                i += 1 + (pattern[i + 2:i + 3] == "/")
                out += ".*" if i + 1 >= len(pattern) else "(.*/)?"
            else:
                out += "[^/]*"
        elif ch == "?":
            out += "[^/]"
        elif ch in ".$":
            out += "\\" + ch
        elif ch == "\\":
            out += "\\" + pattern[i + 1] if i + 1 < len(pattern) else "\\\\"
            i += 1
        else:
            out += ch
        i += 1
    return re.compile(out + "$")


def dockerignore_rules(text: str) -> list[tuple[bool, re.Pattern[str]]]:
    """(exception, regex) of each line, as ignorefile.ReadAll prepares it: a ``#`` line skipped, white space trimmed
    (after ``!`` too), the pattern cleaned, a leading ``/`` dropped."""
    rules = []
    for raw in text.splitlines():
        if raw.startswith("#"):
            continue
        line = raw.strip(_GO_SPACE)
        if not line:
            continue
        exception = line.startswith("!")
        pattern = line[1:].strip(_GO_SPACE) if exception else line
        pattern = posixpath.normpath(pattern).lstrip("/") or "."
        rules.append((exception, _regex(pattern)))
    return rules


def dockerignore_sends(text: str, path: str) -> bool:
    """Whether the build context holds ``path``: the last rule that matches it or a folder above it decides."""
    parents = [posixpath.join(*path.split("/")[:n]) for n in range(1, path.count("/") + 2)]
    excluded = False
    for exception, regex in dockerignore_rules(text):
        if any(regex.match(p) for p in parents):
            excluded = not exception
    return not excluded


def apptainer_files(definition: str) -> list[tuple[str, str]]:
    """(source, destination) of each ``%files`` line as Apptainer reads it: the words its parser splits, each
    trimmed of its double quotes, the source expanded by ``/bin/sh`` as its copy does (in an empty folder, so no
    glob matches: the source must name its path itself)."""
    body = definition.split("%files\n", 1)[1].split("\n%", 1)[0]
    found = []
    with tempfile.TemporaryDirectory() as empty:
        for raw in body.strip().split("\n"):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            words = [m.group(0) for m in _FILE_SPLITTER.finditer(line)]
            src, dst = (w.strip().strip('"') for w in words[:2])
            script = "for n in %s ; do\n\tprintf \"$n\\0\"\ndone\n" % src.replace(" ", "\\ ")  # noqa: UP031 (as Go's)
            out = subprocess.run(["/bin/sh", "-c", script], cwd=empty, capture_output=True, text=True, check=True)
            expanded = [p for p in out.stdout.split("\0") if p]
            assert len(expanded) == 1, (line, expanded)
            found.append((expanded[0], dst))
    return found
