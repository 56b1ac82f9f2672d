"""Kernodeck lockfiles: a pip-compatible, hash-pinned requirements file with a header that records how it was made.

The header is comments, so peers (``pip install --require-hashes -r``, ``pip-sync``, ``uv pip sync``) read the file
unchanged. Parsing here is strict: a broken or truncated file is named with its line, never half-trusted. The header's
last line, ``# body-digest: sha256:…``, is the digest of everything after the header (the pins): a body edited by
hand no longer matches it, and the lock is refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from kernodeck import tips
from kernodeck._fs import sha256_text
from kernodeck.errors import LockfileError

FORMAT_VERSION = "1"
_HASH = re.compile(r"^--hash=sha256:([0-9a-f]{64})$")
BODY_DIGEST = "body-digest"
# The header's line naming a file an index serves at a URL that names no file: ``# file-name: <sha256> <file name>``
# (written by the PEP 751 twin's writer, kernodeck/lock/twinform.py; sealed with the pins).
FILE_NAME = "file-name"
_SOURCE_OPTIONS = ("-i", "--index-url", "--extra-index-url", "-f", "--find-links", "--trusted-host")


@dataclass(frozen=True)
class Pin:
    name: str  # canonical name
    version: str
    marker: str
    hashes: tuple[str, ...]
    line: int

    @property
    def spec(self) -> str:
        return f"{self.name}=={self.version}"


@dataclass
class Lockfile:
    path: Path
    header: dict[str, list[str]] = field(default_factory=dict)
    pins: list[Pin] = field(default_factory=list)
    body: str = ""

    def first(self, key: str, default: str = "") -> str:
        values = self.header.get(key)
        return values[0] if values else default

    def versions(self) -> dict[str, str]:
        return {p.name: p.version for p in self.pins}

    def hashed(self) -> dict[str, tuple[str, set[str]]]:
        """name -> (version, sha256 hashes): what the PEP 751 twin must hold the same."""
        return {p.name: (p.version, set(p.hashes)) for p in self.pins}

    @property
    def inputs(self) -> dict[str, str]:
        """The recorded inputs as name -> fingerprint (the drift check compares these)."""
        out: dict[str, str] = {}
        for entry in self.header.get("input", []):
            name, _, value = entry.rpartition(" ")
            out[name] = value
        return out


def _logical_lines(text: str, path: Path) -> list[tuple[int, str]]:
    """Join backslash continuations; keep the number of each logical line's first physical line."""
    out: list[tuple[int, str]] = []
    buf: list[str] = []
    start = 0
    lines = text.splitlines()
    for number, raw in enumerate(lines, start=1):
        line = raw.split(" #", 1)[0].rstrip() if not raw.lstrip().startswith("#") else ""
        if line != raw.rstrip() and raw.rstrip().endswith("\\") and not raw.lstrip().startswith("#"):
            # pip joins the next line into this one first, then strips the comment with it: it would not read the
            # pin on the next line that this reader reads (red-team pass 42, LOCK1)
            raise LockfileError(str(path), number, "a comment before a line continuation (pip reads the next line as "
                                "part of the comment)")
        if not buf:
            start = number
        if line.endswith("\\"):
            buf.append(line[:-1].strip())
            if number == len(lines):
                raise LockfileError(str(path), number, "file ends inside a continued line (truncated?)")
            continue
        buf.append(line.strip())
        joined = " ".join(part for part in buf if part)
        if joined:
            out.append((start, joined))
        buf = []
    return out


def parse_text(text: str, path: Path) -> Lockfile:
    lock = Lockfile(path=path)
    body_lines: list[str] = []
    in_header = True
    packages_line: int | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        if in_header and raw.startswith("# ") and ": " in raw:
            key, _, value = raw[2:].partition(": ")
            if re.fullmatch(r"[a-z][a-z0-9-]*", key):
                lock.header.setdefault(key, []).append(value.strip())
                if key == "packages":
                    packages_line = number
                continue
        if (in_header and raw.strip() in ("", "#")) or raw.startswith("# Kernodeck"):
            continue
        in_header = False
        body_lines.append(raw)
    lock.body = "\n".join(body_lines) + "\n"
    logical = _logical_lines(text, path)
    seen: set[str] = set()
    for number, line in logical:
        tokens = line.split()
        if tokens[0] in _SOURCE_OPTIONS or tokens[0].split("=")[0] in _SOURCE_OPTIONS:
            raise LockfileError(str(path), number, f"holds a package source ({tokens[0]}); sources never go in a lock")
        if tokens[0].startswith("-"):
            raise LockfileError(str(path), number, f"unexpected option {tokens[0]!r}")
        req_tokens = [t for t in tokens if not t.startswith("--hash")]
        hash_tokens = [t for t in tokens if t.startswith("--hash")]
        # what pip and uv would read otherwise than this reader (red-team pass 43): the requirement ends at the first
        # option, anything after the options dropped (LOCK2: a marker there); ${NAME} expanded from the installer's
        # environment (LOCK3). Kernodeck's writer writes neither.
        if hash_tokens and any(not t.startswith("--hash") for t in tokens[tokens.index(hash_tokens[0]):]):
            raise LockfileError(str(path), number, "text after the --hash options (pip and uv drop it: a marker there "
                                "would be read by this reader only)")
        if "${" in line:
            raise LockfileError(str(path), number, "an environment variable reference ${…} (pip and uv expand it "
                                "from the installer's environment)")
        try:
            req = Requirement(" ".join(req_tokens))
        except InvalidRequirement as exc:
            raise LockfileError(str(path), number, f"not a valid requirement: {exc}") from None
        specs = list(req.specifier)
        if len(specs) != 1 or specs[0].operator != "==" or "*" in specs[0].version:
            got = req.specifier or "no version"
            raise LockfileError(str(path), number, f"{req.name} is not pinned with == (got {got})")
        if not hash_tokens:
            raise LockfileError(str(path), number, f"{req.name}=={specs[0].version} has no --hash")
        hashes: list[str] = []
        for token in hash_tokens:
            match = _HASH.match(token)
            if not match:
                raise LockfileError(str(path), number, f"{req.name}: malformed hash {token!r}")
            hashes.append(match.group(1))
        name = canonicalize_name(req.name)
        if name in seen:
            raise LockfileError(str(path), number, f"{name} is pinned twice")
        seen.add(name)
        lock.pins.append(Pin(name, specs[0].version, str(req.marker or ""), tuple(hashes), number))
    if lock.header:
        declared = lock.first("packages")
        if declared and declared.isdigit() and int(declared) != len(lock.pins):
            raise LockfileError(
                str(path), packages_line,
                f"header declares {declared} packages but {len(lock.pins)} were found (truncated or edited by hand?)",
            )
    return lock


def split(text: str) -> tuple[list[str], str]:
    """(header lines, body): the header runs to its closing ``#`` line (as :func:`render` writes it)."""
    lines = text.splitlines(keepends=True)
    for number, line in enumerate(lines):
        if line.rstrip("\r\n") == "#":
            return [entry.rstrip("\r\n") for entry in lines[: number + 1]], "".join(lines[number + 1 :])
        if not line.startswith("# "):
            break
    return [], text


def with_header(text: str, key: str, values: list[str]) -> str:
    """``text`` with its header's ``# KEY: …`` lines replaced by one line per value (before the body digest, which
    :func:`seal` refreshes); the rest byte-identical. Only Kernodeck's writers call this."""
    header, body = split(text)
    if not header:
        return text
    kept = [line for line in header[:-1] if not line.startswith(f"# {key}: ")]
    at = next((i for i, line in enumerate(kept) if line.startswith(f"# {BODY_DIGEST}: ")), len(kept))
    lines = [*kept[:at], *(f"# {key}: {value}" for value in values), *kept[at:], header[-1]]
    return seal("\n".join(lines) + "\n" + body)


def body_digest(body: str, names: list[str] | tuple[str, ...] = ()) -> str:
    """The digest the seal records: of the body (the pins), and of the header's :data:`FILE_NAME` lines where it has
    any (the names the lock binds to files at URLs that name none are the lock's word as its pins are: red-team pass
    40, TWIN5); a lock without them is sealed as before."""
    return "sha256:" + sha256_text("".join(f"{line}\n" for line in names) + body)


def _names(header: list[str]) -> list[str]:
    """The header's :data:`FILE_NAME` lines, as written."""
    return [line for line in header if line.startswith(f"# {FILE_NAME}: ")]


def seal(text: str) -> str:
    """Record (or refresh) the digest of the lock's body as the header's last line; the rest stays byte-identical.

    Only Kernodeck's own writers call this (``nox -s lock``, ``--upgrade-package``, ``--widen-python``).
    """
    header, body = split(text)
    if not header:
        return text
    kept = [line for line in header[:-1] if not line.startswith(f"# {BODY_DIGEST}: ")]
    return "\n".join([*kept, f"# {BODY_DIGEST}: {body_digest(body, _names(header))}", header[-1]]) + "\n" + body


def check_seal(text: str, lock: Lockfile) -> None:
    """The body is the one the header's digest was recorded for; else the lock was edited by hand."""
    recorded = lock.first(BODY_DIGEST)
    number = next((n for n, line in enumerate(text.splitlines(), 1) if line.startswith(f"# {BODY_DIGEST}: ")), None)
    if not recorded:
        raise LockfileError(
            str(lock.path), None,
            f"the header records no {BODY_DIGEST} (made by an older Kernodeck, or its header edited by hand)",
        )
    header, body = split(text)
    actual = body_digest(body, _names(header))
    if recorded != actual:
        raise LockfileError(
            str(lock.path), number,
            f"the pins (or the file names it records) no longer match the header's {BODY_DIGEST} ({recorded[:19]}…, "
            f"the body is {actual[:19]}…): "
            f"edited by hand?{_against_twin(lock)} Locks change only through `{tips.LOCK}` (or its --upgrade-package"
            " / --widen-python)",
        )


def _against_twin(lock: Lockfile) -> str:
    """What changed, named against the PEP 751 twin written with the lock (a merge or a bad copy shows here)."""
    twin = lock.path.with_name(f"pylock.{lock.path.stem}.toml")
    if not twin.is_file():
        return ""
    from kernodeck.lock.twin import disagreements  # here: a lock read without a broken digest never reads its twin

    found = disagreements(twin, lock.hashed(), lock.path.name)
    if not found:
        return f" Its pins and hashes still match {twin.name} (was the twin edited too?)."
    return f" Against {twin.name}: {'; '.join(found)}."


def read(path: Path, *, require_header: bool = True) -> Lockfile:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise LockfileError(str(path), None, "not UTF-8 text") from None
    except OSError as exc:  # a missing file, a folder: one ERROR + TIP, never a traceback
        raise LockfileError(str(path), None, f"cannot be read as a lockfile ({exc.strerror or exc})") from None
    return parse_checked(text, path, require_header=require_header)


def parse_checked(text: str, path: Path, *, require_header: bool = True) -> Lockfile:
    """Parse, and (by default) require the Kernodeck header and at least one pin: what ``read`` accepts."""
    lock = parse_text(text, path)
    if require_header:
        if lock.first("kernodeck-lock-version") != FORMAT_VERSION:
            raise LockfileError(str(path), 1, f"missing or unknown kernodeck header (not made by `{tips.LOCK}`?)")
        if not lock.pins:
            raise LockfileError(str(path), None, "no pinned packages")
        check_seal(text, lock)
    return lock


def render(header: list[tuple[str, str]], body: str) -> str:
    lines = [f"# Kernodeck lockfile: generated by `{tips.LOCK}`; do not edit by hand (see README, 'Locks')."]
    lines += [f"# {key}: {value}" for key, value in header]
    lines.append("#")
    return seal("\n".join(lines) + "\n" + body.lstrip("\n"))
