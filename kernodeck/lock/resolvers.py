"""The two resolvers a lock is made with: their pinned versions, their command lines, uv's sources, their output.

pip-tools resolves for the machine it runs on; uv for any declared platform (``--python-platform``). Neither is
handed a source in its argv: pip-tools reads this machine's pip configuration, uv gets it through its environment
(:func:`uv_lock_environment`), so the recorded command holds none.
"""

from __future__ import annotations

import re
import sys

from kernodeck import tips
from kernodeck._proc import show, uv_available
from kernodeck.errors import CommandFailed, ConfigError
from kernodeck.lock.inputs import RESOLVERS, resolver_version
from kernodeck.project.config import Project
from kernodeck.project.platforms import UV_PLATFORM_ENV, UV_PLATFORMS, Platform
from kernodeck.sources import PYPI, Source

_TOOLS_TIP = f"{tips.LOCK}  (installs the pinned tools)"
NO_CONFIG = "--no-config"


def check_tool(project: Project, resolver: str) -> None:
    """The resolver installed here is the version pyproject pins (a lock must come from the pinned tool)."""
    import importlib.metadata  # here: only a lock reads installed versions, a lock check does not

    dist = RESOLVERS[resolver]
    pinned = resolver_version(project, resolver)
    try:
        installed = importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        raise ConfigError(f"{dist} is not installed here", tip=_TOOLS_TIP) from None
    if installed != pinned:
        raise ConfigError(
            f"{dist} {installed} is installed but pyproject.toml pins {pinned}; a lock must come from the pinned tool",
            tip=_TOOLS_TIP,
        )


def uv_bin() -> str:
    found = uv_available()
    if found is None:
        raise ConfigError("uv is not installed here", tip=tips.nox("lock", "--resolver", "uv") + "  (installs it)")
    return found


def command(
    resolver: str, plat: Platform, inputs: list[str], output: str, extra_index: str | None, upgrade: bool,
    as_of: str | None = None, exempt: tuple[str, ...] = (),
) -> list[str]:
    """The resolver's argv: ``inputs`` resolved into ``output`` (both relative to the project), hashes generated."""
    if resolver == "pip-tools":
        cmd = [sys.executable, "-m", "piptools", "compile", "--generate-hashes", "--allow-unsafe", "--strip-extras"]
        cmd += ["--no-emit-index-url", "--no-emit-find-links", "--no-emit-trusted-host", "--no-header", "--quiet"]
        cmd.append(NO_CONFIG)  # no .pip-tools.toml or [tool.pip-tools] read (resolver_env: LOCK7)
        if extra_index:
            cmd += ["--extra-index-url", extra_index]
        if as_of:
            cmd += ["--uploaded-prior-to", as_of]  # pip-tools >= 7.6 with pip >= 26.0; local files are not dated
    else:
        # uv gets every source through its environment (uv_lock_environment), so none is in an argv or a header.
        cmd = [uv_bin(), "pip", "compile", "--generate-hashes", "--no-header", "--quiet"]
        cmd += ["--python-version", plat.python, "--python-platform", UV_PLATFORMS[plat.os_arch]]
        if as_of:
            cmd += ["--exclude-newer", as_of]
            # uv drops a file with no upload time (download.pytorch.org publishes none); a name the torch layer pins
            # with == has one version whatever the date, so it is exempt.
            cmd += [arg for name in exempt for arg in ("--exclude-newer-package", f"{name}=false")]
    if upgrade:
        cmd.append("--upgrade")
    return [*cmd, "--output-file", output, *inputs]


def uv_lock_environment(plat: Platform, declared: str | None, sources: list[Source], no_index: bool) -> dict[str, str]:
    """uv's sources for a lock: the default index (PyPI, or the machine's replacement for it) first, then the
    variant's declared index, then the machine's extra indexes; find-links beside them.

    With several indexes uv takes a version's files (and so its hashes) from the first index that has that version:
    public sources go first so that a partial local mirror never narrows the lock's hashes (a mirror holding only
    Linux wheels in front would even make a macOS lock impossible). ``unsafe-best-match`` lets a version that only
    a later source holds (``torch 2.13.0+cpu``) still be found, as pip does. No user uv.toml is read: the sources
    are exactly this machine's pip sources, as for pip-tools.
    """
    env = {"UV_NO_CONFIG": "1", "UV_INDEX_STRATEGY": "unsafe-best-match", **UV_PLATFORM_ENV.get(plat.os_arch, {})}
    links = [s.location for s in sources if s.kind == "find-links"]
    if links:
        env["UV_FIND_LINKS"] = ",".join(links)  # uv's syntax: commas (pip's is whitespace)
    if no_index:
        env["UV_NO_INDEX"] = "1"
        return env
    replaced = [s.location for s in sources if s.kind == "index-url"]
    default = replaced[-1] if replaced else PYPI
    ordered = [default]
    if declared and declared.rstrip("/") != default.rstrip("/"):
        ordered.append(declared)
    ordered += [s.location for s in sources if s.kind == "extra-index-url" and s.location not in ordered]
    # an index keeps the name the caller gave it (UV_INDEX=corp=URL), by which uv applies its
    # UV_INDEX_CORP_USERNAME/_PASSWORD (red-team pass 46, LOCKF2): the URL alone is what a lock compares and records
    for_uv = {s.location: s.for_uv for s in sources if s.kind != "find-links"}
    env["UV_DEFAULT_INDEX"] = for_uv.get(default, default)
    env["UV_INDEX"] = " ".join(for_uv.get(location, location) for location in ordered)
    return env


def public_command(cmd: list[str], output: str, final: str, env: dict[str, str] | None = None) -> str:
    """The command as recorded in the header: no interpreter or temp path, no machine source."""
    shown = ["pip-compile", *cmd[4:]] if cmd[1:3] == ["-m", "piptools"] else ["uv", *cmd[1:]]
    # --no-config is not recorded: a project with a pip-tools configuration is refused (resolver_env), so the
    # recorded command locks the same without it, and the locks made before it keep their bytes.
    shown = [c for c in shown if c != NO_CONFIG]
    prefix = [f"{k}={v}" for k, v in sorted((env or {}).items()) if k in ("MACOSX_DEPLOYMENT_TARGET",)]
    return show([*prefix, *[final if c == output else c for c in shown]])


_FRAME = re.compile(r"^(Traceback \(most recent call last\):|  File \"|    |During handling of|The above exception)")
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Impossible|Conflicted|NotFound)\b.*:")


def without_tracebacks(output: str, keep: int = 30) -> str:
    """The resolver's own messages without the Python tracebacks some resolvers print for a plain "not found"."""
    lines = [line for line in output.rstrip().splitlines()
             if line.strip() and not _FRAME.match(line) and not _EXCEPTION_LINE.match(line)]
    return "\n".join(lines[-keep:])


def reason(exc: CommandFailed) -> str:
    """The resolver's first error, with uv's "cause:" line after it (its first line alone names no package)."""
    lines = [line.strip() for line in exc.output.splitlines() if line.strip()]
    for number, line in enumerate(lines):
        if line == exc.first_error and number + 1 < len(lines):
            following = lines[number + 1]
            if following.startswith(("cause:", "╰─▶")):
                return f"{line} {following.removeprefix('╰─▶').strip()}"
    return exc.first_error


def mentions(output: str, names: set[str]) -> bool:
    """Whether the resolver's output names one of ``names`` (canonical names; ``_`` read as ``-``)."""
    low = output.lower().replace("_", "-")
    return any(name in low for name in names)


# What each resolver says when no file of a package fits (a date, a specifier or a source leaves none): pip/pip-tools
# name the requirement, uv the package.
_NO_CANDIDATE = (
    re.compile(r"Could not find a version that (?:satisfies the requirement|matches) ([A-Za-z0-9][A-Za-z0-9._-]*)"),
    re.compile(r"No matching distribution found for ([A-Za-z0-9][A-Za-z0-9._-]*)"),
    re.compile(r"there (?:are|is) no versions? of ([A-Za-z0-9][A-Za-z0-9._-]*)"),
    re.compile(r"Because only ([A-Za-z0-9][A-Za-z0-9._-]*?)[<>=!~ ]"),
    re.compile(r"Because ([A-Za-z0-9][A-Za-z0-9._-]*) was not found in the package registry"),
)


def no_candidate(output: str) -> str | None:
    """The package the resolver found no fitting file of (canonical name), or None when it says no such thing."""
    for pattern in _NO_CANDIDATE:
        match = pattern.search(output)
        if match:
            return match.group(1).lower().replace("_", "-").replace(".", "-")
    return None
