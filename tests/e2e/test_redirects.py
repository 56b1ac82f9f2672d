"""What other tools read is valid as written (issue 34): the `matrix` and `export` commands docs/ci.md and
docs/containers.md show run
literally, through `nox`, in a copy of the project, and each file is checked by its consumer's own checker.

nox merges a command's stderr into its stdout unless the session says otherwise: a redirected matrix then began with
Kernodeck's "left out ..." lines. The commands run with `--locked-only`, which leaves platforms out (their lines on
stderr). nox runs with `--no-venv --no-install` (a `nox` on PATH that adds them): the session's tools are this test's
own, so no index is needed; the session body, nox's streams and the shell's redirect are the ones a user gets.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernodeck.ci import engines, matrix
from kernodeck.dossier import toolpins
from kernodeck.errors import ConfigError
from kernodeck.project.config import load_project
from tests.helpers.containerfiles import copy_lines, dockerignore_sends
from tests.helpers.project import ROOT, copy_project, kd

DOCS = (ROOT / "docs" / "ci.md", ROOT / "docs" / "containers.md")
BIN = Path(sys.executable).parent
LEFT_OUT = "kernodeck: matrix: left out"


def tool(name: str) -> str:
    path = BIN / name
    assert path.exists(), f"{name} is pinned in the test group (pyproject.toml)"
    return str(path)


def doc_commands(session: str) -> list[str]:
    """The lines of the ```sh blocks of docs/ci.md and docs/containers.md that run ``nox -s SESSION``, as written."""
    text = "\n".join(page.read_text(encoding="utf-8") for page in DOCS)
    blocks = re.findall(r"```sh\n(.*?)```", text, re.DOTALL)
    return [line.split("  #", 1)[0].strip() for block in blocks for line in block.splitlines()
            if line.startswith(f"nox -s {session} ")]


def run_doc_line(project: Path, line: str, shim: Path) -> subprocess.CompletedProcess[str]:
    """One documented line, by bash, in the project; `nox` is nox beside this Python, without a venv of its own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_", "NOX_")) and k != "VIRTUAL_ENV"}
    env["PATH"] = os.pathsep.join([str(shim), str(BIN), env.get("PATH", "")])
    return subprocess.run(["bash", "-c", line], cwd=project, env=env, capture_output=True, text=True, check=False,
                          timeout=300)


@pytest.fixture(scope="module")
def project(module_tmp: Path) -> Iterator[tuple[Path, Path]]:
    root = copy_project(module_tmp / "project")
    shutil.copytree(ROOT / ".github" / "requirements", root / ".github" / "requirements")
    shim = module_tmp / "shim"
    shim.mkdir()
    nox = shim / "nox"
    nox.write_text(f'#!/bin/bash\nexec {shlex.quote(sys.executable)} -m nox --no-venv --no-install "$@"\n',
                   encoding="utf-8")
    nox.chmod(0o755)
    yield root, shim


def gitlab_schema(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([tool("check-jsonschema"), "--builtin-schema", "vendor.gitlab-ci", "--data-transform",
                           "gitlab-ci", str(path)], capture_output=True, text=True, check=False, timeout=120)


def slurm_problems(path: Path) -> list[str]:
    """What sbatch and bash would refuse: no ``#!`` first line, a syntax error; and shellcheck's warnings."""
    problems = []
    if not path.read_text(encoding="utf-8").startswith("#!"):
        problems.append("the first line is not #! (sbatch refuses the script)")
    if subprocess.run(["bash", "-n", str(path)], capture_output=True, check=False).returncode != 0:
        problems.append("bash -n")
    lint = subprocess.run([tool("shellcheck"), "-S", "warning", str(path)], capture_output=True, text=True,
                          check=False)
    if lint.returncode != 0:
        problems.append(lint.stdout)
    return problems


def gitlab_script_problems(path: Path) -> list[str]:
    """shellcheck's warnings on each job's ``script:`` (the lines GitLab runs in the job's shell, sh here)."""
    from ruamel.yaml import YAML

    doc = YAML(typ="safe").load(path.read_text(encoding="utf-8"))
    problems = []
    for name, job in doc.items():
        if isinstance(job, dict) and "script" in job:
            script = path.with_name(f"{path.name}.{name}.sh")
            script.write_text("".join(f"{line}\n" for line in job["script"]), encoding="utf-8")
            lint = subprocess.run([tool("shellcheck"), "-s", "sh", "-S", "warning", str(script)], capture_output=True,
                                  text=True, check=False)
            if lint.returncode != 0:
                problems.append(lint.stdout)
    return problems


def github_problems(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return [f"not JSON: {exc}"]
    return [] if len(text.splitlines()) == 1 and data.get("include") else ["not one line with include"]


def test_docs_show_a_redirect_of_every_matrix_format() -> None:
    lines = doc_commands("matrix")
    formats = {re.search(r"--format (\w+)", line).group(1) if "--format" in line else "github"  # type: ignore[union-attr]
               for line in lines if " > " in line}
    assert formats == {f.value for f in engines.Format}, lines


def test_every_documented_matrix_redirect_gives_a_file_its_consumer_accepts(project: tuple[Path, Path]) -> None:
    root, shim = project
    locked = matrix.build(load_project(root), locked_only=True)["include"]
    every = matrix.build(load_project(root))["include"]
    assert len(locked) < len(every), "some platforms are left out (no committed lock)"
    for line in (line for line in doc_commands("matrix") if " > " in line):
        target = root / line.rsplit(" > ", 1)[1].strip()
        proc = run_doc_line(root, line, shim)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert LEFT_OUT in proc.stderr, "the left-out lines still reach the user, on stderr"
        text = target.read_text(encoding="utf-8")
        assert LEFT_OUT not in text and "nox >" not in text, line
        if "--format gitlab" in line:
            checked = gitlab_schema(target)
            assert checked.returncode == 0, checked.stdout + checked.stderr
            assert text == engines.gitlab(matrix.build(load_project(root), locked_only=True))
            assert gitlab_script_problems(target) == []
        elif "--format slurm" in line:
            assert slurm_problems(target) == [], line
        else:
            assert github_problems(target) == [], line
            assert [e["platform"] for e in json.loads(text)["include"]] == [e["platform"] for e in locked]


def test_the_consumers_refuse_a_file_with_a_merged_diagnostic(project: tuple[Path, Path], tmp_path: Path) -> None:
    """Negative controls: the same redirects with nox merging stderr (the session's stream arguments removed in a
    copy) give files every checker refuses."""
    root, shim = project
    merged = tmp_path / "merged"
    shutil.copytree(root, merged, ignore=shutil.ignore_patterns(".nox", "runs"))
    sessions = merged / "kernodeck" / "noxsessions.py"
    text = sessions.read_text(encoding="utf-8")
    fixed = 'DATA_ON_STDOUT = frozenset({"matrix", "export"})'
    assert fixed in text
    sessions.write_text(text.replace(fixed, "DATA_ON_STDOUT = frozenset()"), encoding="utf-8")
    for line in (line for line in doc_commands("matrix") if " > " in line):
        assert run_doc_line(merged, line, shim).returncode == 0
        target = merged / line.rsplit(" > ", 1)[1].strip()
        assert target.read_text(encoding="utf-8").startswith(LEFT_OUT), line
        if "--format gitlab" in line:
            assert gitlab_schema(target).returncode != 0
        elif "--format slurm" in line:
            assert "the first line is not #! (sbatch refuses the script)" in slurm_problems(target)
        else:
            assert github_problems(target)[0].startswith("not JSON")


def test_stderr_is_left_apart_only_for_data_sessions() -> None:
    from kernodeck import noxsessions

    assert {s.name for s in noxsessions.SESSIONS} >= noxsessions.DATA_ON_STDOUT
    assert noxsessions.stderr_for("matrix") is None and noxsessions.stderr_for("export") is None
    assert noxsessions.stderr_for("verify") == subprocess.STDOUT  # nox's default: merged


# --- export ----------------------------------------------------------------------------------------------------------


def _shellcheck_apptainer(root: Path, definition: str) -> None:
    """Each script of an Apptainer definition clean under shellcheck (as /bin/sh runs it)."""
    for name, script in apptainer_scripts(definition).items():
        path = root / "runs" / f"apptainer-{name}.sh"
        path.write_text(script, encoding="utf-8")
        checked = subprocess.run([tool("shellcheck"), "-s", "sh", "-S", "warning", str(path)], capture_output=True,
                                 text=True, check=False)
        assert checked.returncode == 0, checked.stdout


def apptainer_scripts(text: str) -> dict[str, str]:
    """%post and %runscript of an Apptainer definition, as the shell scripts Apptainer runs (by /bin/sh)."""
    out: dict[str, str] = {}
    for name in ("post", "runscript"):
        body = text.split(f"%{name}\n", 1)[1].split("\n%", 1)[0]
        out[name] = "".join(line[4:] + "\n" for line in body.splitlines() if line.strip())
    return out


def test_documented_exports_are_lean_pinnable_hadolint_and_shellcheck_clean(project: tuple[Path, Path]) -> None:
    root, shim = project
    lines = doc_commands("export")
    assert {re.search(r"--format (\w+)", line).group(1) for line in lines} == {"dockerfile", "apptainer"}  # type: ignore[union-attr]
    for line in lines:
        proc = run_doc_line(root, line, shim)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert proc.stdout.startswith("wrote ") and "nox >" not in proc.stdout
    out = root / "runs" / "export"
    dockerfile = (out / "Dockerfile").read_text(encoding="utf-8")
    lint = subprocess.run([tool("hadolint"), "--no-color", "--failure-threshold", "warning", str(out / "Dockerfile")],
                          capture_output=True, text=True, check=False)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    assert not re.search(r"^FROM --platform", dockerfile, re.MULTILINE)
    assert "# base image: python:3.11-slim is a floating tag" in dockerfile
    copied = [src for src, _dest in copy_lines(dockerfile)]
    assert copied[0] == "runs/export/kernodeck-tools.txt"
    assert set(copied[1:]) == {"pyproject.toml", "noxfile.py", "requirements", "lockfiles", "dossier/reference",
                               "checks", "kernodeck"}, copied
    assert all((root / src).exists() for src in copied)
    ignore = (out / "Dockerfile.dockerignore").read_text(encoding="utf-8")
    assert ignore.splitlines()[1] == "*" and all(dockerignore_sends(ignore, src) for src in copied)
    assert not any(dockerignore_sends(ignore, other) for other in ("tests", "docs", "runs/x", ".git", "README.md"))
    runs = [args for word, args in _instructions(dockerfile) if word == "RUN"]
    assert "--require-hashes -r /opt/kernodeck-tools.txt" in runs[0]
    assert all("pip install" not in r or "--require-hashes" in r for r in runs)
    pins = toolpins.requirements((out / "kernodeck-tools.txt").read_text(encoding="utf-8"))
    assert {n for n, (_v, hashes) in pins.items() if hashes} == {"packaging", "tomlkit", "filelock", "uv", "pyelftools"}
    definition = (out / "kernodeck.def").read_text(encoding="utf-8")
    _shellcheck_apptainer(root, definition)


def _instructions(text: str) -> list[tuple[str, str]]:
    """(instruction, arguments) of a Dockerfile export writes (no continuation lines), comments left out."""
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("#")]
    return [(word, rest) for word, _, rest in (line.partition(" ") for line in lines)]


def test_hadolint_and_shellcheck_find_what_they_must(tmp_path: Path) -> None:
    """Negative controls: hadolint flags the old FROM --platform=... (DL3029) and the old shell-form COPY of a name
    with a space (DL3021: more than two arguments); shellcheck flags a bare `cd`."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM --platform=linux/amd64 python:3.11-slim\nCMD [\"python\"]\n", encoding="utf-8")
    lint = subprocess.run([tool("hadolint"), "--no-color", "--failure-threshold", "warning", str(bad)],
                          capture_output=True, text=True, check=False)
    assert lint.returncode != 0 and "DL3029" in lint.stdout
    bare = tmp_path / "Dockerfile.bare"  # the shell-form COPY export wrote before: a space makes more arguments
    bare.write_text("FROM python:3.11-slim\nWORKDIR /project\nCOPY my data/labels #1.txt /project/my data/labels "
                    "#1.txt\nCMD [\"python\"]\n", encoding="utf-8")
    lint = subprocess.run([tool("hadolint"), "--no-color", "--failure-threshold", "warning", str(bare)],
                          capture_output=True, text=True, check=False)
    assert lint.returncode != 0 and "DL3021" in lint.stdout
    script = tmp_path / "run.sh"
    script.write_text('out="$PWD/x"\ncd /project\nexec echo "$out"\n', encoding="utf-8")
    assert subprocess.run([tool("shellcheck"), "-s", "sh", "-S", "warning", str(script)], capture_output=True,
                          check=False).returncode != 0


def _declaring_odd_names(root: Path) -> Path:
    """This project with two declared files whose names hold a space, a ``#``, a quote and a ``[``."""
    for rel in ("my data/labels #1.txt", "it's [1].txt"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("x\n", encoding="utf-8")
    pyproject = root / "pyproject.toml"
    anchor = 'code = ["checks/app.py"]\n'
    pyproject.write_text(pyproject.read_text(encoding="utf-8").replace(
        anchor, anchor + 'files = ["my data/labels #1.txt", "it\'s [[]1].txt"]\n'), encoding="utf-8")
    return root


def test_an_export_of_odd_names_is_hadolint_and_shellcheck_clean(tmp_path: Path) -> None:
    """Declared names with a space, a ``#``, a quote and a ``[``: the exported Dockerfile (JSON-array COPY lines) is
    hadolint-clean and copies them back as themselves; the Apptainer scripts stay shellcheck-clean."""
    root = _declaring_odd_names(copy_project(tmp_path / "project"))
    shutil.copytree(ROOT / ".github" / "requirements", root / ".github" / "requirements")
    for fmt in ("dockerfile", "apptainer"):
        proc = kd(root, "export", "--format", fmt, "--out", "runs/export")
        assert proc.returncode == 0, proc.stderr
    dockerfile = root / "runs" / "export" / "Dockerfile"
    lint = subprocess.run([tool("hadolint"), "--no-color", "--failure-threshold", "warning", str(dockerfile)],
                          capture_output=True, text=True, check=False)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    assert {"my data", "it's [1].txt"} <= {src for src, _dest in copy_lines(dockerfile.read_text(encoding="utf-8"))}
    definition = (root / "runs" / "export" / "kernodeck.def").read_text(encoding="utf-8")
    _shellcheck_apptainer(root, definition)


def test_the_documented_hashin_command_is_the_one_export_asks_for(project: tuple[Path, Path]) -> None:
    """The tools file of this repository is current with its run group, and the command docs/containers.md and the
    file's header show to make it is the one export's TIP gives when the file is missing."""
    root, _shim = project
    committed = ROOT / ".github" / "requirements" / "run.txt"
    toolpins.hashed_file(load_project(ROOT))  # raises when the run group and the file drift apart
    copy = root.parent / "no-tools-file"
    copy_project(copy)
    with pytest.raises(ConfigError) as caught:
        toolpins.hashed_file(load_project(copy))
    tip = caught.value.tip
    make = tip.rsplit(" && ", 1)[1]
    assert make.startswith("python -m hashin -r .github/requirements/run.txt ")
    assert f"`{tip}`" in " ".join(DOCS[1].read_text(encoding="utf-8").split())
    assert f"Made with: {make}\n" in committed.read_text(encoding="utf-8")


@pytest.mark.network
def test_the_tip_makes_the_tools_file_export_accepts(tmp_path: Path) -> None:
    """The missing-file TIP, run as written (hashin asks PyPI), makes the file this repository commits."""
    root = copy_project(tmp_path / "project")
    with pytest.raises(ConfigError) as caught:
        toolpins.hashed_file(load_project(root))
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env["PATH"] = os.pathsep.join([str(BIN), env.get("PATH", "")])
    proc = subprocess.run(["bash", "-c", caught.value.tip], cwd=root, env=env, capture_output=True, text=True,
                          check=False, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    made = toolpins.requirements(toolpins.hashed_file(load_project(root)))
    committed = toolpins.requirements((ROOT / ".github" / "requirements" / "run.txt").read_text(encoding="utf-8"))
    assert made == committed
    hashes = [set(re.findall(r"sha256:[0-9a-f]{64}", path.read_text(encoding="utf-8")))
              for path in (root / ".github/requirements/run.txt", ROOT / ".github/requirements/run.txt")]
    assert hashes[0] == hashes[1]


def _image_project(root: Path, dockerfile: str, dest: Path, *, drop: str = "") -> Path:
    """The image's /project as the Dockerfile's COPY lines make it from the build context (the project)."""
    for src, target in copy_lines(dockerfile):
        if not target.startswith("/project/") or src == drop:
            continue
        out = dest / target.removeprefix("/project/")
        out.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if (root / src).is_dir() else shutil.copy2)(root / src, out)
    return dest


def test_the_lean_image_holds_what_the_lock_check_reads(project: tuple[Path, Path], tmp_path: Path) -> None:
    """verify's first step, the lock check, passes in the image's /project as the COPY list makes it; without the
    lock inputs' folder it fails (negative control: the check can see a missing input)."""
    root, shim = project
    line = next(line for line in doc_commands("export") if "dockerfile" in line)
    assert run_doc_line(root, line, shim).returncode == 0
    dockerfile = (root / "runs" / "export" / "Dockerfile").read_text(encoding="utf-8")
    lean = _image_project(root, dockerfile, tmp_path / "lean")
    assert not {"tests", "docs", "examples", "bench", "runs", ".github"} & {p.name for p in lean.iterdir()}
    checked = kd(lean, "lock", "--check", "--platform", "cp311-linux_x86_64-cpu")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    missing = _image_project(root, dockerfile, tmp_path / "missing", drop="requirements")
    refused = kd(missing, "lock", "--check", "--platform", "cp311-linux_x86_64-cpu")
    assert refused.returncode != 0 and "requirements/base.in does not exist" in refused.stderr, refused.stderr


@pytest.mark.slow
def test_verify_passes_in_the_image_layout_and_records_the_base_image(
    built_project: Path, project: tuple[Path, Path], tmp_path: Path
) -> None:
    """What the container runs, without Docker: its CMD's verify, in /project as the COPY list makes it, on the env
    the lock installs (the suite's rebuilt one), with the ENV the Dockerfile sets; the dossier's system chain names
    the pinned base image."""
    root, shim = project
    digest = "sha256:" + "5" * 64
    line = next(line for line in doc_commands("export") if "dockerfile" in line)
    assert run_doc_line(root, f"{line} --base-image python:3.11-slim@{digest}", shim).returncode == 0
    dockerfile = (root / "runs" / "export" / "Dockerfile").read_text(encoding="utf-8")
    env_line = next(args for word, args in _instructions(dockerfile) if word == "ENV")
    image = dict(shlex.split(item)[0].split("=", 1) for item in env_line.split())["KERNODECK_BASE_IMAGE"]
    assert image == f"python:3.11-slim@{digest}"
    cmd = json.loads(next(args for word, args in _instructions(dockerfile) if word == "CMD"))
    python = built_project / ".venv-rebuild" / "cp311-linux_x86_64-cpu" / "current" / "bin" / "python"
    argv = [a if a != "/project/.venv-rebuild/bin/python" else str(python) for a in cmd[3:]]  # after -m kernodeck
    lean = _image_project(root, dockerfile, tmp_path / "project")
    env = {**os.environ, "KERNODECK_BASE_IMAGE": image}
    proc = kd(lean, *argv, env=env)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    dossier = lean / argv[argv.index("--out") + 1]
    system = json.loads((dossier / "system.json").read_text(encoding="utf-8"))
    assert system["container_image"] == {"reference": image, "pinned_by_digest": True, "digest": digest}
