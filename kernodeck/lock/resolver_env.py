"""What the resolver is handed besides the lock's inputs, and nothing more: a lock is decided by its fingerprinted
inputs alone (red-team pass 45, LOCK5 and LOCK7).

- The environment (:func:`resolver_environment`): the caller's, less every ``UV_*`` and ``PIP_*`` variable outside an
  allow-list by class (where packages come from, the network and its credentials, caches, Python downloads). uv's
  ``UV_OVERRIDE``, ``UV_CONSTRAINT``, ``UV_RESOLUTION``, ``UV_PRERELEASE``, ``UV_TORCH_BACKEND``, pip's ``PIP_PRE``,
  ``PIP_ONLY_BINARY``, pip-tools' ``PIP_TOOLS_RESOLVER`` ... change the lock and no lock records them: they never
  reach it. pip-compile reads pip's configuration too, so it is handed that configuration's allow-listed settings as
  ``PIP_*`` variables and no file (``PIP_CONFIG_FILE`` is the null device): a pip.conf's ``pre = true`` is dropped
  as ``PIP_PRE`` is, while its index, find-links and certificates reach pip-compile as before.
- pip-tools' own configuration (:func:`refuse_pip_tools_config`): pip-compile runs with ``--no-config``, and a project
  that has a ``.pip-tools.toml`` or a ``[tool.pip-tools]`` table is refused: their options belong in the ``.in``
  files, whose digest the lock records. (uv runs with ``UV_NO_CONFIG``.)
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path

from kernodeck import tips
from kernodeck._proc import clean_env, log
from kernodeck.errors import ConfigError
from kernodeck.project.config import Project
from kernodeck.sources import pip_config
from kernodeck.sources.installer_config import SOURCE_VARS

# pip settings pip-compile is handed (from pip's files and PIP_* variables, the last value of each winning as in pip):
# where packages come from, the network and its credentials, the cache, and pip's chatter. Anything else pip's
# `install` takes (pre, only-binary, no-binary, prefer-binary, upgrade-strategy, use-feature ...) is not.
PIP_KEPT = frozenset({
    "index-url", "extra-index-url", "find-links", "no-index", "trusted-host",  # sources
    "cert", "client-cert", "proxy", "timeout", "default-timeout", "retries", "resume-retries",  # network
    "keyring-provider",  # credentials
    "cache-dir", "no-cache-dir", "disable-pip-version-check", "no-input", "no-color", "progress-bar",  # cache, output
})
# The caller's UV_* variables uv is handed. Its sources are not among them: uv_lock_environment sets them from this
# machine's pip and uv sources (the caller's UV_INDEX ... included), as it sets UV_NO_CONFIG and the index strategy.
UV_KEPT = frozenset({
    "UV_CACHE_DIR", "UV_NO_CACHE",  # cache
    "UV_OFFLINE", "UV_HTTP_TIMEOUT", "UV_REQUEST_TIMEOUT", "UV_HTTP_RETRIES", "UV_CONCURRENT_DOWNLOADS",
    "UV_CONCURRENT_BUILDS", "UV_NATIVE_TLS", "UV_SYSTEM_CERTS", "UV_INSECURE_HOST",  # network (uv 0.13: system-certs)
    "UV_KEYRING_PROVIDER", "UV_CREDENTIALS_DIR",  # credentials (`uv auth login` keeps them in the latter)
    "UV_PYTHON_INSTALL_DIR", "UV_PYTHON_CACHE_DIR", "UV_PYTHON_DOWNLOADS", "UV_PYTHON_INSTALL_MIRROR",
    "UV_PYPY_INSTALL_MIRROR", "UV_PYTHON_DOWNLOADS_JSON_URL",  # where uv finds a Python to run builds with
    "UV_NO_PROGRESS",
})
_UV_CREDENTIAL = re.compile(r"^UV_INDEX_[A-Z0-9_]+_(USERNAME|PASSWORD)$")
PIP_TOOLS_KEPT = frozenset({"PIP_TOOLS_CACHE_DIR"})
# Variables that name this machine's sources: read by Kernodeck and handed on in another form, so not "dropped".
_READ_AS_SOURCES = frozenset({*SOURCE_VARS, "PIP_NO_INDEX", "UV_NO_INDEX", "PIP_CONFIG_FILE"})


def pip_variable(key: str) -> str:
    """The ``PIP_*`` variable pip reads for a setting (``find-links`` -> ``PIP_FIND_LINKS``)."""
    return "PIP_" + key.upper().replace("-", "_")


def kept(name: str) -> bool:
    """Whether the caller's variable ``name`` reaches a resolver (every variable outside ``UV_*``/``PIP_*`` does)."""
    if not name.startswith(("UV_", "PIP_")):
        return True
    return name in UV_KEPT or name in PIP_TOOLS_KEPT or bool(_UV_CREDENTIAL.match(name))


def resolver_environment(resolver: str, extra: dict[str, str]) -> dict[str, str]:
    """The environment ``resolver`` runs in: the caller's allow-listed (:func:`kept`), pip's allow-listed settings for
    pip-tools (no configuration file), then ``extra`` (uv's sources). One log line names what is left out."""
    caller = clean_env()
    env = {name: value for name, value in caller.items() if kept(name)}
    settings: dict[str, str] = {}
    if resolver == "pip-tools":
        settings = {key: value for key, value in pip_config() if not key.startswith("tools-")}
        env.update({pip_variable(key): value for key, value in settings.items() if key in PIP_KEPT})
        env["PIP_CONFIG_FILE"] = os.devnull
    env.update(extra)
    own = "PIP_" if resolver == "pip-tools" else "UV_"  # pip reads no UV_* variable, uv no PIP_* one
    passed = {*_READ_AS_SOURCES, *(pip_variable(key) for key in PIP_KEPT)} if own == "PIP_" else _READ_AS_SOURCES
    left = [name for name in caller if name.startswith(own) and not kept(name) and name not in passed]
    left += [f"pip's {key}" for key in settings if key not in PIP_KEPT and pip_variable(key) not in caller]
    if left:
        log(f"kernodeck: not handed to {resolver} (no lock records them; say it in the .in files): "
            f"{', '.join(sorted(left))}")
    return env


def pip_tools_configs(project: Project) -> list[str]:
    """The pip-tools configurations in the project's folder (where the resolver runs) and its inputs' folders."""
    found: list[str] = []
    folders = dict.fromkeys([project.root, *((project.root / rel).parent for rel in project.requirements)])
    for folder in folders:
        rel = "" if folder == project.root else f"{folder.relative_to(project.root)}/"
        if (folder / ".pip-tools.toml").is_file():
            found.append(f"{rel}.pip-tools.toml")
        if _has_pip_tools_table(folder / "pyproject.toml"):
            found.append(f"{rel}pyproject.toml [tool.pip-tools]")
    return found


def _has_pip_tools_table(path: Path) -> bool:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False
    tool = data.get("tool")
    return isinstance(tool, dict) and "pip-tools" in tool


def refuse_pip_tools_config(project: Project) -> None:
    """Refuse a lock of a project that has a pip-tools configuration: pip-compile would take its options
    (``constraint``, ``pre``, ``upgrade-package`` ...) as defaults, and no lock input records them."""
    found = pip_tools_configs(project)
    if found:
        raise ConfigError(
            f"{found[0]} holds pip-compile options; a lock is decided by its inputs alone, and Kernodeck runs "
            "pip-compile with --no-config (uv reads no such file either)",
            tip="move these options into the .in files (e.g. `-c pins.txt`, `--pre`), where the lock's digest covers "
                f"them, and remove {_what(found[0])}; then: {tips.LOCK}",
        )


def _what(found: str) -> str:
    path, _, table = found.partition(" ")
    return f"the {table} table from {path}" if table else path
