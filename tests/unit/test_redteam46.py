"""Red-team pass 46 (notes: /work/notes/redteam46.md): passes 44 and 45's fixes attacked by class (the lock's inputs
and the resolver's environment; the settings step is in tests/e2e/test_redteam46_sessions.py).

LOCK8 (a folder an input names by ``--find-links`` decides the lock and is no input of it; FALSE PASS of
``lock-current``; lock/inputs.compute_inputs, lock/includes): pass 44's fix fingerprints every file an input names by
``-r``/``-c``, but an input may name a folder of the project by ``--find-links`` (``-f``) too, and both resolvers read
it (relative to the input's folder). A wheel added to that folder (``kdtiny-beta 3.0``) is picked by the resolver,
while every recorded input is as it was: ``check_lock`` says current. ``resolve-as-of`` does not help (local files
are not dated). Fix idea: fingerprint a project folder an input names by ``-f``/``--find-links`` (each file's name and
sha256, as the lock's "find-links <rel>" input), or refuse a find-links (or ``--index-url file:``) line that names a
place in the project, as a URL ``-r`` is refused. CONTROL: the input's own edit makes the lock stale.

LOCKF1-LOCKF3 (FALSE FAILURES the resolver's allow-list brings a private-index user of uv; lock/resolver_env.kept,
lock/resolvers.uv_lock_environment): measured with uv 0.13.9 (the pinned one) against a local index that asks for
basic auth.
- LOCKF2: the caller's ``UV_INDEX=corp=URL`` with ``UV_INDEX_CORP_USERNAME``/``_PASSWORD`` (uv's documented way to
  give a named index its credentials; the allow-list keeps these two variables on purpose) resolves in the caller's
  shell, but Kernodeck hands uv the index by its URL alone (sources.uv_index_url drops ``corp=``), so uv applies no
  credentials: 401, the lock fails.
- LOCKF3: ``UV_CREDENTIALS_DIR`` (where ``uv auth login`` keeps credentials) is dropped by the allow-list: a CI that
  logged in there gets 401.
- LOCKF1: ``UV_SYSTEM_CERTS`` (uv 0.13's name for loading the platform's certificate store, what ``--help`` shows; the
  allow-list keeps only the older ``UV_NATIVE_TLS``) is dropped: a corporate CA in the system store fails TLS.
Fix idea: keep the index's name in what uv is handed (``name=url`` in UV_INDEX/UV_DEFAULT_INDEX), and keep
``UV_CREDENTIALS_DIR`` and ``UV_SYSTEM_CERTS`` (credentials and TLS: they decide no pin). CONTROL: the same index with
its credentials in the URL's userinfo resolves through Kernodeck's environment.
"""

from __future__ import annotations

import base64
import hashlib
import http.server
import os
import re
import subprocess
import sys
import threading
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kernodeck.errors import LockFailed
from kernodeck.lock import compile as lock_compile
from kernodeck.lock import resolver_env, resolvers
from kernodeck.project.config import load_project
from kernodeck.project.platforms import resolve_platform
from kernodeck.sources.installer_config import machine_sources, pip_no_index
from tests.helpers.tinylock import (
    RESOLVERS,
    lock_current,
    lock_then_check,
    offline_tiny_wheels,
    pins,
    tiny_project,
    tiny_wheels,
    uv,
    write_wheel,
)

REQ = "requirements"


# --- LOCK8 -----------------------------------------------------------------------------------------------------------


@pytest.fixture
def offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return offline_tiny_wheels(tmp_path, monkeypatch)


VENDORED = "--find-links vendor\nkdtiny-alpha\n"  # vendor: requirements/vendor, relative to base.in


def _vendored(tmp_path: Path, resolver: str) -> Path:
    """The tiny project whose base.in names requirements/vendor by --find-links, locked while that folder holds no
    wheel (beta 2.0 from this machine's sources), then ``kdtiny-beta 3.0`` dropped into the folder."""
    root = tiny_project(tmp_path / "p", base=VENDORED)
    vendor = root / REQ / "vendor"
    vendor.mkdir()
    (vendor / "README.txt").write_text("wheels the project vendors\n", encoding="utf-8")
    target, changes = lock_then_check(root, resolver)
    assert pins(target)["kdtiny-beta"] == "2.0" and changes == []
    write_wheel(vendor, "kdtiny-beta", "3.0")
    return root


def _resolve(root: Path, resolver: str, wheels: Path) -> str:
    """The project's inputs resolved by hand as Kernodeck runs the resolver (this machine's sources: ``wheels``):
    beta's pin."""
    out = root / f"out-{len(list(root.glob('out-*.txt')))}.txt"
    inputs = [f"{REQ}/base.in", f"{REQ}/torch-cpu.in"]
    if resolver == "pip-tools":
        cmd = [sys.executable, "-m", "piptools", "compile", "--no-config"]
        env = dict(os.environ)
    else:
        cmd = [uv(), "pip", "compile"]
        env = {**os.environ, "UV_NO_CONFIG": "1", "UV_NO_INDEX": "1", "UV_FIND_LINKS": str(wheels)}
    subprocess.run([*cmd, "--quiet", "--no-header", "--output-file", str(out), *inputs], cwd=root, env=env,
                   check=True, capture_output=True, timeout=300)
    found = re.search(r"^kdtiny-beta==(\S+)", out.read_text(encoding="utf-8"), re.MULTILINE)
    assert found
    return found.group(1)


@pytest.mark.parametrize("resolver", RESOLVERS)
def test_lock8_premise_the_resolver_takes_the_wheel_dropped_into_the_named_folder(
        tmp_path: Path, offline: Path, resolver: str) -> None:
    root = _vendored(tmp_path, resolver)
    assert _resolve(root, resolver, offline) == "3.0"
    # Kernodeck's relock from scratch (`lock --upgrade`; a dated one is unseeded too) takes 3.0 as well, and stops
    # where it cannot place a file only the project's folder holds
    proj = load_project(root)
    with pytest.raises(LockFailed, match="kdtiny-beta"):
        lock_compile.compile_lock(proj, resolve_platform(proj), resolver=resolver, upgrade=True)


@pytest.mark.usefixtures("offline")
@pytest.mark.parametrize("resolver", RESOLVERS)
def test_lock8_a_wheel_dropped_into_a_folder_an_input_names_makes_the_lock_stale(tmp_path: Path, resolver: str) -> None:
    root = _vendored(tmp_path, resolver)
    assert lock_current(root) != []


@pytest.mark.usefixtures("offline")
def test_control1_the_inputs_own_edit_makes_the_lock_stale(tmp_path: Path) -> None:
    root = _vendored(tmp_path, "uv")
    (root / REQ / "base.in").write_text(VENDORED + "# vendored beta 3.0\n", encoding="utf-8")
    assert any("base.in" in change for change in lock_current(root))


# --- LOCKF1-LOCKF3 ---------------------------------------------------------------------------------------------------

USER, PASSWORD = "kd", "not-a-real-secret"


class _Index(http.server.BaseHTTPRequestHandler):
    """A simple index of the tiny wheels at /simple/ that asks for basic auth; /public/simple/ is open and empty."""

    wheels: Path

    def log_message(self, *args: Any) -> None:
        return

    def do_HEAD(self) -> None:
        self._answer(head=True)

    def do_GET(self) -> None:
        self._answer(head=False)

    def _answer(self, head: bool) -> None:
        parts = [p for p in self.path.split("?")[0].split("/") if p]
        if parts[:1] == ["public"]:
            self.send_response(404)
            self.end_headers()
            return
        token = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        if self.headers.get("Authorization") != token:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="corp"')
            self.end_headers()
            return
        if len(parts) == 2 and parts[0] == "simple":
            links = "".join(f'<a href="/files/{w.name}#sha256={hashlib.sha256(w.read_bytes()).hexdigest()}">'
                            f"{w.name}</a>" for w in sorted(self.wheels.glob(parts[1].replace("-", "_") + "-*.whl")))
            body, kind = f"<html><body>{links}</body></html>".encode(), "text/html"
        elif len(parts) == 2 and parts[0] == "files" and (self.wheels / parts[1]).is_file():
            body, kind = (self.wheels / parts[1]).read_bytes(), "application/octet-stream"
        else:
            self.send_response(404)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)


@pytest.fixture
def private_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A private index on 127.0.0.1 (basic auth) serving the tiny wheels, its URL; the caller's shell has no source
    (no pip file, no PIP_*/UV_* variable) and its own uv cache and data folder."""
    for name in list(os.environ):
        if name.startswith(("PIP_", "UV_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    handler = type("Index", (_Index,), {"wheels": tiny_wheels(tmp_path / "wheels")})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _uv_compile(folder: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    (folder / "req.in").write_text("kdtiny-alpha\n", encoding="utf-8")
    return subprocess.run([uv(), "pip", "compile", "--quiet", "--no-header", "req.in"], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def _callers(folder: Path) -> subprocess.CompletedProcess[str]:
    """uv run in the caller's own shell, as its docs tell a private-index user (no config file read)."""
    return _uv_compile(folder, {**os.environ, "UV_NO_CONFIG": "1"})


def _kernodecks(folder: Path) -> subprocess.CompletedProcess[str]:
    """uv run in the environment Kernodeck's lock hands it: this machine's sources as uv_lock_environment sets them,
    on the caller's environment less what resolver_env does not keep."""
    plat: Any = types.SimpleNamespace(os_arch="linux_x86_64")
    extra = resolvers.uv_lock_environment(plat, None, machine_sources(), pip_no_index())
    return _uv_compile(folder, resolver_env.resolver_environment("uv", extra))


def _named_index(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    monkeypatch.setenv("UV_DEFAULT_INDEX", f"{url}/public/simple")
    monkeypatch.setenv("UV_INDEX", f"corp={url}/simple")
    monkeypatch.setenv("UV_INDEX_CORP_USERNAME", USER)
    monkeypatch.setenv("UV_INDEX_CORP_PASSWORD", PASSWORD)


def test_lockf2_premise_the_named_indexs_credentials_reach_it_in_the_callers_shell(
        tmp_path: Path, private_index: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _named_index(monkeypatch, private_index)
    proc = _callers(tmp_path)
    assert proc.returncode == 0 and "kdtiny-beta==2.0" in proc.stdout, proc.stderr
    monkeypatch.delenv("UV_INDEX_CORP_PASSWORD")
    assert "401" in _callers(tmp_path).stderr  # the index does ask for them


def test_lockf2_the_named_indexs_credentials_reach_it_through_kernodeck(
        tmp_path: Path, private_index: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _named_index(monkeypatch, private_index)
    proc = _kernodecks(tmp_path)
    assert proc.returncode == 0, proc.stderr


def _logged_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    """``uv auth login`` into $UV_CREDENTIALS_DIR; the index named by URL alone."""
    monkeypatch.setenv("UV_CREDENTIALS_DIR", str(tmp_path / "credentials"))
    subprocess.run([uv(), "auth", "login", f"{url}/simple", "--username", USER, "--password", PASSWORD],
                   check=True, capture_output=True, timeout=60)
    monkeypatch.setenv("UV_DEFAULT_INDEX", f"{url}/simple")


def test_lockf3_premise_uv_takes_the_credentials_uv_auth_login_stored(
        tmp_path: Path, private_index: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _logged_in(tmp_path, monkeypatch, private_index)
    proc = _callers(tmp_path)
    assert proc.returncode == 0 and "kdtiny-beta==2.0" in proc.stdout, proc.stderr


def test_lockf3_the_stored_credentials_reach_the_index_through_kernodeck(
        tmp_path: Path, private_index: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _logged_in(tmp_path, monkeypatch, private_index)
    proc = _kernodecks(tmp_path)
    assert proc.returncode == 0, proc.stderr


def test_control2_credentials_in_the_urls_userinfo_reach_the_index_through_kernodeck(
        tmp_path: Path, private_index: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UV_DEFAULT_INDEX", private_index.replace("//", f"//{USER}:{PASSWORD}@", 1) + "/simple")
    proc = _kernodecks(tmp_path)
    assert proc.returncode == 0 and "kdtiny-beta==2.0" in proc.stdout, proc.stderr


def test_lockf1_premise_the_pinned_uv_reads_its_system_certificates_switch_as_uv_system_certs() -> None:
    shown = subprocess.run([uv(), "pip", "compile", "--help"], capture_output=True, text=True, timeout=60,
                           check=True).stdout
    assert "--system-certs" in shown and "UV_SYSTEM_CERTS" in shown


def test_lockf1_uv_system_certs_reaches_uv(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UV_SYSTEM_CERTS", "1")
    assert resolver_env.resolver_environment("uv", {}).get("UV_SYSTEM_CERTS") == "1"


def test_control3_the_older_name_uv_native_tls_reaches_uv(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UV_NATIVE_TLS", "1")
    assert resolver_env.resolver_environment("uv", {}).get("UV_NATIVE_TLS") == "1"


# --- COMP1 -----------------------------------------------------------------------------------------------------------
# COMP1 (a record a run never wrote, added to its signed folder, is compared as the run's; compare calls the dossier
# "as written"; dossier/delta.changed_since_written, dossier/read.load): pass 44's fix holds each file the marker lists
# to its sha256 and takes "a file added beside them" as no change, but compare reads system.json, settings.json and
# inventory.txt whenever they are there. A run that stopped before its system step wrote none of them; the same
# records copied in from another run are then compared as this run's, and nothing says NOT AS WRITTEN. Fix idea: a
# file compare reads (report/system/settings/inventory, the outputs) that the marker does not list is a change
# ("added since Kernodeck wrote the folder"), or is not read. CONTROL: the same record written by the run and then
# edited is named.

RECORDS = {"system.json": '{"torch_version": "2.13.0+cpu"}', "settings.json": '{"default_dtype": "torch.float32"}',
           "inventory.txt": "torch==2.13.0+cpu\n"}


def _stopped_early(path: Path, *written: str) -> Path:
    """A signed run folder that stopped early: its report (failed, no step) and ``written`` records, signed."""
    import json

    from kernodeck import outdir

    path.mkdir()
    (path / "report.json").write_text(json.dumps({"status": "failed", "platform": "p", "steps": [],
                                                  "lock_digest": "sha256:1"}), encoding="utf-8")
    for name in written:
        (path / name).write_text(RECORDS[name], encoding="utf-8")
    outdir.mark(path, "dossier")
    return path


@pytest.mark.parametrize("record", sorted(RECORDS))
def test_comp1_premise_compare_reads_a_record_added_to_a_run_that_never_wrote_it(tmp_path: Path, record: str) -> None:
    from kernodeck.dossier.delta import compare

    a = _stopped_early(tmp_path / "a", *RECORDS)
    b = _stopped_early(tmp_path / "b")
    before = compare(a, b)
    (b / record).write_text(RECORDS[record], encoding="utf-8")  # copied in from run A
    after = compare(a, b)
    assert before != after  # what compare says of B now rests on the added record
    assert record not in after["missing"] and (record != "inventory.txt" or not any(after["inventory"].values()))


@pytest.mark.parametrize("record", sorted(RECORDS))
def test_comp1_a_record_the_run_never_wrote_is_not_as_written(tmp_path: Path, record: str) -> None:
    from kernodeck.dossier.delta import compare

    a, b = _stopped_early(tmp_path / "a", *RECORDS), _stopped_early(tmp_path / "b")
    (b / record).write_text(RECORDS[record], encoding="utf-8")
    assert compare(a, b)["changed_since_written"]["b"] != []


@pytest.mark.parametrize("record", sorted(RECORDS))
def test_control4_the_record_the_run_wrote_then_edited_is_named(tmp_path: Path, record: str) -> None:
    from kernodeck.dossier.delta import compare

    a, b = _stopped_early(tmp_path / "a", *RECORDS), _stopped_early(tmp_path / "b", *RECORDS)
    (b / record).write_text(RECORDS[record].replace("2.13.0", "2.12.0").replace("float32", "float64"),
                            encoding="utf-8")
    assert compare(a, b)["changed_since_written"]["b"] == [f"{record} (changed since Kernodeck wrote it)"]
