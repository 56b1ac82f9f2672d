"""Which installer a rebuild runs, and the environment each of its commands runs under: the caller's sources reach
the install, never where or what it installs, and nothing of the caller's pip setup reaches the commands that read
the finished env.

pip takes any option from a ``PIP_<OPTION>`` variable and from its config files. For ``pip check`` and ``pip freeze``
(and the removal of a seeded pip), which read the env and need no source, that is every variable and every file:
they run with none (:func:`reading_env`; red-team pass 59, PIP1: ``PIP_PYTHON`` sent the check of a broken env to
another interpreter's, where it passed, and ``PIP_EXCLUDE`` dropped a pin from the build's record). A pip install
keeps the caller's sources (config files, ``PIP_INDEX_URL``, ``PIP_FIND_LINKS``...) but not the variables that say
where it installs (:func:`installing_env`); what a config file could still say is caught after the install, when the
env is observed to be the lock's (:mod:`kernodeck.env.rebuild`).
"""

from __future__ import annotations

import os

from kernodeck import tips
from kernodeck._proc import clean_env, uv_available
from kernodeck.errors import ConfigError
from kernodeck.sources import SOURCE_VARS

# pip's options that send an install elsewhere than the env's own site-packages, or leave a pin out of it; uv's that
# change what its install writes there (the bytecode it compiles, how files are placed, whether hashes are checked,
# which interpreter, what its venv is seeded with, which folder its relative paths are read from): Kernodeck decides
# those on the command line, and uv refuses a variable that contradicts a flag (red-team pass 60, COMPILE1:
# UV_COMPILE_BYTECODE, which uv's docs put in Dockerfiles; pass 64, UVSEED1 and WDIR1).
_WHERE = ("PIP_PYTHON", "PIP_TARGET", "PIP_PREFIX", "PIP_ROOT", "PIP_USER", "PIP_SRC", "PIP_EXCLUDE", "PIP_PLATFORM",
          "PIP_IMPLEMENTATION", "PIP_ABI", "PIP_PYTHON_VERSION", "PIP_DRY_RUN", "PIP_REPORT",
          "UV_COMPILE_BYTECODE", "UV_LINK_MODE", "UV_NO_VERIFY_HASHES", "UV_REINSTALL", "UV_REINSTALL_PACKAGE",
          "UV_NO_INSTALLER_METADATA", "UV_PYTHON", "UV_SYSTEM_PYTHON", "UV_BREAK_SYSTEM_PACKAGES", "UV_TORCH_BACKEND",
          "UV_PYTHON_DOWNLOADS", "UV_CONFIG_FILE", "UV_VENV_SEED", "UV_VENV_CLEAR", "UV_WORKING_DIR", "UV_PROJECT",
          "UV_PROJECT_ENVIRONMENT")


def offline_env() -> dict[str, str]:
    """The installers' environment for a wheelhouse install: no config file, no index, no network."""
    env = {k: v for k, v in installing_env().items() if k not in SOURCE_VARS}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1", UV_NO_CONFIG="1", UV_OFFLINE="1", UV_NO_INDEX="1")
    return env


def installing_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """An install's environment (pip's, uv's, and uv's venv): the caller's, without the installers' variables that say
    where (or what of the lock, or how) it installs; ``extra`` (uv's sources, read from pip's) added. uv reads no
    config file (``UV_NO_CONFIG``, as the lock's resolution does): its sources are pip's, handed over as variables,
    and a uv.toml's ``python-platform`` installed another platform's wheel (red-team pass 61, UVCONF1)."""
    return {**{k: v for k, v in clean_env().items() if k not in _WHERE}, "UV_NO_CONFIG": "1", **(extra or {})}


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
