"""kernodeck.sources.installer_config and .redaction: pip's and uv's configuration read once per process, and not at
all when the caller hands its Secrets over (issue 20: one verify re-read pip's configuration 3 times per dossier
file)."""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from kernodeck.sources import SecretInText, check_written, config_bytes, redact_text, redaction, scrub_text, secrets
from kernodeck.sources import installer_config as sources_config

# An audit hook cannot be removed: it counts only while a test asks it to, and only the files it names.
_WATCHED: dict[str, int] = {}


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if event == "open" and _WATCHED and isinstance(args[0], (str, os.PathLike)):
        path = os.fspath(args[0])
        if path in _WATCHED:
            _WATCHED[path] += 1


sys.addaudithook(_hook)


@contextmanager
def counting(*paths: Path) -> Iterator[Counter[str]]:
    """How often each of ``paths`` is opened (by anything in this process) while the body runs."""
    _WATCHED.clear()
    _WATCHED.update({str(p): 0 for p in paths})
    counts: Counter[str] = Counter()
    try:
        yield counts
    finally:
        counts.update({Path(p).name: n for p, n in _WATCHED.items()})
        _WATCHED.clear()


PIP_TOKEN = "AbCdEfGhIjKlMnOpQrSt"
UV_TOKEN = "uvT0ken5ecret77"
PUBLIC = ["https://download.pytorch.org/whl/cpu"]


@pytest.fixture
def configured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A pip.conf (PIP_CONFIG_FILE), a uv.toml (UV_CONFIG_FILE) and a project whose pyproject has [tool.uv], each
    naming a secret source; the current folder is the project. The files are older than the run, as a machine's
    configuration is (a file changed within the last instant is read again each time: see config_bytes)."""
    for var in [v for v in os.environ if v.startswith(("PIP_", "UV_", "KERNODECK_INDEX_"))]:
        monkeypatch.delenv(var)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    files = {
        "pip": tmp_path / "pip.conf",
        "uv": tmp_path / "uv.toml",
        "pyproject": tmp_path / "proj" / "pyproject.toml",
    }
    files["pip"].write_text(f"[global]\nextra-index-url = https://mirror.example/{PIP_TOKEN}/simple\n")
    files["uv"].write_text(f'index-url = "https://uv.example/{UV_TOKEN}/simple"\n')
    files["pyproject"].parent.mkdir()
    files["pyproject"].write_text('[project]\nname = "x"\n[tool.uv]\nfind-links = ["/srv/kd-wheels-here"]\n')
    monkeypatch.setenv("PIP_CONFIG_FILE", str(files["pip"]))
    monkeypatch.setenv("UV_CONFIG_FILE", str(files["uv"]))
    monkeypatch.chdir(files["pyproject"].parent)
    time.sleep(0.15)
    return files


def _write_files(count: int, given: bool = False) -> None:
    """What writing ``count`` dossier files does: each scrubbed, redacted for the log, checked before it is written."""
    found = secrets(PUBLIC) if given else None
    for number in range(count):
        text = f"file {number}: torch from {PUBLIC[0]}/torch-2.13.0.whl\n"
        text = scrub_text(text, PUBLIC, secrets=found)
        redact_text(text, PUBLIC, secrets=found)
        check_written(text, f"file{number}.txt", PUBLIC, secrets=found)


def test_configuration_read_once_for_twenty_files(configured: dict[str, Path]) -> None:
    with counting(*configured.values()) as opened:
        _write_files(20)
    assert opened == Counter({"pip.conf": 1, "uv.toml": 1, "pyproject.toml": 1}), opened
    # the files read were the ones that matter: each one's source is still refused in a written text
    for token in (PIP_TOKEN, UV_TOKEN, "/srv/kd-wheels-here"):
        with pytest.raises(SecretInText):
            check_written(f"see {token}\n", "x.txt", PUBLIC)


def test_given_secrets_read_nothing(configured: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    found = secrets(PUBLIC)

    def refuse(*_: object) -> object:
        raise AssertionError("the configuration was read although the caller handed its Secrets over")

    monkeypatch.setattr(redaction, "_read", refuse)
    with counting(*configured.values()) as opened:
        _write_files(20, given=True)
        with pytest.raises(SecretInText):
            check_written(f"https://mirror.example/{PIP_TOKEN}/simple", "x.txt", secrets=found)
        assert PIP_TOKEN not in redact_text(f"https://mirror.example/{PIP_TOKEN}/simple", secrets=found)
    assert sum(opened.values()) == 0, opened
    with pytest.raises(AssertionError, match="was read"):  # negative control: without secrets= it reads
        check_written("plain text\n", "x.txt", PUBLIC)


def test_changed_configuration_is_read_again(configured: dict[str, Path]) -> None:
    """Negative control of the cache: a config changed between two writes is seen by the second (same size too)."""
    _write_files(1)
    other = PIP_TOKEN[::-1]  # the same length: only the content and the times differ
    configured["pip"].write_text(configured["pip"].read_text().replace(PIP_TOKEN, other))
    with counting(configured["pip"]) as opened, pytest.raises(SecretInText):
        check_written(f"see https://mirror.example/{other}/simple\n", "x.txt", PUBLIC)
    assert opened["pip.conf"] >= 1
    check_written(f"see https://mirror.example/{PIP_TOKEN}/simple\n", "x.txt", PUBLIC)  # the old value is gone


def test_reads_counted_without_the_cache(configured: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """Negative control of the count: with the cache emptied before each file (every file read afresh, as before
    issue 20), the same twenty files open each configuration file twenty times or more."""
    real = config_bytes

    def uncached(path: Path) -> bytes | None:
        sources_config._CONTENT.clear()
        return real(path)

    monkeypatch.setattr(sources_config, "config_bytes", uncached)
    monkeypatch.setattr(redaction, "config_bytes", uncached)
    monkeypatch.setattr(redaction, "_CACHE", {})
    for number in range(20):
        redaction._CACHE.clear()
        with counting(*configured.values()) as opened:
            _write_files(1)
        assert opened["pip.conf"] >= 1 and opened["pyproject.toml"] >= 1, (number, opened)


def test_config_bytes_follows_the_file(tmp_path: Path) -> None:
    path = tmp_path / "pip.conf"
    assert config_bytes(path) is None  # absent: nothing opened, nothing kept
    path.write_text("[global]\n")
    os.utime(path, ns=(time.time_ns() - 10**9, time.time_ns() - 10**9))
    time.sleep(0.15)
    with counting(path) as opened:
        assert config_bytes(path) == b"[global]\n"
        assert config_bytes(path) == b"[global]\n"
    assert opened["pip.conf"] == 1
    path.write_text("[install]\n")
    with counting(path) as opened:
        assert config_bytes(path) == b"[install]\n"  # changed: read again, whatever its size
    assert opened["pip.conf"] == 1
    path.unlink()
    assert config_bytes(path) is None
