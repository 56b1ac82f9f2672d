"""`nox -s export`: a Dockerfile and an Apptainer definition of a platform's env, checked without building anything.

No Docker or Apptainer here: the files are parsed into their instructions and sections, and the install commands
they hold must be the very commands procedure.md records for a replay by hand. hadolint and shellcheck run on the
documented exports in tests/e2e/test_redirects.py.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from kernodeck.dossier import export
from kernodeck.errors import ConfigError
from kernodeck.project.config import load_project
from kernodeck.project.platforms import resolve_platform
from kernodeck.runformat import review
from kernodeck.verify.context import Options
from kernodeck.verify.writer import index_procedure
from tests.helpers.containerfiles import apptainer_files, copy_lines
from tests.helpers.project import ROOT, copy_project, kd

INSTRUCTIONS = {"FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT", "VOLUME", "USER",
                "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK", "SHELL"}


def parse_dockerfile(text: str) -> list[tuple[str, str]]:
    """(instruction, arguments) per instruction; comments and blank lines dropped, continuation lines joined.
    Raises ValueError on a line that is no Dockerfile instruction."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in text.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        pending += line.rstrip("\\") + (" " if line.endswith("\\") else "")
        if line.endswith("\\"):
            continue
        word, _, rest = pending.strip().partition(" ")
        if word.upper() not in INSTRUCTIONS or word != word.upper():
            raise ValueError(f"not a Dockerfile instruction: {pending!r}")
        out.append((word, rest.strip()))
        pending = ""
    if pending:
        raise ValueError("a continuation line ends the file")
    return out


def parse_apptainer(text: str) -> tuple[dict[str, str], dict[str, list[str]]]:
    """The header (``Bootstrap:``, ``From:``) and each ``%section``'s lines (stripped)."""
    header: dict[str, str] = {}
    sections: dict[str, list[str]] = {}
    current: str | None = None
    for line in text.splitlines():
        if line.startswith("%"):
            current = line[1:].strip()
            if current in sections:
                raise ValueError(f"section %{current} twice")
            sections[current] = []
        elif current is None:
            if line.strip() and not line.startswith("#"):
                key, sep, value = line.partition(":")
                if not sep:
                    raise ValueError(f"not a header line: {line!r}")
                header[key.strip()] = value.strip()
        elif line.strip():
            if not line.startswith("    "):
                raise ValueError(f"section line not indented: {line!r}")
            sections[current].append(line.strip())
    return header, sections


def recorded_install(project_root: Path, plat_id: str) -> list[str]:
    """The pip-alone install procedure.md records for this platform (verify's own call, its own index text)."""
    project = load_project(project_root)
    plat = resolve_platform(project, plat_id)
    text = review.procedure([], "runner", {}, "uv", f"lockfiles/{plat.lock_name}", plat.id, False,
                             **index_procedure(plat, Options()))
    block = text.split("uv installed the packages.", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if "pip freeze" not in line]


def test_dockerfile_installs_the_lock_as_procedure_md_records_and_verifies(tmp_path: Path) -> None:
    project = copy_project(tmp_path / "project")
    shutil.copytree(ROOT / ".github" / "requirements", project / ".github" / "requirements")
    plat_id = "cp311-linux_x86_64-cpu"
    proc = kd(project, "export", "--format", "dockerfile", "--platform", plat_id, "--out", "runs/out")
    assert proc.returncode == 0, proc.stderr
    instructions = parse_dockerfile((project / "runs" / "out" / "Dockerfile").read_text(encoding="utf-8"))
    words = [w for w, _ in instructions]
    assert words[0] == "FROM" and instructions[0][1] == "python:3.11-slim"
    for src, dest in copy_lines((project / "runs" / "out" / "Dockerfile").read_text(encoding="utf-8")):
        assert (project / src).exists()
        assert dest == ("/opt/kernodeck-tools.txt" if src == "runs/out/kernodeck-tools.txt" else f"/project/{src}")
    runs = [args for word, args in instructions if word == "RUN"]
    expected = recorded_install(project, plat_id)
    assert "--require-hashes" in expected[1] and "-r lockfiles/cp311-linux_x86_64-cpu.txt" in expected[1]
    assert runs[1:4] == expected, "the container installs exactly as procedure.md records"
    cmd = json.loads(dict(instructions)["CMD"])
    assert cmd[1:4] == ["-m", "kernodeck", "verify"] and "--strict" in cmd
    assert cmd[cmd.index("--python") + 1] == "/project/.venv-rebuild/bin/python"
    assert cmd[cmd.index("--platform") + 1] == plat_id
    assert words.index("WORKDIR") < words.index("COPY") < words.index("RUN") < words.index("CMD")


def test_apptainer_definition_installs_the_same_commands(tmp_path: Path) -> None:
    project = load_project(ROOT)
    plat = resolve_platform(project, "cp311-linux_x86_64-cu130")
    path = export.write(export.Format.APPTAINER, project, plat, tmp_path)
    header, sections = parse_apptainer(path.read_text(encoding="utf-8"))
    assert header == {"Bootstrap": "docker", "From": "python:3.11-slim"}
    assert f"{tmp_path / 'kernodeck-tools.txt'} /opt/kernodeck-tools.txt" in sections["files"]
    assert {"files", "post", "runscript", "labels", "help", "environment"} <= set(sections)
    post = sections["post"]
    expected = recorded_install(ROOT, plat.id)
    assert post[post.index("cd /project") + 1:][:3] == expected
    assert "--extra-index-url" not in expected[1], "cu130's torch comes from PyPI: no other index"
    for src, dest in apptainer_files(path.read_text(encoding="utf-8"))[1:]:
        assert (ROOT / src).exists() and dest == f"/project/{src}"
    run = sections["runscript"][-1]
    assert run.startswith("exec /opt/kernodeck/bin/python -m kernodeck verify --platform cp311-linux_x86_64-cu130")
    assert "--python /project/.venv-rebuild/bin/python" in run
    assert "--nv" in " ".join(sections["help"])


def test_the_checks_fail_on_a_file_that_drifts_from_procedure_md(tmp_path: Path) -> None:
    """Negative controls: an install without --require-hashes no longer matches procedure.md; a broken line is no
    Dockerfile; an unindented section line is no Apptainer definition."""
    project = load_project(ROOT)
    plat = resolve_platform(project, "cp311-linux_x86_64-cpu")
    text = export.dockerfile(project, plat, "runs/export/kernodeck-tools.txt")
    runs = [a for w, a in parse_dockerfile(text.replace(" --require-hashes", "")) if w == "RUN"]
    assert runs[:3] != recorded_install(ROOT, plat.id)
    with pytest.raises(ValueError, match="not a Dockerfile instruction"):
        parse_dockerfile(text.replace("RUN python3 -m venv", "run-it python3 -m venv", 1))
    with pytest.raises(ValueError, match="not indented"):
        parse_apptainer(export.apptainer(project, plat, "/x/kernodeck-tools.txt").replace("    cd /project",
                                                                                           "cd /project", 1))


def test_every_format_and_the_refusals(tmp_path: Path) -> None:
    project = load_project(ROOT)
    copy = load_project(copy_project(tmp_path / "project"))
    (copy.root / ".github").mkdir()
    shutil.copytree(ROOT / ".github" / "requirements", copy.root / ".github" / "requirements")
    for fmt in export.Format:
        plat = resolve_platform(copy, "cp311-linux_x86_64-cpu")
        assert export.write(fmt, copy, plat, copy.runs / fmt.value).name == export.FILE_NAMES[fmt]
    with pytest.raises(ConfigError, match="a container is Linux"):
        export.dockerfile(project, resolve_platform(project, "cp311-macosx_arm64-mps"), "t.txt")
    with pytest.raises(ConfigError, match="outside the project: Docker's build context"):
        export.write(export.Format.DOCKERFILE, project, resolve_platform(project, "cp311-linux_x86_64-cpu"),
                     tmp_path / "outside")
    with pytest.raises(ConfigError, match="no committed lock"):
        export.write(export.Format.DOCKERFILE, project, resolve_platform(project, "cp311-linux_x86_64-rocm64"),
                     tmp_path / "rocm")


def test_cli_refuses_an_out_inside_the_project(tmp_path: Path) -> None:
    project = copy_project(tmp_path / "project")
    proc = kd(project, "export", "--out", str(project / "lockfiles"))
    assert proc.returncode != 0 and "ERROR:" in proc.stderr and "TIP:" in proc.stderr
    assert not (project / "lockfiles" / "Dockerfile").exists()


def test_cli_refuses_a_path_with_no_form_in_one_error_and_a_tip(tmp_path: Path) -> None:
    """A declared file named with a ``%``: ``export --format apptainer`` says so in one ERROR line naming it and a
    TIP, and writes nothing; the control: the Dockerfile export of the same project is written."""
    project = copy_project(tmp_path / "project")
    shutil.copytree(ROOT / ".github" / "requirements", project / ".github" / "requirements")
    (project / "50% off.txt").write_text("x\n", encoding="utf-8")
    pyproject = project / "pyproject.toml"
    anchor = 'code = ["checks/app.py"]\n'
    pyproject.write_text(pyproject.read_text(encoding="utf-8").replace(anchor, anchor + 'files = ["50% off.txt"]\n'),
                         encoding="utf-8")
    proc = kd(project, "export", "--format", "apptainer", "--out", "runs/app")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0 and len(lines) == 2, proc.stderr
    assert lines[0].startswith("ERROR: ") and "'50% off.txt'" in lines[0] and "Apptainer" in lines[0]
    assert lines[1] == "TIP: nox -s export -- --format apptainer --out runs/export"
    assert not (project / "runs" / "app").exists()
    assert kd(project, "export", "--format", "dockerfile", "--out", "runs/docker").returncode == 0


def test_no_machine_source_in_the_files() -> None:
    project = load_project(ROOT)
    plat = resolve_platform(project, "cp311-linux_x86_64-cpu")
    for fmt in export.Format:
        urls = re.findall(r"https?://\S+", export.render(fmt, project, plat, "t.txt"))
        assert urls == ["https://download.pytorch.org/whl/cpu"], urls
