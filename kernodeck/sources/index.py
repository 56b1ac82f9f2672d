"""A variant's index, or the mirror that replaces it (``KERNODECK_INDEX_<VARIANT>``), and how an installer is
pointed at it and at this machine's own sources. The one place a variant's index is derived: :func:`index_of`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Protocol

from kernodeck.sources.installer_config import MIRROR_PREFIX, Source
from kernodeck.sources.urls import PYPI, host_of, is_local, public_url


def mirror_var(variant: str) -> str:
    """``cpu`` -> ``KERNODECK_INDEX_CPU``: the variable that replaces a variant's declared index."""
    return MIRROR_PREFIX + re.sub(r"[^A-Za-z0-9]", "_", variant).upper()


@dataclass(frozen=True)
class VariantIndex:
    """Where a variant's torch layer comes from: its declared public index, or the mirror that replaces it."""

    variant: str
    declared: str
    mirror: str | None = None

    @property
    def url(self) -> str:
        return self.mirror or self.declared

    @property
    def var(self) -> str:
        return mirror_var(self.variant)

    @property
    def is_pypi(self) -> bool:
        """The index asked (the mirror when one is set) is PyPI's."""
        return self.url.rstrip("/") == PYPI

    @property
    def declared_url(self) -> str:
        """The declared index without its trailing slash: what a lock, a report or a recorded command may name."""
        return self.declared.rstrip("/")

    @property
    def declared_is_pypi(self) -> bool:
        """The declared index is PyPI's (no index option is needed where no mirror replaces it)."""
        return self.declared_url == PYPI

    def pip_option(self) -> str:
        """The declared index as a written pip command names it (``--extra-index-url URL``; "" for PyPI)."""
        return "" if self.declared_is_pypi else f"--extra-index-url {public_url(self.declared_url)}"

    def describe(self) -> str:
        """How a message, a report or procedure.md may name it (a mirror by its variable only, never URL or host)."""
        if self.mirror:
            return f"the {self.variant} variant's index, replaced by the mirror in {self.var}"
        return f"the {self.variant} variant's index {public_url(self.declared)}"

    def note(self, wheelhouse: bool) -> str:
        """What a rebuild's report says of this index: declared, a mirror (named by its variable), or a wheelhouse."""
        if wheelhouse:
            return "none (installed from a wheelhouse)"
        return f"mirror ({self.var} replaced {public_url(self.declared)})" if self.mirror else \
            f"declared ({public_url(self.declared)})"

    def shown(self) -> str:
        """The index as a recorded command shows it: the declared URL, or the variable holding the mirror."""
        return f"${self.var}" if self.mirror else public_url(self.declared)

    def expandable(self, command: str) -> str:
        """A recorded (shlex-quoted) command with the mirror's variable left for the shell to expand."""
        return command.replace(f"'${self.var}'", f'"${self.var}"') if self.mirror else command


class Variant(Protocol):
    """What a project's variant holds of its index (kernodeck.project.platforms.Variant)."""

    @property
    def name(self) -> str: ...

    @property
    def index(self) -> str: ...


def variant_index(variant: str, declared: str) -> VariantIndex:
    """The variant's declared index, replaced by the mirror in ``KERNODECK_INDEX_<VARIANT>`` when that is set."""
    mirror = os.environ.get(mirror_var(variant), "").strip() or None
    return VariantIndex(variant, declared, mirror)


def index_of(variant: Variant) -> VariantIndex:
    """A project variant's index (or its mirror): ``index_of(plat.variant)``."""
    return variant_index(variant.name, variant.index)


def index_args(index: VariantIndex) -> list[str]:
    """The installer option that names the variant's index (pip and uv spell it alike); none for PyPI."""
    return [] if index.is_pypi else ["--extra-index-url", index.url]


def uv_environment(sources: list[Source], extra_index: bool = False) -> dict[str, str]:
    """Hand the machine's pip sources to uv through its own variables (nothing lands in an argv or a file), each in
    uv's syntax: ``UV_INDEX`` space-separated, ``UV_FIND_LINKS`` comma-separated."""
    env: dict[str, str] = {}
    index = [s.for_uv for s in sources if s.kind == "index-url"]  # name=url: uv applies the name's credentials
    extra = [s.for_uv for s in sources if s.kind == "extra-index-url"]
    links = [s.location for s in sources if s.kind == "find-links"]
    if index:
        env["UV_DEFAULT_INDEX"] = index[-1]
    if extra:
        env["UV_INDEX"] = " ".join(extra)
    if links:
        env["UV_FIND_LINKS"] = ",".join(links)
    if extra_index or len(index) + len(extra) + len(links) > 0:
        # Several indexes may serve the same name (a local mirror beside PyPI, PyTorch's index serving numpy): take
        # the best match, as pip does. The lock's hashes decide which file is accepted, whatever index serves it.
        env["UV_INDEX_STRATEGY"] = "unsafe-best-match"
    return env


def indexes_asked(sources: list[Source], index: VariantIndex | None, no_index: bool = False,
                  unreachable: str = "") -> str:
    """The sources an install asked, as an error may name them (hosts, never paths or credentials)."""
    asked: list[str] = []
    replaced = [s for s in sources if s.kind == "index-url"]
    if no_index:
        asked.append("no index (no-index)")
    elif replaced:
        asked.append(f"this machine's index-url ({host_of(replaced[-1].location)})"
                     if not is_local(replaced[-1].location) else "this machine's index-url (a local path)")
    else:
        asked.append(PYPI)
    if index is not None and not index.is_pypi:
        asked.append(f"{index.describe()} (not asked: unreachable from here, {unreachable})" if unreachable
                     else index.describe())
    for source in sources:
        if source.kind != "index-url":
            asked.append(f"this machine's {source.redacted()}")
    return "; ".join(dict.fromkeys(asked))

