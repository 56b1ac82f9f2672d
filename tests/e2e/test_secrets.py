"""No secret written (issue 11 item 12) and several sources as users configure them (issue 12 items 6, 7).

Fake tokens only (QTOKEN42). Each check is shown failing on what the old code let through, then what is kept.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kernodeck._proc import first_error
from kernodeck.errors import CommandFailed
from kernodeck.runformat import review
from kernodeck.sources import (
    SecretInText,
    Source,
    check_written,
    machine_sources,
    needles,
    pip_config,
    redact_text,
    uv_environment,
    variant_index,
)
from tests.helpers.project import kd
from tests.helpers.tinylock import RESOLVERS, offline_sources, tiny_project, tiny_wheels

TOKEN = "QTOKEN42"
QUERY_URL = f"https://idx.example.com/simple?access_token={TOKEN}"
PATH_URL = f"https://dl.cloudsmith.io/{TOKEN}/acme/private/python/simple/"
UV_FETCH = (
    "error: Request failed after 3 retries in 9.4s\n"
    f"  cause: Failed to fetch: https://idx.example.com/simple/sentence-transformers/?access_token={TOKEN}\n"
    "  cause: client error (Connect)\n"
    "  cause: Connection refused (os error 111)\n"
)


@pytest.fixture
def no_pip_files(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No pip configuration file of this machine is read (as on a fresh machine)."""
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return tmp_path


def _pip_conf(tmp_path: Path, text: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    conf = tmp_path / "pip.conf"
    conf.write_text(text, encoding="utf-8")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_DIRS", str(tmp_path / "no-xdg"))
    return conf


# --- pip's configuration, read as pip reads it ----------------------------------------------------------------


def test_pip_conf_with_one_value_per_line_gives_each_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = tmp_path / "wheels-a", tmp_path / "wheels-b"
    _pip_conf(tmp_path, f"[global]\nfind-links =\n    {a}\n    {b}\nextra-index-url = {QUERY_URL}\n", monkeypatch)
    found = machine_sources()
    assert Source("find-links", str(a)) in found and Source("find-links", str(b)) in found
    assert Source("extra-index-url", QUERY_URL) in found
    # what `pip config list` printed and the old parser kept: one "path" holding both, with literal \n
    assert not any("\\n" in s.location or "\n" in s.location for s in found)


def test_pip_env_over_file_and_space_separated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _pip_conf(tmp_path, "[global]\nfind-links = /from/file\n[install]\nno-index = false\n", monkeypatch)
    monkeypatch.setenv("PIP_FIND_LINKS", f"{tmp_path}/a {tmp_path}/b")
    links = [s.location for s in machine_sources() if s.kind == "find-links"]
    assert links == [f"{tmp_path}/a", f"{tmp_path}/b"]  # env replaces the file's value, as in pip
    assert dict(pip_config())["no-index"] == "false"


def test_devnull_config_file_reads_no_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".config" / "pip").mkdir(parents=True)
    (home / ".config" / "pip" / "pip.conf").write_text("[global]\nfind-links = /user/wheels\n", encoding="utf-8")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.setenv("XDG_CONFIG_DIRS", str(tmp_path / "none"))
    assert Source("find-links", "/user/wheels") in machine_sources()
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    assert machine_sources() == []


def test_uv_gets_find_links_comma_separated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_FIND_LINKS", "/a /b")
    env = uv_environment(machine_sources())
    assert env["UV_FIND_LINKS"] == "/a,/b"  # uv read "/a /b" as one folder


@pytest.mark.parametrize("layout", ["spaces", "lines"])
def test_rebuild_with_two_find_links_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: str) -> None:
    """Issue 12 item 7: two find-links folders, pip's space-separated variable or a pip.conf with one per line."""
    cache = tmp_path / "cache"
    wheels = tiny_wheels(tmp_path / "wheels")
    offline_sources(monkeypatch, wheels, cache)
    project = tiny_project(tmp_path / "p")
    assert kd(project, "lock").returncode == 0
    # Split the wheels over two folders: neither alone holds every pinned file.
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    for number, wheel in enumerate(sorted(wheels.glob("*.whl"))):
        wheel.rename((a if number % 2 else b) / wheel.name)
    if layout == "spaces":
        monkeypatch.setenv("PIP_FIND_LINKS", f"{a} {b}")
    else:
        monkeypatch.delenv("PIP_FIND_LINKS")
        conf = tmp_path / "pip.conf"
        conf.write_text(f"[global]\nno-index = true\nfind-links =\n    {a}\n    {b}\n", encoding="utf-8")
        monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    # uv is the installer that must be handed pip's sources in its own syntax (pip reads its own configuration).
    proc = kd(project, "rebuild", "--fresh", "--installer", "uv")
    assert proc.returncode == 0, proc.stderr[-2000:]
    # the lock pins no pip: the one the venv seeded for check and freeze is gone, every file is the lock's
    env = project / ".venv-rebuild" / "cp311-linux_x86_64-cpu" / "current"
    assert not list(env.glob("lib/python*/site-packages/pip-*.dist-info"))
    assert "pip==" not in (env / "kernodeck-inventory.txt").read_text(encoding="utf-8")


# --- what is recorded and scanned ---------------------------------------------------------------------------------


def test_remote_sources_recorded_as_scheme_and_host() -> None:
    assert Source("extra-index-url", QUERY_URL).redacted() == "extra-index-url https://idx.example.com"
    assert Source("index-url", PATH_URL).redacted() == "index-url https://dl.cloudsmith.io"
    assert Source("index-url", "https://u:pw@h.example:8443/x").redacted() == "index-url https://h.example:8443"


def test_scan_finds_query_and_path_tokens(monkeypatch: pytest.MonkeyPatch, no_pip_files: Path) -> None:
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", QUERY_URL)
    monkeypatch.setenv("UV_INDEX", f"private={PATH_URL}")
    monkeypatch.setenv("UV_INDEX_PRIVATE_PASSWORD", "hunter2-pw")
    for text in (f"# note {TOKEN}", f"see /acme/{TOKEN}/x", "pw: hunter2-pw", f"url {QUERY_URL}"):
        with pytest.raises(SecretInText) as caught:
            check_written(text, "lockfiles/x.txt")
        assert TOKEN not in str(caught.value) and "hunter2" not in str(caught.value)
    check_written("index https://download.pytorch.org/whl/cpu; host https://idx.example.com", "x")  # allowed


def test_console_redacts_uv_fetch_line(monkeypatch: pytest.MonkeyPatch, no_pip_files: Path) -> None:
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", PATH_URL)
    reason = first_error(UV_FETCH)
    assert TOKEN not in reason
    assert "Failed to fetch" in reason and "Connection refused" in reason  # the resolver's actual reason is kept
    assert TOKEN not in redact_text(f"Failed to fetch: {PATH_URL}torch/")


def test_mirror_is_named_by_its_variable(monkeypatch: pytest.MonkeyPatch, no_pip_files: Path) -> None:
    declared = "https://download.pytorch.org/whl/cpu"
    assert variant_index("cpu", declared).url == declared
    monkeypatch.setenv("KERNODECK_INDEX_CPU", f"https://mirror.corp/pytorch/cpu?token={TOKEN}")
    index = variant_index("cpu", declared)
    assert index.url.startswith("https://mirror.corp") and index.shown() == "$KERNODECK_INDEX_CPU"
    assert TOKEN not in index.describe() and "/pytorch/cpu" not in index.describe()
    with pytest.raises(SecretInText):
        check_written("--extra-index-url https://mirror.corp/pytorch/cpu", "procedure.md")


def test_dossier_scrubs_pip_conf_sources_without_pip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The reviewer reads pip's files itself: it scrubs pip.conf sources in a Python with no pip."""
    a = tmp_path / "secret-wheels-a"
    _pip_conf(tmp_path, f"[global]\nfind-links =\n    {a}\n    /srv/other-wheels\nindex-url = {PATH_URL}\n",
              monkeypatch)
    folder = tmp_path / "dossier"
    folder.mkdir()
    (folder / "procedure.md").write_text(f"pip install --find-links {a} -i {PATH_URL}\n/srv/other-wheels\n",
                                         encoding="utf-8")
    import subprocess

    def no_subprocess(*args: object, **kwargs: object) -> None:
        raise AssertionError("the reviewer ran a subprocess (pip): it must read pip's files itself")

    monkeypatch.setattr(subprocess, "run", no_subprocess)  # the verify session's Python has no pip
    monkeypatch.setattr(subprocess, "Popen", no_subprocess)
    review.review_folder(folder, tmp_path / "project")
    text = (folder / "procedure.md").read_text(encoding="utf-8")
    assert str(a) not in text and "/srv/other-wheels" not in text and TOKEN not in text


def test_dossier_write_fails_when_a_secret_survives(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     no_pip_files: Path) -> None:
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", QUERY_URL)
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "report.md").write_text(f"token {TOKEN}\n", encoding="utf-8")
    with pytest.raises(SecretInText):
        review.review_folder(folder, tmp_path, review=lambda text: text)  # a reviewer that misses it
    assert not (folder / "report.md").exists()


def test_needles_cover_pip_conf_in_every_section(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _pip_conf(tmp_path, f"[download]\nextra-index-url = {QUERY_URL}\n", monkeypatch)
    assert any(n.value == TOKEN for n in needles())


# --- end to end: the lock and the console ------------------------------------------------------------------------


@pytest.mark.reliability(
    39,
    "`nox -s lock` with PIP_EXTRA_INDEX_URL=https://host/simple?access_token=QTOKEN42, then a token in the "
    "URL path; a pip.conf listing find-links one per line",
    "the lock header records scheme and host only; no written file and no console line holds the token or "
    "the local paths",
)
@pytest.mark.parametrize("resolver", RESOLVERS)
def test_lock_writes_no_token_or_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, resolver: str) -> None:
    cache = tmp_path / "cache"
    wheels = tiny_wheels(tmp_path / "wheels")
    offline_sources(monkeypatch, wheels, cache)
    monkeypatch.delenv("PIP_FIND_LINKS")
    monkeypatch.delenv("PIP_NO_INDEX")
    conf = tmp_path / "pip.conf"
    conf.write_text(f"[global]\nno-index = false\nfind-links =\n    {wheels}\n    {tmp_path}/empty-wheels\n",
                    encoding="utf-8")
    (tmp_path / "empty-wheels").mkdir()
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:9/{TOKEN}/simple/")
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", f"http://127.0.0.1:9/simple?access_token={TOKEN}")
    monkeypatch.setenv("UV_INDEX", f"http://127.0.0.1:9/simple?access_token={TOKEN}")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "1")
    monkeypatch.setenv("UV_HTTP_RETRIES", "0")
    monkeypatch.setenv("UV_OFFLINE", "1")
    project = tiny_project(tmp_path / "p")
    proc = kd(project, "lock", "--resolver", resolver)
    console = proc.stdout + proc.stderr
    assert TOKEN not in console
    written = [p for p in (project / "lockfiles").glob("*") if p.is_file()]
    for path in written:
        text = path.read_text(encoding="utf-8")
        assert TOKEN not in text and str(wheels) not in text and "empty-wheels" not in text, path.name
    if proc.returncode == 0:
        header = (project / "lockfiles" / "cp311-linux_x86_64-cpu.txt").read_text(encoding="utf-8")
        assert "# source: extra-index-url" not in header and "# source: index-url" not in header  # not the machine's
        assert "# source: find-links" not in header and str(tmp_path) not in header
    else:
        assert "ERROR:" in console and written == []


def test_failed_rebuild_names_sources_and_keeps_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 12 item 6: the resolver's reason, the sources asked, and a TIP true to what exists."""
    cache = tmp_path / "cache"
    wheels = tiny_wheels(tmp_path / "wheels")
    offline_sources(monkeypatch, wheels, cache)
    project = tiny_project(tmp_path / "p")
    assert kd(project, "lock").returncode == 0
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PIP_FIND_LINKS", str(empty))
    proc = kd(project, "rebuild", "--installer", "uv")
    assert proc.returncode != 0
    error = next(line for line in proc.stderr.splitlines() if line.startswith("ERROR:"))
    tip = next(line for line in proc.stderr.splitlines() if line.startswith("TIP:"))
    assert "kdtiny" in error and "(sources: " in error and "find-links <local path>" in error, error
    assert "none existed" in tip and "untouched" not in tip, tip
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    assert kd(project, "rebuild", "--installer", "uv").returncode == 0
    monkeypatch.setenv("PIP_FIND_LINKS", str(empty))
    proc = kd(project, "rebuild", "--fresh", "--installer", "uv")
    tip = next(line for line in proc.stderr.splitlines() if line.startswith("TIP:"))
    assert "previous good environment is untouched" in tip, tip


def test_command_failed_output_is_redacted(monkeypatch: pytest.MonkeyPatch, no_pip_files: Path) -> None:
    from kernodeck._proc import run

    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", PATH_URL)
    with pytest.raises(CommandFailed) as caught:
        run(["sh", "-c", f"echo 'error: Failed to fetch: {PATH_URL}x/' >&2; exit 3"], quiet=True)
    assert TOKEN not in caught.value.first_error and TOKEN not in caught.value.output


# --- a mirror of the variant's index: lock, rebuild, and the negative control ------------------------------------


@pytest.mark.reliability(
    40,
    "KERNODECK_INDEX_CPU=<a mirror on 127.0.0.1, a token QTOKEN42 in its path> replacing an unreachable declared "
    "index, for `lock` (pip-tools and uv) and `rebuild --fresh`; then the same rebuild without the mirror",
    "lock and rebuild take the torch layer from the mirror; the lock names the declared index and the mirror's "
    "variable only (no URL, port or token); the PEP 751 twin places the file under the declared index; without "
    "the mirror one ERROR names the variant's index as unreachable and the previous env is untouched",
)
def test_mirror_replaces_the_variant_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.helpers.fresh import LocalIndex

    cache = tmp_path / "cache"
    wheels = tiny_wheels(tmp_path / "wheels")
    layer = tmp_path / "layer"
    layer.mkdir()
    torch_wheel = next(wheels.glob("kdtiny_torch-*.whl"))
    torch_wheel = torch_wheel.rename(layer / torch_wheel.name)  # only the mirror holds the torch layer
    offline_sources(monkeypatch, wheels, cache)
    monkeypatch.delenv("PIP_NO_INDEX")
    project = tiny_project(tmp_path / "p")
    nothing = LocalIndex([], projects=())  # stands in for PyPI: answers 404 for every name, at once
    mirror = LocalIndex([torch_wheel])
    with nothing.serving(), mirror.serving():
        port = mirror.url.split(":")[2].split("/")[0]
        monkeypatch.setenv("PIP_INDEX_URL", nothing.url)
        monkeypatch.setenv("KERNODECK_INDEX_CPU", mirror.url_with(TOKEN))  # a token in the path (pip appends the
        # project name to the whole URL string, so a query-string token only works with uv)
        for resolver in RESOLVERS:
            proc = kd(project, "lock", "--resolver", resolver)
            assert proc.returncode == 0, proc.stderr[-2000:]
            assert TOKEN not in proc.stdout + proc.stderr
        lock_text = (project / "lockfiles" / "cp311-linux_x86_64-cpu.txt").read_text(encoding="utf-8")
        twin = (project / "lockfiles" / "pylock.cp311-linux_x86_64-cpu.toml").read_text(encoding="utf-8")
        assert "kdtiny-torch==1.0" in lock_text
        assert "(replaced by the mirror in KERNODECK_INDEX_CPU)" in lock_text
        assert f'url = "http://127.0.0.1:9/simple/{torch_wheel.name}"' in twin
        for text in (lock_text, twin):
            assert TOKEN not in text and f":{port}" not in text
        proc = kd(project, "rebuild", "--fresh", "--installer", "uv")
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert TOKEN not in proc.stdout + proc.stderr
        assert any(r.startswith("/files/kdtiny_torch") for r in mirror.requests)
        monkeypatch.delenv("KERNODECK_INDEX_CPU")
        proc = kd(project, "rebuild", "--fresh", "--installer", "uv")
    assert proc.returncode != 0
    error = next(line for line in proc.stderr.splitlines() if line.startswith("ERROR:"))
    tip = next(line for line in proc.stderr.splitlines() if line.startswith("TIP:"))
    assert "the cpu variant's index http://127.0.0.1:9/simple (not asked: unreachable" in error, error
    assert "kdtiny-torch" in error and "KERNODECK_INDEX_CPU" in tip and "untouched" in tip, (error, tip)
