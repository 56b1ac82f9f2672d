"""Platform identity: (python tag, OS/arch tag, accelerator variant), e.g. ``cp311-linux_x86_64-cpu``."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from packaging import tags

from kernodeck import tips
from kernodeck.errors import ConfigError, VariantChoice
from kernodeck.project.config import Project, Variant

_PLATFORM_ID = re.compile(r"^cp(?P<py>\d)(?P<minor>\d+)-(?P<os_arch>[a-z0-9_]+?)-(?P<variant>[A-Za-z0-9.]+)$")

# uv's names for the platforms it can resolve for from elsewhere (uv pip compile --python-platform).
UV_PLATFORMS = {
    "linux_x86_64": "x86_64-manylinux_2_28",
    "linux_aarch64": "aarch64-manylinux_2_28",
    "macosx_arm64": "aarch64-apple-darwin",
    "macosx_x86_64": "x86_64-apple-darwin",
    "win_amd64": "x86_64-pc-windows-msvc",
}
# uv's macOS targets default to macOS 13; torch >= 2.9 ships arm64 wheels for macOS 14 and later only, and the
# declared macOS runner (macos-14) is macOS 14: resolve for what the runner is.
UV_PLATFORM_ENV = {
    "macosx_arm64": {"MACOSX_DEPLOYMENT_TARGET": "14.0"},
    "macosx_x86_64": {"MACOSX_DEPLOYMENT_TARGET": "14.0"},
}


@dataclass(frozen=True)
class Platform:
    python: str  # "3.11"
    os_arch: str  # "linux_x86_64"
    variant: Variant

    @property
    def python_tag(self) -> str:
        return "cp" + self.python.replace(".", "")

    @property
    def id(self) -> str:
        return f"{self.python_tag}-{self.os_arch}-{self.variant.name}"

    @property
    def lock_name(self) -> str:
        return f"{self.id}.txt"

    @property
    def pylock_name(self) -> str:
        return f"pylock.{self.id}.toml"


def os_arch_from_tag(tag: str) -> str:
    """Reduce a wheel platform tag to the OS/arch part: manylinux_2_36_x86_64 -> linux_x86_64."""
    if match := re.match(r"^(?:many|musl)linux_\d+_\d+_(.+)$", tag):
        return f"linux_{match.group(1)}"
    if match := re.match(r"^manylinux\d+_(.+)$", tag):
        return f"linux_{match.group(1)}"
    if match := re.match(r"^macosx_\d+_\d+_(.+)$", tag):
        return f"macosx_{match.group(1)}"
    return tag


def current_os_arch() -> str:
    """This interpreter's OS/arch, from the most specific platform tag packaging reports."""
    return os_arch_from_tag(next(iter(tags.platform_tags())))


def current_python() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def parse_platform_id(project: Project, platform_id: str) -> Platform:
    match = _PLATFORM_ID.match(platform_id)
    if not match:
        raise ConfigError(
            f"bad platform id {platform_id!r}: expected <python>-<os_arch>-<variant>, e.g. cp311-linux_x86_64-cpu",
            tip=f"{tips.nox('matrix')}  (lists the declared platforms)",
        )
    python = f"{match.group('py')}.{match.group('minor')}"
    return Platform(python, match.group("os_arch"), project.variant(match.group("variant")))


def resolve_platform(project: Project, platform_id: str | None = None, variant: str | None = None) -> Platform:
    """The platform to work on: named explicitly, or this machine's with the named or default variant.

    This machine's platform is the DECLARED one for its OS/arch and variant, with the Python that declaration names,
    whatever Python runs Kernodeck (nox on 3.12 still verifies cp311; rebuild finds 3.11 on the machine, see
    :mod:`kernodeck.env.pythons`). Several declared Pythons: the running one if declared, else the first declared.
    Nothing declared for this OS/arch and variant: the running Python (an undeclared platform, locked from here).
    """
    if platform_id:
        return parse_platform_id(project, platform_id)
    os_arch = current_os_arch()
    name = variant or os.environ.get("KERNODECK_VARIANT") or project.default_variant.get(os_arch)
    if not name:
        raise VariantChoice(f"no default variant for {os_arch}; known variants: {', '.join(sorted(project.variants))}",
                            list(project.variants))
    return Platform(declared_python(project, os_arch, name), os_arch, project.variant(name))


def for_command(project: Project, command: str, argv: Sequence[str], platform_id: str | None,
                variant: str | None) -> Platform:
    """:func:`resolve_platform` for the session being run (``command``, its ``argv`` after the command name): a
    variant refused gives as TIP that same command with a declared variant in place of the one given."""
    try:
        return resolve_platform(project, platform_id, variant)
    except VariantChoice as exc:
        known = exc.known[0]
        args, given = list(argv), False
        for at, arg in enumerate(args):
            for option in ("--platform", "--variant"):
                if arg == option and at + 1 < len(args):
                    args[at + 1] = (args[at + 1].rsplit("-", 1)[0] + "-" + known) if option == "--platform" else known
                    given = True
                elif arg.startswith(option + "="):
                    value = arg.split("=", 1)[1]
                    args[at] = f"{option}=" + ((value.rsplit("-", 1)[0] + "-" + known) if option == "--platform"
                                               else known)
                    given = True
        args += [] if given else ["--variant", known]
        again = (tips.nox(command, *args) if command in tips.SESSIONS | tips.OWN_SESSIONS
                 else " ".join(["python -m kernodeck", command, *args]))
        exc.tip = f"{again}   (declared variants: {', '.join(exc.known)})"
        raise


def declared_python(project: Project, os_arch: str, variant: str) -> str:
    """The Python a declared platform names for ``os_arch`` and ``variant`` (see :func:`resolve_platform`).

    Among several, those with a committed lock come first (cp312 declared ``lock-on-runner`` beside a locked cp311:
    nox on Ubuntu 24.04's 3.12 still verifies the locked cp311); among those, the running Python, else the first.
    """
    declared = [p.python for p in project.platforms if p.os_arch == os_arch and p.variant == variant]
    running = current_python()
    if not declared:
        return running
    kind = project.variant(variant)
    locked = [py for py in declared if (project.lockfiles / Platform(py, os_arch, kind).lock_name).is_file()]
    candidates = locked or declared
    return running if running in candidates else candidates[0]
