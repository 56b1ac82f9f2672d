"""Every command block in README.md and docs/*.md is run, or marked and checked (the scheme: docs/README.md,
"Command blocks").

A fenced block is a command block when its info string is a shell (`sh`, `bash`, `shell`, `console`) or when, with
no info string, one of its lines starts with a command (`nox`, `python`, `pip`, `kernodeck`, `cd`, ...). The words
after the language mark it:

- none: the block runs as written here (placeholders filled from :data:`PLACEHOLDERS`), in a copy of this project;
  every command must exit 0.
- ``runs=FILE[,FILE]``: each command is run literally by those test modules: one of their calls holds the same argv
  (``nox -s X -- ARGS`` is ``python -m kernodeck X ARGS``; an expression in the test stands for a placeholder or a
  path the test makes; a test may add ``--out DIR`` after the argv, the folder it reads the dossier from).
- ``synopsis``: a syntax line (``[--platform ID]``): every option it names is one of that command's options.
- ``needs=WHAT[,WHAT]`` (network, gpu, docker, apptainer, gitlab, slurm): it cannot run here; :data:`CHECKS` says how
  it is checked instead (the file it produces, a validator, a dry run), and a block marked so without a check fails.

A command block without a language is refused: give it ``sh`` so that it can carry its mark.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from kernodeck import docpage
from kernodeck.cli import dispatch
from kernodeck.noxsessions import SESSIONS

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "examples").glob("*/README.md"))]
SHELLS = {"sh", "bash", "shell", "console"}
NEEDS = {"network", "gpu", "docker", "apptainer", "gitlab", "slurm"}
FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```", re.M | re.S)
STARTS = re.compile(r"^(?:[A-Z_][A-Z0-9_]*=\S+\s+)*(nox|pipx|uvx|python3?|pip|uv|kernodeck|cd|git|docker|apptainer|"
                    r"sbatch)(?:\s|$)")
# What a documented placeholder stands for when a block is run here (and what a test's expression may stand for).
PLACEHOLDERS: dict[str, str] = {
    "/path/to/kernodeck": str(ROOT),
    "OLD_LOCK": "lockfiles/cp311-linux_x86_64-cpu.txt",
    "NEW_LOCK": "lockfiles/cp311-linux_x86_64-cpu.txt",
    "ID": "cp311-linux_x86_64-cpu",
    "DATE": "2026-11-01",
    "DIR": "runs/doc-block",
}
_WILD = object()  # an expression in a test: any one token
_STAR = object()  # a starred expression in a test: one or more positional tokens


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    lang: str
    marks: dict[str, str]
    text: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    def commands(self) -> list[str]:
        """Each command of the block: continuation lines joined, comments dropped, ``&&`` chains split."""
        joined = re.sub(r"\\\n\s*", " ", self.text)
        out = []
        for line in joined.splitlines():
            line = line.split(" #", 1)[0].strip() if not line.lstrip().startswith("#") else ""
            out += [part.strip() for part in line.split("&&") if part.strip()]
        return out


def blocks(page: Path) -> list[Block]:
    """The command blocks of a page (other fenced blocks, output or configuration, are not commands)."""
    text = page.read_text(encoding="utf-8")
    found = []
    for match in FENCE.finditer(text):
        info, body = match.group(1).split(), match.group(2)
        lang = info[0] if info else ""
        if lang not in SHELLS and (lang or not any(STARTS.match(line) for line in body.splitlines())):
            continue
        marks = dict(word.split("=", 1) if "=" in word else (word, "") for word in info[1:])
        found.append(Block(page, text[:match.start()].count("\n") + 1, lang, marks, body))
    return found


def argv(command: str) -> list[str]:
    """A documented command as Kernodeck's argv (``nox -s X -- A`` and ``python -m kernodeck X A`` are ``X A``);
    other programs as they are. Environment assignments before it are dropped."""
    words = shlex.split(command)
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):
        words.pop(0)
    for prefix in (["pipx", "run", "nox"], ["uvx", "nox"], ["nox"]):
        if words[:len(prefix)] == prefix and words[len(prefix):len(prefix) + 1] == ["-s"]:
            rest = words[len(prefix) + 1:]
            return [rest[0], *[w for i, w in enumerate(rest[1:]) if not (i == 0 and w == "--")]]
    for prefix in (["python", "-m", "kernodeck"], ["python3", "-m", "kernodeck"], ["kernodeck"]):
        if words[:len(prefix)] == prefix:
            return words[len(prefix):]
    return words


# --- runs=: the literal argv in a test module ---------------------------------------------------------------------


def _tokens(node: ast.expr) -> list[object]:
    if isinstance(node, ast.List | ast.Tuple):
        return [t for e in node.elts for t in _tokens(e)]
    if isinstance(node, ast.Starred):
        return [_STAR]
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    return [_WILD]


def calls_in(module: Path) -> list[list[object]]:
    """Every call's positional arguments in a test module, as Kernodeck argvs where they are one."""
    commands = set(dispatch.ORDER) | {s.name for s in SESSIONS} | {"pip", "git"}
    calls = []
    for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call):
            continue
        tokens = [t for arg in node.args for t in _tokens(arg)]
        start = next((i for i, t in enumerate(tokens) if isinstance(t, str) and t in commands), None)
        if start is None:
            continue
        seq = tokens[start:]
        if start >= 2 and tokens[start - 2:start] == ["nox", "-s"] and seq[1:2] == ["--"]:
            seq = [seq[0], *seq[2:]]
        calls.append(seq)
    return calls


def _matches(doc: list[str], call: list[object]) -> bool:
    """Whether a test's call runs the documented argv: literal equal to literal; an expression stands for a
    placeholder or a path; a starred one for one or more positional tokens; ``--out X`` may follow."""
    if not call:
        return not doc
    head = call[0]
    if head is _STAR:
        taken = 0
        while taken < len(doc) and not doc[taken].startswith("-"):
            taken += 1
            if _matches(doc[taken:], call[1:]):
                return True
        return False
    if not doc:
        return len(call) == 2 and call[0] == "--out"  # the test's own dossier folder
    if head is _WILD:
        return not doc[0].startswith("-") and _matches(doc[1:], call[1:])
    return head == doc[0] and _matches(doc[1:], call[1:])


def runs_literally(command: str, modules: list[Path]) -> bool:
    wanted = argv(command)
    return any(_matches(wanted, call) for module in modules for call in calls_in(module))


# --- synopsis: every option named is the command's --------------------------------------------------------------


def synopsis_problems(command: str) -> list[str]:
    words = argv(command)
    chooser = docpage._subparsers(dispatch.build_parser())
    if not words or words[0] not in chooser:
        return [f"{command!r}: no command {words[:1]}"]
    known = {flag for action in chooser[words[0]]._actions for flag in action.option_strings}
    return [f"{words[0]} has no option {flag}" for flag in re.findall(r"(--[a-z][a-z0-9-]*)", command)
            if flag not in known]


# --- needs=: how a block that cannot run here is checked --------------------------------------------------------


def _sessions_exist(block: Block) -> list[str]:
    """pipx/uvx fetch nox from the network; what can be checked here: each session named exists (a dry run)."""
    own = {name for name, _ in docpage.own_sessions()} | {s.name for s in SESSIONS}
    return [f"no session {argv(c)[0]}" for c in block.commands() if argv(c)[0] not in own]


def _bootstrap_pins_what_ci_pins(block: Block) -> list[str]:
    """pip downloads nox: the version the block pins is the one CI's bootstrap (.ci/run) and pyproject pin, and the
    session it runs exists. (tests/e2e/test_nox312.py, slow, runs README's line verbatim with a loopback index in
    place of the network: it must still read it from README.)"""
    pins = set(re.findall(r"nox==([0-9.]+)", block.text))
    ci = set(re.findall(r"nox==([0-9.]+)", (ROOT / ".ci" / "run").read_text(encoding="utf-8")))
    project = set(re.findall(r"nox==([0-9.]+)", (ROOT / "pyproject.toml").read_text(encoding="utf-8")))
    problems = [] if pins and pins == ci == project else [f"nox pins differ: block {pins}, .ci/run {ci}, {project}"]
    session = block.text.rsplit("nox -s ", 1)[1].split()[0]
    own = {name for name, _ in docpage.own_sessions()} | {s.name for s in SESSIONS}
    verbatim = "readme_fallback()" in (ROOT / "tests" / "e2e" / "test_nox312.py").read_text(encoding="utf-8")
    return problems + ([] if session in own else [f"no session {session}"]) + (
        [] if verbatim else ["tests/e2e/test_nox312.py no longer runs README's line"])


def _fetches_the_declared_snapshot(block: Block) -> list[str]:
    """huggingface-cli downloads from the Hub: what can be checked here: the command is the one Kernodeck derives from
    the declaration of the project the page is in (the command its reference and procedure.md record)."""
    import tomllib

    from kernodeck.project import assets

    tool = tomllib.loads((block.page.parent / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["kernodeck"]
    wanted = assets.parse("weights", tool["application"]["weights"]).fetch_command()
    return [] if block.commands() == [wanted] else [f"the block does not fetch what the project declares: {wanted}"]


# (page, first command, or its program) -> the check of a block marked needs=
CHECKS: dict[tuple[str, str], Callable[[Block], list[str]]] = {
    ("README.md", "pipx run nox -s verify"): _sessions_exist,
    ("README.md", "python3 -m venv .nox-bootstrap"): _bootstrap_pins_what_ci_pins,
    ("README.md", "huggingface-cli"): _fetches_the_declared_snapshot,  # examples/hub/README.md
}


def problems(block: Block, *, run: Callable[[Block], list[str]] | None = None) -> list[str]:
    """Why a command block is neither run nor marked and checked (empty when it is)."""
    if block.lang not in SHELLS:
        return ["a command block with no language: give it ```sh (and a mark, if it cannot run here)"]
    marks = dict(block.marks)
    if "needs" in marks:
        unknown = set(marks["needs"].split(",")) - NEEDS
        first = block.commands()[0] if block.commands() else ""
        check = CHECKS.get((block.page.name, first)) or CHECKS.get((block.page.name, first.split(" ", 1)[0]))
        if unknown:
            return [f"needs={marks['needs']}: unknown {sorted(unknown)} (known: {sorted(NEEDS)})"]
        if check is None:
            return [f"needs={marks['needs']} but no check in tests/unit/test_doc_commands.py CHECKS"]
        return check(block)
    if "synopsis" in marks:
        return [p for c in block.commands() for p in synopsis_problems(c)]
    if "runs" in marks:
        modules = [ROOT / m for m in marks["runs"].split(",")]
        missing = [str(m.relative_to(ROOT)) for m in modules if not m.is_file()]
        if missing:
            return [f"runs= names no such test module: {missing}"]
        return [f"{c!r} is not run literally by {marks['runs']}" for c in block.commands()
                if argv(c)[0] != "cd" and not runs_literally(c, modules)]
    return (run or run_here)(block)


def run_here(block: Block, workdir: Path | None = None) -> list[str]:
    """Run an unmarked block as written, in a copy of this project, its placeholders filled."""
    from tests.helpers.project import copy_project

    if workdir is None:  # pragma: no cover - the docs have no unmarked block today; the tests below give one
        raise AssertionError(f"{block.where}: an unmarked block to run needs a work folder")
    project = workdir if (workdir / "pyproject.toml").exists() else copy_project(workdir)
    if not (project / ".github" / "requirements").exists():  # export's hashed tools file (copy_project skips .github)
        shutil.copytree(ROOT / ".github" / "requirements", project / ".github" / "requirements")
    script = block.text
    for placeholder, value in PLACEHOLDERS.items():
        script = script.replace(placeholder, value)
    env = {**os.environ, "PYTHONPATH": str(ROOT),
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    proc = subprocess.run(["bash", "-e", "-c", script], cwd=project, env=env, capture_output=True, text=True,
                          timeout=600, check=False)
    if proc.returncode != 0:
        return [f"exited {proc.returncode}: {(proc.stderr or proc.stdout).strip()[-400:]}"]
    return []


# --- the tests ------------------------------------------------------------------------------------------------------

ALL = [b for page in PAGES for b in blocks(page)]


@pytest.mark.parametrize("block", ALL, ids=lambda b: b.where)
def test_every_command_block_is_run_or_marked_and_checked(block: Block, tmp_path: Path) -> None:
    assert problems(block, run=lambda b: run_here(b, tmp_path / "project")) == [], block.where


def test_the_docs_have_command_blocks_of_every_kind() -> None:
    kinds = {next(iter(b.marks), "run") for b in ALL}
    assert {"needs", "runs", "synopsis"} <= kinds, kinds
    assert len(ALL) >= 8, [b.where for b in ALL]


def _page(tmp_path: Path, fence: str, body: str) -> Block:
    page = tmp_path / "page.md"
    page.write_text(f"text\n\n```{fence}\n{body}\n```\n", encoding="utf-8")
    (found,) = blocks(page)
    return found


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text("[project]\nname = 'x'\n", encoding="utf-8")
    return project


def test_an_unmarked_block_runs_as_written_and_fails_when_it_cannot(tmp_path: Path, scratch: Path) -> None:
    ok = _page(tmp_path, "sh", "python -m kernodeck --version\ncd DIR || true")
    assert problems(ok, run=lambda b: run_here(b, scratch)) == []
    bad = _page(tmp_path, "sh", "python -m kernodeck no-such-command")
    assert problems(bad, run=lambda b: run_here(b, scratch))[0].startswith("exited 2")
    bare = _page(tmp_path, "", "nox -s verify")
    assert "no language" in problems(bare)[0]
    output = _page(tmp_path, "sh", "nox -s verify")  # a shell block is a command block
    assert output.commands() == ["nox -s verify"]


def test_a_marked_block_without_its_check_or_literal_test_fails(tmp_path: Path) -> None:
    unchecked = _page(tmp_path, "sh needs=docker", "docker build .")
    assert "no check" in problems(unchecked)[0]
    unknown = _page(tmp_path, "sh needs=quantum", "nox -s verify")
    assert "unknown" in problems(unknown)[0]
    wrong = _page(tmp_path, "sh runs=tests/e2e/test_calibrate_e2e.py", "nox -s calibrate -- --out runs/elsewhere")
    assert "not run literally" in problems(wrong)[0]
    right = _page(tmp_path, "sh runs=tests/e2e/test_calibrate_e2e.py", "nox -s calibrate -- --out runs/cal")
    assert problems(right) == []
    absent = _page(tmp_path, "sh runs=tests/e2e/test_nothing.py", "nox -s verify")
    assert "no such test module" in problems(absent)[0]
    synopsis = _page(tmp_path, "sh synopsis", "nox -s upgrade -- [--platform ID] [--no-such-option]")
    assert problems(synopsis) == ["upgrade has no option --no-such-option"]


def test_documented_argv_is_kernodecks_argv() -> None:
    assert argv("KERNODECK_SOURCE=../.. nox -s calibrate -- --out runs/cal") == ["calibrate", "--out", "runs/cal"]
    assert argv("pipx run nox -s verify") == ["verify"]
    assert argv("python -m kernodeck drift A B") == ["drift", "A", "B"]
    assert _matches(["drift", "a", "b", "--out", "x"], ["drift", _STAR, "--out", "x"])
    assert not _matches(["drift", "a", "--out", "y"], ["drift", _STAR, "--out", "x"])
    assert _matches(["verify"], ["verify", "--out", _WILD]) and not _matches(["verify"], ["verify", "--strict"])


def test_the_checks_of_blocks_that_cannot_run_here_fail_on_a_wrong_block(tmp_path: Path) -> None:
    assert _sessions_exist(_page(tmp_path, "sh needs=network", "pipx run nox -s verify")) == []
    assert _sessions_exist(_page(tmp_path, "sh needs=network", "pipx run nox -s verfy")) == ["no session verfy"]
    line = "python3 -m venv .b && .b/bin/pip install nox=={} && .b/bin/nox -s {}"
    ci = re.findall(r"nox==([0-9.]+)", (ROOT / ".ci" / "run").read_text(encoding="utf-8"))[0]
    assert _bootstrap_pins_what_ci_pins(_page(tmp_path, "sh needs=network", line.format(ci, "verify"))) == []
    wrong = _bootstrap_pins_what_ci_pins(_page(tmp_path, "sh needs=network", line.format("2020.1.1", "verify")))
    assert wrong and "nox pins differ" in wrong[0]
    hub = ROOT / "examples" / "hub"
    (fetch,) = [b for b in blocks(hub / "README.md") if b.marks.get("needs") == "network"]
    assert _fetches_the_declared_snapshot(fetch) == []
    shutil.copy2(hub / "pyproject.toml", tmp_path / "pyproject.toml")  # beside _page's page.md
    moved = _page(tmp_path, "sh needs=network", fetch.text.strip().replace("--revision c9745ed", "--revision 0000000"))
    assert "does not fetch what the project declares" in _fetches_the_declared_snapshot(moved)[0]
