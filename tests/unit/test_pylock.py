"""Standard PEP 751 plumbing: every pylock is read by packaging.pylock and written by tomlkit, and pip installs one.

- The committed twins, read by ``packaging.pylock`` and written again by :func:`kernodeck.lock.pylock.dumps`, are
  byte-identical: the writer is deterministic and the locks in the repository are what it writes.
- An invalid pylock is refused by every reader (lock check, the lock's known files, the SBOM), naming the problem.
- pip (not only uv) installs a twin with ``pip install -r pylock.<name>.toml``: a twin written by Kernodeck's own
  writer for wheels made here (no index), and, where pypi.org answers, a part of a committed twin.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.pylock import Pylock
from packaging.version import Version

from kernodeck._fs import sha256_file
from kernodeck.errors import LockfileError
from kernodeck.lock import index_client, lockfile, pylock
from kernodeck.lock import twin as lock_twin
from kernodeck.project.config import load_project
from kernodeck.project.platforms import Platform, current_os_arch, current_python
from kernodeck.runformat import sbom
from tests.helpers.project import ROOT
from tests.helpers.tinylock import offline_env, write_wheel

COMMITTED = sorted((ROOT / "lockfiles").glob("pylock.*.toml")) + sorted(ROOT.glob("examples/*/lockfiles/pylock.*.toml"))


def _header(text: str) -> str:
    return text.splitlines()[0].removeprefix("# ")


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: str(p.relative_to(ROOT)))
def test_committed_twin_is_what_the_standard_reader_and_the_writer_give(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    lock = lock_twin.read(path)
    assert isinstance(lock, Pylock) and lock.lock_version == Version("1.0") and lock.packages
    lock.validate()
    assert pylock.dumps(lock, _header(text)) == text, f"{path.name} is not what the writer writes"


def test_committed_twins_exist() -> None:
    assert len(COMMITTED) >= 10


def test_writer_is_deterministic_and_reads_back(tmp_path: Path) -> None:
    lock = lock_twin.read(COMMITTED[0])
    part = dataclasses.replace(lock, packages=list(lock.packages[:3]))
    one, two = pylock.dumps(part, "h"), pylock.dumps(part, "h")
    assert one == two
    out = tmp_path / "pylock.part.toml"
    out.write_text(one, encoding="utf-8")
    assert lock_twin.read(out).to_dict() == part.to_dict()


BROKEN = {
    "a wheel without hashes": ("hashes = {sha256 = ", "nohashes = {sha256 = "),
    "an unsupported lock version": ('lock-version = "1.0"', 'lock-version = "2.0"'),
    "a version that is no version": ('version = "0.0.7"', 'version = "not a version"'),
    "not TOML": ("[[packages]]", "[[packages]"),
}


@pytest.mark.parametrize("what", list(BROKEN))
def test_every_reader_refuses_an_invalid_pylock(what: str, tmp_path: Path) -> None:
    committed = ROOT / "lockfiles" / "pylock.cp311-linux_x86_64-cpu.toml"
    lock_file = committed.with_name("cp311-linux_x86_64-cpu.txt")
    old, new = BROKEN[what]
    text = committed.read_text(encoding="utf-8")
    assert old in text
    bad = tmp_path / committed.name
    bad.write_text(text.replace(old, new, 1), encoding="utf-8")
    with pytest.raises(LockfileError, match=r"pylock\.cp311-linux_x86_64-cpu\.toml"):
        lock_twin.read(bad)
    assert lock_twin.known_files(bad) == {}
    assert lock_twin.recorded_digest(bad) is None
    found = pylock.disagreements(bad, lockfile.read(lock_file))
    assert len(found) == 1 and bad.name in found[0], found
    # the SBOM places no file from a pylock it cannot trust (the hashes stay on each component)
    doc = sbom.build(lock_file, "cp311-linux_x86_64-cpu", bad)
    assert not any("externalReferences" in c for c in doc["components"])
    # and the same readers accept the good twin
    assert pylock.disagreements(committed, lockfile.read(lock_file)) == []
    assert any("externalReferences" in c for c in sbom.build(lock_file, "cp311-linux_x86_64-cpu", committed)[
        "components"])


def _pip(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True, env=env,
                          check=False, timeout=300)


def test_pip_is_the_version_the_wheelhouse_group_pins_and_reads_pylock() -> None:
    import tomllib

    import pip

    pins = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["dependency-groups"]["wheelhouse"]
    pinned = next(p.partition("==")[2] for p in pins if isinstance(p, str) and p.startswith("pip=="))
    assert Version(pip.__version__) == Version(pinned) >= Version("26.1")


def _local_twin(tmp_path: Path, *, tamper: bool = False) -> Path:
    """A twin written by Kernodeck's own writer for two wheels made here, placed by file URLs (no index)."""
    wheels = [write_wheel(tmp_path / "wheels", "kdtinya", "1.0"), write_wheel(tmp_path / "wheels", "kdtinyb", "2.0")]
    lines = ["# a lock for the test"]
    files: dict[str, list[index_client.DistFile]] = {}
    for wheel in wheels:
        name, version = wheel.name.split("-")[:2]
        digest = sha256_file(wheel)
        if tamper and name == "kdtinyb":
            digest = "0" * 64
        lines.append(f"{name}=={version} \\\n    --hash=sha256:{digest}")
        files[name] = [index_client.DistFile(wheel.name, wheel.as_uri(), digest, wheel.stat().st_size)]
    lock_text = "\n".join(lines) + "\n"
    lock = lockfile.parse_text(lock_text, tmp_path / "tiny.txt")
    plat = Platform(current_python(), current_os_arch(), load_project(ROOT).variant("cpu"))
    twin = tmp_path / f"pylock.{plat.id}.toml"
    twin.write_text(pylock.render(lock, plat, files, lock_text), encoding="utf-8")
    return twin


def test_pip_installs_a_kernodeck_twin_offline(tmp_path: Path) -> None:
    twin = _local_twin(tmp_path)
    target = tmp_path / "target"
    proc = _pip("install", "--no-deps", "-r", str(twin), "--target", str(target), env=offline_env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (target / "kdtinya" / "__init__.py").is_file() and (target / "kdtinyb-2.0.dist-info").is_dir()


def test_pip_refuses_a_twin_whose_hash_is_not_the_file(tmp_path: Path) -> None:
    twin = _local_twin(tmp_path, tamper=True)
    target = tmp_path / "target"
    proc = _pip("install", "--no-deps", "-r", str(twin), "--target", str(target), env=offline_env())
    assert proc.returncode != 0
    assert "hash" in (proc.stdout + proc.stderr).lower()
    assert not (target / "kdtinyb").exists()


@pytest.mark.network
def test_pip_installs_part_of_a_committed_twin_from_pypi(tmp_path: Path) -> None:
    """Two small pure-Python packages of the committed cpu twin, as the twin places them (files.pythonhosted.org)."""
    if (current_python(), current_os_arch()) != ("3.11", "linux_x86_64"):
        pytest.skip("the committed cpu twin's environment is CPython 3.11 on linux x86_64")
    lock = lock_twin.read(ROOT / "lockfiles" / "pylock.cp311-linux_x86_64-cpu.toml")
    keep = {"annotated-types", "typing-extensions"}
    part = dataclasses.replace(lock, packages=[p for p in lock.packages if p.name in keep])
    assert len(part.packages) == 2
    twin = tmp_path / "pylock.part.toml"
    twin.write_text(pylock.dumps(part, "two packages of the committed cpu twin"), encoding="utf-8")
    env = {k: v for k, v in offline_env().items() if k != "PIP_NO_INDEX"}
    try:
        proc = _pip("install", "--no-deps", "-r", str(twin), "--target", str(tmp_path / "t"), env=env)
    except subprocess.TimeoutExpired:
        pytest.skip("pypi.org did not answer in time")
    if proc.returncode != 0 and any(s in proc.stdout + proc.stderr for s in ("NewConnectionError", "Max retries",
                                                                              "Temporary failure in name resolution")):
        pytest.skip("files.pythonhosted.org is not reachable from here")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "t" / "typing_extensions.py").is_file()
    assert (tmp_path / "t" / "annotated_types-0.8.0.dist-info").is_dir()


# --- the index client kept for what uv cannot do: the certificates and netrc pip and uv use ---------------------------

def test_ca_bundle_follows_pip_then_ssl_cert_file(tmp_path: Path) -> None:
    pip_ca, ssl_ca = tmp_path / "pip.pem", tmp_path / "ssl.pem"
    pip_ca.write_text("x", encoding="utf-8")
    ssl_ca.write_text("y", encoding="utf-8")
    assert index_client.ca_bundle({}, {}) is None
    assert index_client.ca_bundle({"SSL_CERT_FILE": str(ssl_ca)}, {}) == str(ssl_ca)
    assert index_client.ca_bundle({"SSL_CERT_FILE": str(ssl_ca)}, {"cert": str(pip_ca)}) == str(pip_ca)
    assert index_client.ca_bundle({"REQUESTS_CA_BUNDLE": str(ssl_ca)}, {}) == str(ssl_ca)
    # a bundle that is not there is not trusted blindly: the next one (or the system's store) is used
    assert index_client.ca_bundle({"SSL_CERT_FILE": str(ssl_ca)}, {"cert": str(tmp_path / "gone.pem")}) == str(ssl_ca)


def test_netrc_credentials_are_sent_to_their_host_only(tmp_path: Path) -> None:
    rc = tmp_path / "netrc"
    rc.write_text("machine index.example.org login alice password s3cret\n", encoding="utf-8")
    rc.chmod(0o600)
    assert index_client.netrc_auth("index.example.org", {"NETRC": str(rc)}) == ("alice", "s3cret")
    assert index_client.netrc_auth("pypi.org", {"NETRC": str(rc)}) is None
    assert index_client.netrc_auth("index.example.org", {"NETRC": str(tmp_path / "none")}) is None


def test_fetcher_sends_netrc_credentials(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A local HTTP index that answers only with the netrc credentials: the client reads its page through them."""
    import base64
    import http.server
    import threading

    expected = "Basic " + base64.b64encode(b"alice:s3cret").decode()
    seen: list[str | None] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.headers.get("Authorization"))
            if self.headers.get("Authorization") != expected:
                self.send_response(401)
                self.end_headers()
                return
            body = b'<a href="kdtiny-1.0-py3-none-any.whl#sha256=' + b"a" * 64 + b'">kdtiny-1.0-py3-none-any.whl</a>'
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        index = f"http://127.0.0.1:{server.server_port}/simple"
        for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY"):
            monkeypatch.delenv(var, raising=False)
        monkeypatch.setenv("NETRC", str(tmp_path / "absent"))
        with pytest.raises(OSError, match="HTTP 401"):
            index_client.index_files(index, "kdtiny")
        rc = tmp_path / "netrc"
        rc.write_text("machine 127.0.0.1 login alice password s3cret\n", encoding="utf-8")
        rc.chmod(0o600)
        monkeypatch.setenv("NETRC", str(rc))
        files = index_client.index_files(index, "kdtiny")
        assert [f.filename for f in files] == ["kdtiny-1.0-py3-none-any.whl"] and seen[-1] == expected
    finally:
        server.shutdown()
        server.server_close()
