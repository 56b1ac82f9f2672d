"""Which installer a rebuild runs, and the environment each of its commands runs under: the caller's sources reach
the install, never where or what it installs, and nothing of the caller's pip setup reaches the commands that read
the finished env.

pip takes any option from a ``PIP_<OPTION>`` variable and from its config files. For ``pip check`` and ``pip freeze``
(and the removal of a seeded pip), which read the env and need no source, that is every variable and every file:
they run with none (:func:`reading_env`; red-team pass 59, PIP1: ``PIP_PYTHON`` sent the check of a broken env to
another interpreter's, where it passed, and ``PIP_EXCLUDE`` dropped a pin from the build's record). A pip install
keeps the caller's sources (config files, ``PIP_INDEX_URL``, ``PIP_FIND_LINKS``...), the network's and the cache's,
and no other installer variable (:func:`installing_env`: an allow-list); what a config file could still say is
caught after the install, when the env is observed to be the lock's (:mod:`kernodeck.env.rebuild`).
"""

from __future__ import annotations

import os
import re

from kernodeck import tips
from kernodeck._proc import clean_env, uv_available
from kernodeck.errors import ConfigError
from kernodeck.sources import SOURCE_VARS

# The installers' variables an install keeps: where files come from (indexes, find-links, their trust, certificates,
# credentials), the network and the cache, and pip's config file (its sources: what else it could say is caught
# after the install, and pip intersects a constraint's hashes with the lock's). Every other PIP_* and UV_* variable is
# dropped: an allow-list, since each one a deny-list missed said where, what or how the install puts files, which
# Kernodeck decides on the command line (red-team passes 59-64: PIP_PYTHON, UV_COMPILE_BYTECODE, UV_VENV_SEED,
# UV_WORKING_DIR; pass 67, UVOVR1: UV_OVERRIDE replaced a pin's line, hashes included, and another file was installed).
_KEPT = frozenset((
    "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX", "PIP_TRUSTED_HOST", "PIP_CERT",
    "PIP_CLIENT_CERT", "PIP_PROXY", "PIP_RETRIES", "PIP_TIMEOUT", "PIP_DEFAULT_TIMEOUT", "PIP_CACHE_DIR",
    "PIP_NO_CACHE_DIR", "PIP_KEYRING_PROVIDER", "PIP_CONFIG_FILE", "PIP_DISABLE_PIP_VERSION_CHECK", "PIP_NO_INPUT",
    "PIP_PROGRESS_BAR", "PIP_NO_COLOR",
    "UV_INDEX_URL", "UV_EXTRA_INDEX_URL", "UV_INDEX", "UV_DEFAULT_INDEX", "UV_FIND_LINKS", "UV_NO_INDEX",
    "UV_INDEX_STRATEGY", "UV_CACHE_DIR", "UV_NO_CACHE", "UV_OFFLINE", "UV_NATIVE_TLS", "UV_INSECURE_HOST",
    "UV_KEYRING_PROVIDER", "UV_HTTP_TIMEOUT", "UV_HTTP_RETRIES", "UV_REQUEST_TIMEOUT", "UV_CONCURRENT_DOWNLOADS",
    "UV_CONCURRENT_INSTALLS", "UV_NO_PROGRESS", "UV_NO_CONFIG",
))
_CREDENTIAL = re.compile(r"UV_INDEX_[A-Z0-9_]+_(USERNAME|PASSWORD)")  # a named index's credentials


def kept(name: str) -> bool:
    """Whether an install keeps the caller's variable ``name`` (any that is not pip's or uv's is kept)."""
    return not name.startswith(("PIP_", "UV_")) or name in _KEPT or bool(_CREDENTIAL.fullmatch(name))


def offline_env() -> dict[str, str]:
    """The installers' environment for a wheelhouse install: no config file, no index, no network."""
    env = {k: v for k, v in installing_env().items() if k not in SOURCE_VARS}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1", UV_NO_CONFIG="1", UV_OFFLINE="1", UV_NO_INDEX="1")
    return env


def installing_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """An install's environment (pip's, uv's, and uv's venv): the caller's, of the installers' variables only those it
    :func:`kept` (sources, network, cache); ``extra`` (uv's sources, read from pip's) added. uv reads no
    config file (``UV_NO_CONFIG``, as the lock's resolution does): its sources are pip's, handed over as variables,
    and a uv.toml's ``python-platform`` installed another platform's wheel (red-team pass 61, UVCONF1)."""
    return {**{k: v for k, v in clean_env().items() if kept(k)}, "UV_NO_CONFIG": "1", **(extra or {})}


def reading_env() -> dict[str, str]:
    """``pip check``'s and ``pip freeze``'s environment: no ``PIP_*`` variable, no pip config file."""
    env = {k: v for k, v in clean_env().items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1")
    return env


def choose_installer(requested: str | None) -> str:
    if requested in (None, "auto"):
        return "uv" if uv_available() else "pip"
    if requested not in ("uv", "pip"):
        raise ConfigError(f"unknown installer {requested!r}; use uv or pip",
                          tip=tips.nox("rebuild", "--installer", "pip"))
    if requested == "uv" and not uv_available():
        raise ConfigError("uv is not installed here", tip=tips.nox("rebuild", "--installer", "pip"))
    return requested
