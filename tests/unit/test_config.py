"""``[tool.kernodeck]`` validated once, at load, against the JSON Schema shipped in the package (issue 19 item 6), and
a TOML syntax error as one ERROR naming the file, line and column (issue 25 item 6). Each found traceback first."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import tomlkit

from kernodeck import noxsessions
from kernodeck.errors import ConfigError
from kernodeck.project import init
from kernodeck.project.config import load_project, schema, validate
from tests.helpers.project import ROOT, copy_project, kd


def _tool(path: Path = ROOT / "pyproject.toml") -> dict[str, Any]:
    data: dict[str, Any] = tomllib.loads(path.read_text(encoding="utf-8"))["tool"]["kernodeck"]
    return data


def _project(tmp_path: Path, edit: Any) -> Path:
    """A folder whose pyproject.toml is this repository's with ``edit(tool_table)`` applied."""
    doc = tomlkit.parse((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    edit(doc["tool"]["kernodeck"])  # type: ignore[index]
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "pyproject.toml").write_text(tomlkit.dumps(doc), encoding="utf-8")
    return tmp_path


def _set(path: str, value: object) -> Any:
    def edit(tool: Any) -> None:
        *parents, last = path.split(".")
        node = tool
        for key in parents:
            node = node[int(key)] if key.isdigit() else node[key]
        if value is _DELETE:
            del node[last]
        else:
            node[last] = value
    return edit


_DELETE = object()

# (key path under [tool.kernodeck], bad value, what the ERROR must say)
BAD = [
    ("runs", 5, "tool.kernodeck.runs = 5: expected a string (a folder"),
    ("platforms.0.variant", ["cpu"], 'tool.kernodeck.platforms[0].variant = ["cpu"]: expected a string'),
    ("determinism", {"max-records": "all"}, 'tool.kernodeck.determinism.max-records = "all": expected a whole number'),
    ("platforms.0.python", 3.10, "tool.kernodeck.platforms[0].python = 3.1: expected a string"),
    ("platforms.0.lock-on-runner", "yes", 'lock-on-runner = "yes": expected true or false'),
    ("lockfiles", "", 'tool.kernodeck.lockfiles = "": expected a folder'),
    ("requirements", "requirements/base.in", "tool.kernodeck.requirements = \"requirements/base.in\": expected an "
     "array"),
    ("resume.steps", 1.5, "tool.kernodeck.resume.steps = 1.5: expected a whole number"),
    ("resume.gpu-tolerance", -1, "tool.kernodeck.resume.gpu-tolerance = -1: expected a number >= 0"),
    ("resume.step", 12, "tool.kernodeck.resume: unknown key step (known: steps, checkpoint-at, gpu-tolerance)"),
    ("lockfile", "x", "tool.kernodeck: unknown key lockfile"),
    ("default-variant.linux_x86_64", 1, "tool.kernodeck.default-variant.linux_x86_64 = 1: expected a string"),
    ("variants.cpu.backend", "gpu", 'tool.kernodeck.variants.cpu.backend = "gpu": expected one of "cpu", "cuda"'),
    ("variants.cpu.index", _DELETE, "tool.kernodeck.variants.cpu: index is missing: expected a string (an index URL"),
    ("variants.cpu.index", "download.pytorch.org/whl/cpu", "variants.cpu.index = \"download.pytorch.org/whl/cpu\": "
     "expected an index URL"),
    ("variants.cpu.index", "https://[bad/whl", "variants.cpu.index = \"https://[bad/whl\": a malformed URL"),
    ("variants.cpu.index", "https://h.example:44x3/whl", "a malformed URL (its port is not a number"),
    ("variants", {}, "tool.kernodeck.variants = {}: expected a table of accelerator variants"),
    ("application.entry", "checks/app.py", 'tool.kernodeck.application.entry = "checks/app.py": expected '
     '"path/to/file.py:function"'),
    ("application.code", "checks/app.py", "tool.kernodeck.application.code = \"checks/app.py\": expected an array"),
    ("application.params", [1], "tool.kernodeck.application.params = [1]: expected a table"),
    ("application.weights.package", _DELETE, "tool.kernodeck.application.weights: declare exactly one source of "
     "package, hf, url, path (found: none)"),
    # issue 31: weights and data sources that could float or are ambiguous
    ("application.weights", {"hf": "org/name", "revision": "main"},
     "tool.kernodeck.application.weights.revision 'main' can move: pin the 40-hex commit of org/name"),
    ("application.weights", {"url": "https://h.example/w.bin"}, "tool.kernodeck.application.weights.sha256: missing"),
    ("application.weights", {"url": "https://h.example/w.bin", "sha256": "A1"},
     "tool.kernodeck.application.weights.sha256: missing or not 64 lowercase hex"),
    ("application.weights", {"package": "p", "path": "/m"}, "declare exactly one source of package, hf, url, path "
     "(found: package, path)"),
    ("application.weights", {"path": "/m", "sha256": "0" * 64}, "tool.kernodeck.application.weights: unknown key "
     "sha256 for a path source"),
    ("application.weights", {"path": "/m", "revison": "x"}, "tool.kernodeck.application.weights: unknown key revison"),
    ("application.weights", {"url": "https://user:s3cretTok3n@h.example/w.bin", "sha256": "0" * 64},
     "https://h.example/w.bin carries credentials"),
    ("application.weights", {"hf": "org/name", "revision": "0" * 40, "token-env": "hf_abc 123"},
     "weights.token-env: expected the NAME of an environment variable"),
    ("application.data", {"eval": {"hf": "org/ds", "revision": "v1"}},
     "tool.kernodeck.application.data.eval.revision 'v1' can move"),
    ("application.data", {"bad name": {"path": "/d"}}, "tool.kernodeck.application.data: the name 'bad name'"),
    ("application.outputs", {}, "tool.kernodeck.application.outputs = {}: expected a table of named outputs"),
    ("application.outputs.embeddings.kind", "cos", 'embeddings.kind = "cos": expected one of "cosine"'),
    ("application.outputs.embeddings.max-abs", True, "embeddings.max-abs = true: expected a number"),
    ("application.outputs.embeddings.cosine-min", 2, "embeddings.cosine-min = 2: expected a number from -1 to 1"),
    ("application.outputs.embeddings.dtype", "float", 'embeddings.dtype = "float": expected a dtype name'),
    ("application.outputs.embeddings.justification", _DELETE, "embeddings: justification is missing"),
    ("application.outputs.embeddings.tolerance", 1, "embeddings: unknown key tolerance"),
    ("resolve-as-of", "latest", 'tool.kernodeck.resolve-as-of = "latest": expected a resolution date'),
    ("resolve-as-of", "2026-11", 'tool.kernodeck.resolve-as-of = "2026-11": expected a resolution date'),
    ("deadlines", {"application": 0}, "tool.kernodeck.deadlines.application = 0: expected a number of seconds > 0"),
    ("deadlines", {"stall": "60"}, 'tool.kernodeck.deadlines.stall = "60": expected a number'),
    ("deadlines", {"aplication": 60}, "tool.kernodeck.deadlines.aplication: not an in-env step nor stall"),
]


# ids the same in every process (a parallel run's workers must collect the same names): never an object's address
_IDS = [f"{p}={'(deleted)' if v is _DELETE else repr(v)}" for p, v, _ in BAD]


@pytest.mark.parametrize(("path", "value", "said"), BAD, ids=_IDS)
def test_each_schema_error_is_one_clear_line(path: str, value: object, said: str, tmp_path: Path) -> None:
    load_project(_project(tmp_path / "good", lambda tool: None))  # negative control: the unedited table loads
    folder = _project(tmp_path / "bad", _set(path, value))
    with pytest.raises(ConfigError) as caught:
        load_project(folder)
    message = str(caught.value)
    assert said in message, message
    assert "\n" not in message and str(folder / "pyproject.toml") in caught.value.tip, caught.value.tip


def test_a_file_index_is_valid(tmp_path: Path) -> None:
    load_project(_project(tmp_path, _set("variants.cpu.index", "file:///srv/local-index/simple")))


def test_output_names_and_variant_names_are_checked(tmp_path: Path) -> None:
    def bad_name(tool: Any) -> None:
        tool["application"]["outputs"]["my outputs"] = tool["application"]["outputs"]["embeddings"]
    with pytest.raises(ConfigError) as caught:
        load_project(_project(tmp_path, bad_name))
    assert "tool.kernodeck.application.outputs: the name 'my outputs' is not allowed" in str(caught.value)


@pytest.mark.parametrize("where", ["repository", "examples/digits", "init template"])
def test_shipped_tables_validate(where: str, tmp_path: Path) -> None:
    if where == "init template":
        text = init.render(init.template("pyproject.toml.tmpl"), init._values())
        tool = tomllib.loads(text)["tool"]["kernodeck"]
    else:
        tool = _tool(ROOT / "pyproject.toml" if where == "repository" else ROOT / where / "pyproject.toml")
    validate(tool, tmp_path / "pyproject.toml")


def test_schema_is_a_valid_draft7_schema_and_shipped() -> None:
    from jsonschema import Draft7Validator  # check-jsonschema's, in the test group

    Draft7Validator.check_schema(schema())
    assert Draft7Validator(schema()).is_valid(_tool())
    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "schema/*.json" in data["tool"]["setuptools"]["package-data"]["kernodeck.project"]  # in the wheel and sdist


def test_shipped_validator_is_the_schema_compiled() -> None:
    """project/_tool_schema.py is fastjsonschema's code for the shipped schema, regenerated after each edit (the
    failure says how); it imports no fastjsonschema, so neither Kernodeck nor a user's session venv needs it."""
    from tests.helpers.schema_code import CODE, render

    assert CODE.read_text(encoding="utf-8") == render(), "out of date: run python -m tests.helpers.schema_code"
    assert "import fastjsonschema" not in render() and "from fastjsonschema" not in render()


def test_schema_error_json_value_is_shown_as_toml_reads(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_project(_project(tmp_path, _set("runs", {"a": 1})))
    assert 'tool.kernodeck.runs = {"a": 1}: expected a string' in str(caught.value)
    assert json.loads(json.dumps(_tool()))  # the table is plain data


# --- a TOML syntax error --------------------------------------------------------------------------------------------


def _broken(project: Path) -> Path:
    path = project / "pyproject.toml"
    text = path.read_text(encoding="utf-8").replace('runs = "runs"', 'runs = "runs', 1)
    path.write_text(text, encoding="utf-8")
    return path


def test_toml_syntax_error_names_file_line_and_column(tmp_path: Path) -> None:
    project = copy_project(tmp_path / "p")
    load_project(project)
    path = _broken(project)
    line = next(n for n, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if 'runs = "runs' in text)
    with pytest.raises(ConfigError) as caught:
        load_project(project)
    assert f"{path}, line {line}, column" in str(caught.value) and "invalid TOML" in str(caught.value)
    with pytest.raises(SystemExit) as stopped:  # the noxfile's own read (noxsessions.load_pyproject)
        noxsessions.load_pyproject(str(path))
    assert stopped.value.code == 2


@pytest.mark.reliability(
    63,
    "`runs = 5`, `variant = [\"cpu\"]` in a platform, `[tool.kernodeck.determinism] max-records = \"all\"`, "
    "`python = 3.10` (a float), an index `https://[bad/whl` in pyproject.toml; then `kernodeck lock --check`",
    "one ERROR naming the key path, the value and what is expected, a TIP naming the file and the schema; exit 2; "
    "no traceback (each was a traceback before)",
)
@pytest.mark.parametrize(("path", "value"), [("runs", 5), ("platforms.0.variant", ["cpu"]),
                                             ("determinism", {"max-records": "all"}), ("platforms.0.python", 3.10),
                                             ("variants.cpu.index", "https://[bad/whl")])
def test_bad_value_is_one_error_from_the_command(path: str, value: object, tmp_path: Path) -> None:
    project = copy_project(tmp_path / "p")
    _set_file(project, path, value)
    proc = kd(project, "lock", "--check")
    errors = [line for line in proc.stderr.splitlines() if line.startswith("ERROR:")]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert len(errors) == 1 and f"tool.kernodeck.{path.split('.')[0]}" in errors[0], errors
    tip = next(line for line in proc.stderr.splitlines() if line.startswith("TIP:"))
    assert "pyproject.toml" in tip and ("tool-kernodeck.schema.json" in tip or "index" in path), tip


def _set_file(project: Path, path: str, value: object) -> None:
    doc = tomlkit.parse((project / "pyproject.toml").read_text(encoding="utf-8"))
    _set(path, value)(doc["tool"]["kernodeck"])  # type: ignore[index]
    (project / "pyproject.toml").write_text(tomlkit.dumps(doc), encoding="utf-8")


@pytest.mark.reliability(
    64,
    "a TOML syntax error in pyproject.toml (an unclosed string), then `nox -l`, `nox -s lock -- --check` and "
    "`python -m kernodeck verify`",
    "one ERROR naming the file, line and column and a TIP, exit 2, no traceback (nox showed the noxfile's traceback)",
)
def test_toml_syntax_error_through_nox_and_the_cli(tmp_path: Path) -> None:
    project = copy_project(tmp_path / "p")
    shutil_noxfile(project)
    path = _broken(project)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    runs = [subprocess.run([sys.executable, "-m", "nox", *args], cwd=project, env=env, text=True,
                           capture_output=True, timeout=120, check=False)
            for args in (["-l"], ["-s", "lock", "--", "--check"])]
    runs.append(kd(project, "verify"))
    for proc in runs:
        console = proc.stdout + proc.stderr
        errors = [line for line in console.splitlines() if line.startswith("ERROR:")]
        assert proc.returncode == 2 and "Traceback" not in console, console[-2000:]
        assert len(errors) == 1 and f"{path}, line " in errors[0] and ", column " in errors[0], errors
        assert any(line.startswith("TIP:") for line in console.splitlines())


def shutil_noxfile(project: Path) -> None:
    (project / "noxfile.py").write_text((ROOT / "noxfile.py").read_text(encoding="utf-8"), encoding="utf-8")



@pytest.mark.parametrize("value", ["2026-11-01", "2026-11-01T12:30:00Z"])
def test_a_resolve_as_of_date_is_valid(value: str, tmp_path: Path) -> None:
    assert load_project(_project(tmp_path, _set("resolve-as-of", value))).resolve_as_of == value
