"""No secret written or printed, from any source pip or uv reads, in any spelling (issue 19 item 4); a malformed
source URL is one ERROR naming where it is (issue 19 item 6). Fake tokens only.

The found cases: a mirror's path token without digits, printed by uv without the default port ``:80`` (so the URL as
configured was never found in the text), and an index from a ``uv.toml`` (``UV_CONFIG_FILE``) never redacted.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from kernodeck.sources import (
    MalformedSource,
    SecretInText,
    check_written,
    host_of,
    needles,
    normalise,
    redact_text,
    require_valid_sources,
    scrub_text,
)
from tests.helpers.project import kd
from tests.helpers.tinylock import offline_sources, tiny_project, tiny_wheels

TOKEN = "AbCdEfGhIjKlMnOpQrSt"  # no digit: the old scan took only digit-and-letter segments for tokens
MIRROR = f"http://127.0.0.1:80/{TOKEN}/simple"
DECLARED = "https://download.pytorch.org/whl/cpu"


@pytest.fixture
def bare_machine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No pip or uv configuration file of this machine is read; the current folder is an empty one."""
    home = tmp_path / "home"
    (home / ".config").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_CONFIG_DIRS", str(tmp_path / "no-xdg"))
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return tmp_path


# --- every spelling of one source --------------------------------------------------------------------------------


SPELLINGS = [
    f"error: Failed to fetch: http://127.0.0.1/{TOKEN}/simple/kdtiny-torch/",  # uv drops the default port
    f"Looking in indexes: http://127.0.0.1:80/{TOKEN}/simple/",  # trailing slash
    f"HTTP://127.0.0.1:80/{TOKEN}/simple",  # scheme case
    "http://127.0.0.1/%41bCdEfGhIjKlMnOpQrSt/simple/x/",  # percent-encoded
    f"host 127.0.0.1/{TOKEN}/simple",  # no scheme
    f"the token alone: {TOKEN}",
]


@pytest.mark.parametrize("text", SPELLINGS)
def test_mirror_in_every_spelling_is_refused_and_redacted(text: str, monkeypatch: pytest.MonkeyPatch,
                                                           bare_machine: Path) -> None:
    check_written(text, "report.md")  # negative control: no such source on this machine, nothing to refuse
    monkeypatch.setenv("KERNODECK_INDEX_CPU", MIRROR)
    with pytest.raises(SecretInText) as caught:
        check_written(text, "report.md")
    assert TOKEN not in str(caught.value) and "KERNODECK_INDEX_CPU" in str(caught.value)
    shown = redact_text(text)
    assert TOKEN not in shown and "bCdEfGhIjKlMnOpQrSt" not in shown, shown
    assert TOKEN not in scrub_text(text)


@pytest.mark.parametrize(("configured", "text"), [
    ("https://Mirror.Example.COM/Priv/Simple/", "https://mirror.example.com:443/Priv/Simple/torch/"),
    ("https://mirror.example.com:443/priv/simple", "see https://MIRROR.example.com/priv/simple."),
    ("https://mirror.example.com/a%20b/simple", "https://mirror.example.com/a b/simple"),
    ("https://mirror.example.com/a b/simple".replace(" ", "%2B"), "https://mirror.example.com/a+b/simple"),
])
def test_normalised_spellings(configured: str, text: str, monkeypatch: pytest.MonkeyPatch,
                              bare_machine: Path) -> None:
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", configured)
    with pytest.raises(SecretInText):
        check_written(text, "report.json")
    assert "/priv" not in redact_text(text).lower() and "a b" not in redact_text(text)
    assert redact_text(text).startswith(("https://mirror.example.com/***", "see https://mirror.example.com/***"))


def test_host_public_index_and_other_paths_stay(monkeypatch: pytest.MonkeyPatch, bare_machine: Path) -> None:
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "https://mirror.example.com/priv/simple")
    monkeypatch.setenv("UV_INDEX", DECLARED + "/extra-" + "Tok3nTok3n")
    for text in ("host https://mirror.example.com", "https://mirror.example.com/other/simple",
                 f"--extra-index-url {DECLARED}", "https://pypi.org/simple/torch/", "https://mirror.example.com/private"):
        check_written(text, "procedure.md", public=[DECLARED])
        assert redact_text(text, public=[DECLARED]) == text
    with pytest.raises(SecretInText):  # a secret under a public index: the most specific one wins
        check_written(f"{DECLARED}/extra-Tok3nTok3n/torch/", "x", public=[DECLARED])


def test_public_index_sharing_host_and_path_under_another_scheme(monkeypatch: pytest.MonkeyPatch,
                                                                 bare_machine: Path) -> None:
    """A machine source https://u:p@h:9/simple beside a declared http://h:9/simple: the declared one may be written
    and is printed as it is; the machine's, in any spelling, may not."""
    monkeypatch.setenv("PIP_INDEX_URL", "https://user:s3cret@127.0.0.1:9/simple")
    declared = "http://127.0.0.1:9/simple"
    text = f"# index: the cpu variant's index {declared}/kdtiny-torch/"
    check_written(text, "lock.txt", public=[declared])
    assert redact_text(text, public=[declared]) == text
    for leak in ("https://127.0.0.1:9/simple/x", "127.0.0.1:9/simple", "user:s3cret"):
        with pytest.raises(SecretInText):
            check_written(leak, "lock.txt", public=[declared])


def test_normalise() -> None:
    assert normalise("HTTP://Mirror.Corp:80/a%2Db/simple/") == normalise("http://mirror.corp/a-b/simple")
    assert normalise("https://h:44x3/simple") is None and normalise("https://[bad/simple") is None
    assert host_of("https://h:44x3/simple") == "<remote>" and host_of("https://u:p@H.example:443/x") == \
        "https://h.example"


# --- every place pip or uv reads a source from -------------------------------------------------------------------


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


SECRET = "https://idx.example.com/Zz9SecretPath/simple"
PLACES = [
    "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "UV_INDEX", "UV_INDEX_URL", "UV_EXTRA_INDEX_URL",
    "UV_DEFAULT_INDEX", "UV_FIND_LINKS", "UV_PYTHON_INSTALL_MIRROR", "KERNODECK_INDEX_CU130",
    "pip.conf (PIP_CONFIG_FILE) [global]", "pip.conf of the user [install]", "uv.toml (UV_CONFIG_FILE) index-url",
    "uv.toml (UV_CONFIG_FILE) [[index]]", "uv.toml (UV_CONFIG_FILE) [pip] extra-index-url", "uv.toml of the user",
    "uv.toml of the system (XDG_CONFIG_DIRS)", "uv.toml of the project", "pyproject.toml [tool.uv] of the project",
]


def _configure(place: str, monkeypatch: pytest.MonkeyPatch, root: Path) -> None:
    home = Path(os.environ["HOME"])
    if place.isupper() or place.startswith(("PIP_", "UV_", "KERNODECK_")):
        monkeypatch.setenv(place, f"private={SECRET}" if place == "UV_INDEX" else SECRET)
    elif place == "pip.conf (PIP_CONFIG_FILE) [global]":
        monkeypatch.setenv("PIP_CONFIG_FILE", str(_write(root / "pip.conf", f"[global]\nindex-url = {SECRET}\n")))
    elif place == "pip.conf of the user [install]":
        monkeypatch.delenv("PIP_CONFIG_FILE")
        _write(home / ".config" / "pip" / "pip.conf", f"[install]\nextra-index-url =\n    {SECRET}\n")
    elif place.startswith("uv.toml (UV_CONFIG_FILE)"):
        body = {"index-url": f'index-url = "{SECRET}"\n', "[[index]]": f'[[index]]\nname = "p"\nurl = "{SECRET}"\n',
                "[pip] extra-index-url": f'[pip]\nextra-index-url = ["{SECRET}"]\n'}[place.split(") ", 1)[1]]
        monkeypatch.setenv("UV_CONFIG_FILE", str(_write(root / "conf" / "uv.toml", body)))
    elif place == "uv.toml of the user":
        _write(home / ".config" / "uv" / "uv.toml", f'find-links = ["{SECRET}"]\n')
    elif place == "uv.toml of the system (XDG_CONFIG_DIRS)":
        _write(root / "no-xdg" / "uv" / "uv.toml", f'extra-index-url = ["{SECRET}"]\n')
    elif place == "uv.toml of the project":
        _write(root / "uv.toml", f'index-url = "{SECRET}"\n')  # found from the current folder, up
    elif place == "pyproject.toml [tool.uv] of the project":
        _write(root / "work" / "pyproject.toml", f'[project]\nname = "x"\n[[tool.uv.index]]\nurl = "{SECRET}"\n')
    else:
        raise AssertionError(place)


@pytest.mark.parametrize("place", PLACES)
def test_every_place_is_secret(place: str, monkeypatch: pytest.MonkeyPatch, bare_machine: Path) -> None:
    uv_said = "error: Failed to fetch: https://IDX.example.com:443/Zz9SecretPath/simple/torch/"
    check_written(uv_said, "report.json")  # negative control: not configured anywhere yet
    _configure(place, monkeypatch, bare_machine)
    with pytest.raises(SecretInText):
        check_written(uv_said, "report.json")
    shown = redact_text(uv_said)
    assert "Zz9SecretPath" not in shown
    assert "https://idx.example.com/***" in shown or "$KERNODECK_INDEX_CU130" in shown


def test_named_index_credentials_are_secret(monkeypatch: pytest.MonkeyPatch, bare_machine: Path) -> None:
    monkeypatch.setenv("UV_INDEX_PRIVATE_USERNAME", "deploy-bot-user")
    monkeypatch.setenv("UV_INDEX_PRIVATE_PASSWORD", "p@ss/w0rd")
    for text in ("user deploy-bot-user", "pw p@ss/w0rd", "pw p%40ss%2Fw0rd"):
        with pytest.raises(SecretInText):
            check_written(text, "report.md")
    assert {"deploy-bot-user", "p@ss/w0rd", "p%40ss%2Fw0rd"} <= {n.value for n in needles()}
    monkeypatch.setenv("UV_INDEX_PRIVATE_USERNAME", "__token__")  # a common word: not a needle (every "__token__"
    check_written("username __token__", "report.md")  # in a text would refuse the write)


# --- a malformed URL: one ERROR naming where, never the value ----------------------------------------------------


@pytest.mark.parametrize(("var", "value"), [
    ("PIP_EXTRA_INDEX_URL", "https://[bad/simple"),
    ("UV_INDEX", "https://idx.example.com:44x3/Sekr1tPath/simple"),
    ("KERNODECK_INDEX_CPU", "http://127.0.0.1:99999/simple"),
    ("UV_FIND_LINKS", "/ok/wheels,https:///no-host"),
])
def test_malformed_source_is_named_not_shown(var: str, value: str, monkeypatch: pytest.MonkeyPatch,
                                             bare_machine: Path) -> None:
    require_valid_sources()  # negative control: nothing set
    monkeypatch.setenv(var, value)
    with pytest.raises(MalformedSource) as caught:
        require_valid_sources()
    said = f"{caught.value} {caught.value.tip}"
    assert var in said and value not in said and "44x3" not in said and "[bad" not in said, said
    # the redaction itself never raises on it, and hides it
    assert "Sekr1tPath" not in redact_text(f"see {value}") and "[bad" not in redact_text(f"see {value}")


def test_malformed_in_a_config_file_names_the_file(monkeypatch: pytest.MonkeyPatch, bare_machine: Path) -> None:
    conf = _write(bare_machine / "conf" / "uv.toml", 'index-url = "https://h.example:44x3/simple"\n')
    monkeypatch.setenv("UV_CONFIG_FILE", str(conf))
    with pytest.raises(MalformedSource) as caught:
        require_valid_sources()
    assert str(conf) in str(caught.value) and "index-url" in str(caught.value) and "44x3" not in str(caught.value)


def test_valid_and_relative_sources_pass(monkeypatch: pytest.MonkeyPatch, bare_machine: Path) -> None:
    monkeypatch.setenv("PIP_FIND_LINKS", "wheels ./more /abs/wheels file:///srv/w")
    monkeypatch.setenv("UV_DEFAULT_INDEX", "file:///srv/local-index")
    monkeypatch.setenv("UV_INDEX", "private=https://u:p@idx.example.com:8443/simple")
    monkeypatch.setenv("PIP_INDEX_URL", "http://[::1]:8080/simple")
    require_valid_sources()


# --- end to end: a real run, the console and every file it writes -------------------------------------------------


def _lock_tiny(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    wheels = tiny_wheels(tmp_path / "wheels")
    offline_sources(monkeypatch, wheels, tmp_path / "cache")
    project = tiny_project(tmp_path / "p")
    proc = kd(project, "lock")
    assert proc.returncode == 0, proc.stderr[-2000:]
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PIP_FIND_LINKS", str(empty))  # the torch layer must come from the index now
    monkeypatch.delenv("PIP_NO_INDEX")
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("UV_HTTP_RETRIES", "0")
    return project, tmp_path / "run"


def _nothing_secret(proc: object, out: Path, *secrets: str) -> None:
    console = proc.stdout + proc.stderr  # type: ignore[attr-defined]
    assert "Traceback" not in console
    written = {p.name: p.read_text(encoding="utf-8") for p in out.rglob("*") if p.is_file()} if out.exists() else {}
    assert {"report.json", "report.md", "procedure.md"} <= set(written), sorted(written)
    for secret in secrets:
        assert secret not in console, secret
        for name, text in written.items():
            assert secret not in text, (name, secret)


@pytest.mark.slow
@pytest.mark.reliability(
    60,
    "KERNODECK_INDEX_CPU=http://127.0.0.1:80/AbCdEfGhIjKlMnOpQrSt/simple (a path token without digits, the default "
    "port spelt out) for a verify whose install must fetch from it, with uv (it prints the URL without :80) and with "
    "pip (a user pip.conf adding an index under another token path)",
    "the verify fails cleanly (ERROR naming the mirror by its variable); neither token nor URL reaches the console, "
    "report.json, report.md or procedure.md",
)
@pytest.mark.parametrize("installer", ["uv", "pip"])
def test_mirror_without_default_port_never_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   installer: str) -> None:
    project, out = _lock_tiny(tmp_path, monkeypatch)
    monkeypatch.setenv("KERNODECK_INDEX_CPU", MIRROR)
    extra = ""
    if installer == "pip":
        home = tmp_path / "home"
        monkeypatch.setenv("HOME", str(home))
        monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
        monkeypatch.delenv("PIP_CONFIG_FILE")
        extra = "PipConfTokenNoDigits"
        _write(home / ".config" / "pip" / "pip.conf", f"[install]\nextra-index-url = https://127.0.0.1/{extra}/\n")
        monkeypatch.setenv("PIP_RETRIES", "0")
        monkeypatch.setenv("PIP_TIMEOUT", "1")
    proc = kd(project, "verify", "--out", str(out), "--installer", installer)
    assert proc.returncode == 2, proc.stderr[-2000:]
    error = [line for line in proc.stderr.splitlines() if line.startswith("ERROR:")][-1]  # pip prints its own first
    assert "KERNODECK_INDEX_CPU" in error, error
    _nothing_secret(proc, out, TOKEN, "127.0.0.1:80/", "127.0.0.1/Ab", *([extra] if extra else []))


@pytest.mark.slow
@pytest.mark.reliability(
    61,
    "an index in a uv.toml named by UV_CONFIG_FILE (http://127.0.0.1:9/UvTomlPrivatePath/simple/, [[index]] and "
    "[pip] extra-index-url) during a verify whose uv install asks it",
    "the verify fails cleanly; the uv.toml's URL and path reach neither the console nor any file of the dossier",
)
def test_uv_toml_index_never_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project, out = _lock_tiny(tmp_path, monkeypatch)
    secret = "UvTomlPrivatePath"
    conf = _write(tmp_path / "conf" / "uv.toml",
                  f'[[index]]\nname = "corp"\nurl = "http://127.0.0.1:9/{secret}/simple/"\n'
                  f'[pip]\nextra-index-url = ["http://LOCALHOST:80/{secret}2/simple"]\n')
    monkeypatch.setenv("UV_CONFIG_FILE", str(conf))
    proc = kd(project, "verify", "--out", str(out), "--installer", "uv")
    assert proc.returncode == 2, proc.stderr[-2000:]
    _nothing_secret(proc, out, secret)


@pytest.mark.reliability(
    62,
    "PIP_EXTRA_INDEX_URL='https://[bad/simple', then UV_INDEX with a port :44x3, then a uv.toml index-url with a bad "
    "port, for lock, rebuild and verify",
    "one ERROR naming the variable (or the file and key), never its value, and a TIP; no traceback; exit 2",
)
@pytest.mark.parametrize("command", ["lock", "rebuild", "verify"])
def test_malformed_source_is_one_error(command: str, tmp_path: Path) -> None:
    project = tiny_project(tmp_path / "p")
    conf = _write(tmp_path / "uv.toml", 'index-url = "https://h.example:44x3/Sekr1t/simple"\n')
    cases = [("PIP_EXTRA_INDEX_URL", "https://[bad/simple", "PIP_EXTRA_INDEX_URL"),
             ("UV_INDEX", "corp=https://idx.example.com:44x3/Sekr1t/simple", "UV_INDEX"),
             ("UV_CONFIG_FILE", str(conf), str(conf))]
    for var, value, named in cases:
        env = {**os.environ, "PIP_CONFIG_FILE": os.devnull, var: value}
        proc = kd(project, command, env=env)
        lines = proc.stderr.splitlines()
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
        errors = [line for line in lines if line.startswith("ERROR:")]
        assert len(errors) == 1 and named in errors[0] and "malformed URL" in errors[0], errors
        assert any(line.startswith("TIP:") for line in lines)
        assert "[bad" not in proc.stderr + proc.stdout and "44x3" not in proc.stderr + proc.stdout
    shutil.rmtree(project / "lockfiles")


@pytest.mark.slow
@pytest.mark.reliability(
    65,
    "a passing lock (pip-tools and uv) and `rebuild --fresh` with secret sources set everywhere at once: the mirror "
    "KERNODECK_INDEX_CPU spelt with a percent-encoded, digit-free path token and a trailing slash; a uv.toml "
    "(UV_CONFIG_FILE) index and a user pip.conf extra index, each under a token path on a loopback index",
    "lock and rebuild still pass (the torch layer from the mirror); neither token nor any spelling of the sources "
    "reaches the console, the lock, its PEP 751 twin or the env's marker and inventory",
)
def test_passing_run_with_secret_sources_everywhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.helpers.fresh import LocalIndex

    wheels = tiny_wheels(tmp_path / "wheels")
    layer = tmp_path / "layer"
    layer.mkdir()
    torch_wheel = next(wheels.glob("kdtiny_torch-*.whl"))
    torch_wheel = torch_wheel.rename(layer / torch_wheel.name)  # only the mirror holds the torch layer
    offline_sources(monkeypatch, wheels, tmp_path / "cache")
    monkeypatch.delenv("PIP_NO_INDEX")
    project = tiny_project(tmp_path / "p")
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_CONFIG_DIRS", str(tmp_path / "no-xdg"))
    nothing = LocalIndex([], projects=())  # answers 404 for every name: stands in for PyPI and the private indexes
    mirror = LocalIndex([torch_wheel])
    tokens = ("QqMirrorPathTokenNoDigits", "UvTomlPathTokenNoDigits", "PipConfPathTokenNoDigits")
    with nothing.serving(), mirror.serving():
        monkeypatch.setenv("PIP_INDEX_URL", nothing.url)
        encoded = mirror.url_with(tokens[0]).replace(tokens[0], "%51" + tokens[0][1:])  # Q percent-encoded
        monkeypatch.setenv("KERNODECK_INDEX_CPU", encoded + "/")
        conf = _write(tmp_path / "conf" / "uv.toml",
                      f'[[index]]\nname = "corp"\nurl = "{nothing.url_with(tokens[1])}/"\n')
        monkeypatch.setenv("UV_CONFIG_FILE", str(conf))
        monkeypatch.delenv("PIP_CONFIG_FILE")
        _write(home / ".config" / "pip" / "pip.conf", f"[install]\nextra-index-url = {nothing.url_with(tokens[2])}\n")
        procs = [kd(project, "lock", "--resolver", resolver) for resolver in ("pip-tools", "uv")]
        procs.append(kd(project, "rebuild", "--fresh", "--installer", "uv"))
    for proc in procs:
        assert proc.returncode == 0, proc.stderr[-2000:]
    assert any(r.startswith("/files/kdtiny_torch") for r in mirror.requests)
    written = [*(project / "lockfiles").glob("*"), *(project / ".venv-rebuild").glob("*/current/kernodeck-*")]
    assert len(written) >= 4, written
    for token in (*tokens, "QqMirror", "%51qMirror"):
        for proc in procs:
            assert token not in proc.stdout + proc.stderr, token
        for path in written:  # the records, and the compiled in-env files (binary)
            assert token.encode() not in path.read_bytes(), (path.name, token)


VALUES = ["https://[bad/simple", "https://h.example:44x3/simple", "http://127.0.0.1:99999/x", "https:///x",
          "https://h.example/simple", "http://[::1]:8080/simple", "https://u:p@h.example:8443/s", "wheels", "/abs",
          "file:///srv/wheels", "file:/srv/index"]


def test_nox_sessions_check_the_same_variables_alike() -> None:
    """The session module (stdlib only, it runs before Kernodeck is installed) names the same source variables and
    judges a URL as kernodeck.sources does."""
    from kernodeck import noxsessions
    from kernodeck.sources import SOURCE_VARS, malformed

    assert set(noxsessions.SOURCE_URL_VARS) == set(SOURCE_VARS)
    for value in VALUES:
        bad = noxsessions.malformed_source_var({"PIP_EXTRA_INDEX_URL": value}) == "PIP_EXTRA_INDEX_URL"
        assert bad == bool("://" in value and malformed(value)), value


@pytest.mark.reliability(
    66,
    "PIP_EXTRA_INDEX_URL='https://[bad/simple' (then UV_INDEX with a port :44x3) for `nox -s matrix` in a project "
    "whose session venv is new: nox's `uv venv` or the session's tool install read it first (pip's ValueError "
    "traceback; uv's error quoting the value)",
    "one ERROR naming the variable, never its value, and a TIP when the noxfile loads, before any venv or install; "
    "exit 2; no traceback",
)
@pytest.mark.parametrize(("var", "value"), [("PIP_EXTRA_INDEX_URL", "https://[bad/simple"),
                                            ("UV_INDEX", "corp=https://idx.example.com:44x3/Sekr1t/simple")])
def test_malformed_source_through_nox(var: str, value: str, tmp_path: Path) -> None:
    import subprocess
    import sys

    from tests.helpers.project import copy_project

    project = copy_project(tmp_path / "p")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    env[var] = value
    proc = subprocess.run([sys.executable, "-m", "nox", "-s", "matrix"], cwd=project, env=env, text=True,
                          capture_output=True, timeout=300, check=False)
    console = proc.stdout + proc.stderr
    errors = [line for line in console.splitlines() if line.startswith("ERROR:")]
    assert proc.returncode == 2 and "Traceback" not in console, console[-2000:]
    assert len(errors) == 1 and var in errors[0] and "malformed URL" in errors[0], errors
    assert "[bad" not in console and "44x3" not in console and "Sekr1t" not in console
    assert not list((project / ".nox").glob("*/lib/python*/site-packages/packaging")), "tools were installed first"
