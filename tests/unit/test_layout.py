"""The suite's layout (tests/helpers/layout.py): no module imports conftest or a test module, each unit file is named
after the module it tests; each check shown failing on a planted breach."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import layout
from tests.helpers.project import ROOT

# Unit files whose subject is a rule over many modules, not one module: no single module to be named after.
CROSS_CUTTING = {
    "doc_commands": "every command block of README and docs/ runs or is marked",
    "docs": "README's size and every relative link in the docs",
    "shape": "the size rule over every module of kernodeck/ and bench/",
    "import_cycles": "no import cycle in the whole package",
    "report_modules": "the report and the dossier told in one-concept modules",
    "cli_thin": "the CLI parses and calls: its logic lives in the modules it calls",
    "speed": "what each everyday command imports and each session installs",
    "skip_rule": "the skipped-step rule said once, and the page that states it",
    "example_tool_pins": "each example pins the tools the sessions import, as this repository does",
    "suite_footprint": "the suite's own disk use",
    "redteam16": "red-team pass 16's findings across the closed world's modules (natives, declared, controls)",
    "redteam17": "red-team pass 17's findings across the closed world's modules (natives, seen, declared_files)",
    "redteam18": "red-team pass 18's findings across the closed world's modules (natives, seen, judge, cached)",
    "redteam19": "red-team pass 19's findings across the halves control, the rerun bar, caches and natives",
    "redteam20": "red-team pass 20's findings across the criterion's power (power.py, judge.py) and caches",
    "redteam21": "red-team pass 21's findings across the criterion's power (power.py's search and donors, judge.py)",
    "redteam22": "red-team pass 22's findings across the sources held, the stat records, the lineage, the code run",
    "redteam23": "red-team pass 23's findings across the sources held by name, reads' stats, torch's report",
    "redteam24": "red-team pass 24's findings across reads held by their stat: children, links, mapped files",
    "redteam25": "red-team pass 25's findings across the links held, the guard's names and the forked children",
    "redteam26": "red-team pass 26's findings across the links held (links.py), the guard's trees and calibrate",
    "redteam27": "red-team pass 27's findings across the resumed run's sources and the criterion's one accessor",
    "redteam28": "red-team pass 28's findings across the resumed run's trusted run folder and the host's bytecode",
    "redteam29": "red-team pass 29's findings across the resumed run's narrowed reads and the emptiness check",
    "redteam30": "red-team pass 30's findings across the resume check's calls, its seal and the resumed run's rule",
    "redteam31": "red-team pass 31's findings across the resume check's new processes, their answers and holders",
    "redteam32": "red-team pass 32's findings across the resume check's leftover processes and the bytecode rule",
    "redteam33": "red-team pass 33's findings across the ending of a resume call's processes",
    "redteam34": "red-team pass 34's findings across the resume check's calls: kernel state, forked loaders, siblings",
    "redteam35": "red-team pass 35's findings across the guard on kernel and process state: limits, kmsg, spellings",
    "redteam36": "red-team pass 36's findings across the verdict outside the resume: twin, calibrate, dossier, params",
    "redteam37": "red-team pass 37's findings across pass 36's fixes by class: the twin's files, env gates, doors",
    "redteam38": "red-team pass 38's findings across pass 37's fixes by class: twin names, file doors, windows",
    "redteam39": "red-team pass 39's findings across pass 38's fixes by class: twin pairing, folder doors, leftovers",
    "redteam40": "red-team pass 40's findings across pass 39's fixes by class: the lock's name record, hooks, doors",
    "redteam41": "red-team pass 41's findings across pass 40's fixes by class: the lock's newlines, hook globals",
    "redteam42": "red-team pass 42's findings across pass 41's fixes by class: hook modules, the end, locks",
    "redteam43": "red-team pass 43's findings across pass 42's fixes by class: lock markers, hook names, the end",
    "redteam44": "red-team pass 44's findings outside the hooks: the lock's included inputs, replay, writes",
    "redteam45": "red-team pass 45's findings across pass 44's fixes by class: the resolver's config and env, settings",
    "redteam46": "red-team pass 46's findings across passes 44-45's fixes by class: lock inputs, resolver env, compare",
    "redteam47": "red-team pass 47's findings across passes 44-46's fixes by class: lock input lines, settings setters",
    "redteam48": "red-team pass 48's findings across pass 47's setter watch by class: aliases, globals, threads, forks",
    "redteam49": "red-team pass 49: the lock's inputs beyond ${NAME} (machine markers) and compare's unrecorded inputs",
    "redteam50": "red-team pass 50: the env bound to its lock (bytecode the runtime runs), variables, lineage",
    "redteam51": "red-team pass 51: sameness judged by equalities blind to what runs or is read (pycs, bitwise)",
    "redteam52": "red-team pass 52: the time zone exemption, a zone's record, references without record digests",
    "redteam53": "red-team pass 53: the system's files read unrecorded (zones after the entry), honest reads refused",
    "redteam54": "red-team pass 54: /proc/sys and /sys values recorded nowhere, the thread count unnamed in a delta",
    "redteam55": "red-team pass 55: drift without the as-written check, compare's reference lock, export's image",
    "redteam56": "red-team pass 56: the kernel's state unrecorded through the hook, the CI artifact's marker, bisect's "
                 "unmeasured old lock",
    "redteam57": "red-team pass 57: a stuck resume worker's stacks and layer, a refusal lost to a stall, the kernel's "
                 "state through a link, sys.exit, unread values as differences, a snapshot file named by its blob",
    "redteam58": "red-team pass 58: the application ending its own process (os._exit, a signal on itself), a path "
                 "source's left-out file advised as an hf snapshot's",
    "redteam59": "red-team pass 59: a failed criterion read as not run (upgrade's holds), another platform's relock "
                 "result shown as this one's or out of tolerance when not verified, the caller's pip options steering "
                 "rebuild's pip",
    "redteam60": "red-team pass 60: a criterion stopped before it answered read as out of tolerance, the lock's "
                 "markers evaluated with Kernodeck's interpreter and not the env's, the caller's uv bytecode option at "
                 "install",
    "redteam61": "red-team pass 61: an answer's own keys read as the orchestrator's 'never reported', a stop the "
                 "application's SIGTERM handler records as its own failure, the env's markers still partly "
                 "Kernodeck's, uv's config files at install",
    "redteam62": "red-team pass 62: a step that ended before the supervisor's stop recorded as the stopped one",
    "redteam63": "red-team pass 63: a seeded pip kept over the lock's file; no-binary builds a locked wheel's sdist",
    "redteam64": "red-team pass 64: uv's seeded venv kept over the lock's file; uv reads another lock; a stall after "
                 "the last step",
    "redteam65": "red-team pass 65: a link on the way to the base standard library replaced in a window: any file "
                 "read through it trusted unrecorded",
    "redteam66": "red-team pass 66: the env's bin/python link read through a link above the base made again; a "
                 "calibrate variation failing after its last step read as passed",
    "redteam67": "red-team pass 67: UV_OVERRIDE replacing a pin's hash in a uv rebuild (promoted with a file the "
                 "lock does not pin)",
    "redteam68": "red-team pass 68: uv's cache (UV_CACHE_DIR, kept) holding another tinya 1.0 under the lock's hash, "
                 "its RECORD rewritten: a uv rebuild promoted with it",
    "redteam69": "red-team pass 69: pip's wheel cache holding another wheel built from a locked sdist; an sdist's "
                 "unlocked build requirements; LD_PRELOAD in compare's and drift's processes",
    "redteam70": "red-team pass 70: an undeclared pin built here read as downloaded (its built WHEEL carries a "
                 "locked wheel's tag); uv venv's interpreter from the user's uv cache; pip's build requirements "
                 "through the user's pip cache",
    "redteam71": "red-team pass 71: the env's pyvenv.cfg home (another stdlib) read by no check, set by a declared "
                 "build or a project-root module in the create step; a declared build rewriting another pin's files",
    "redteam72": "red-team pass 72: a marked process whose main thread exited outlives the command's sweep; the "
                 "build's freeze/check process runs the env's .pth lines before the seal (another pin's files "
                 "rewritten, pip check's verdict printed)",
    "redteam73": "red-team pass 73: the env's site folders put before the stdlib in the build's -I -S freeze/check "
                 "process (a declared pin's optparse.py rewrites another pin before the seal); a process that sheds "
                 "the mark but stays in the group outlives the command",
    "redteam74": "red-team pass 74: the lock's pip runs from the env in the build's freeze/check process, so a "
                 "declared pin's bytecode in pip's __pycache__ runs there before the seal",
    "redteam75": "red-team pass 75: the build's pip freeze starts a VCS tool (hg) in an editable folder a declared "
                 "pin's wheel wrote, whose hook runs before the seal; a direct_url.json forges the output's "
                 "separator lines (a failed pip check read as passed)",
    "redteam76": "red-team pass 76: the freeze/check process runs the stdlib a build's pyvenv.cfg home names "
                 "(written back before its check); a path two RECORDs list is checked against one; a second "
                 "dist-info of a locked name hides a failed pip check",
    "redteam77": "red-team pass 77: a .DIST-INFO spelling hides a failed pip check past require_one_each; a "
                 "bin/python._pth a build wrote names the reader's standard library",
    "redteam78": "red-team pass 78: a dist-info folder of an unpinned name whose METADATA names a pin satisfies pip "
                 "check's missing requirement while freeze folds it into the pin's line",
    "redteam79": "red-team pass 79: an egg-link names a folder whose dist-info pip check reads and "
                 "require_one_each does not",
    "redteam80": "red-team pass 80: pip's build subprocess writes bytecode into Kernodeck's own pip folder",
    "redteam81": "red-team pass 81: native readers got unwrapped when their modules were wrapped as imported",
    "redteam82": "red-team pass 82: the verify runner started before the env's files were proven",
    "redteam83": "red-team pass 83: the audit hook's fast path, the runner's start, the natives' finder",
    "redteam84": "red-team pass 84: digests from the build (weights, compiled in-env code) where a write kept the stat",
}


def test_no_module_imports_conftest_or_a_test_module() -> None:
    assert layout.borrowed_imports(ROOT / "tests") == []


def test_a_planted_import_of_conftest_or_a_test_module_is_caught(tmp_path: Path) -> None:
    unit = tmp_path / "tests" / "unit"
    unit.mkdir(parents=True)
    (unit / "test_a.py").write_text(
        "from tests.conftest import kd\n"
        "import conftest\n"
        "from tests.unit.test_b import helper\n"
        "from tests.e2e import test_c\n"
        "from . import conftest as c\n"
        "def f():\n    from tests.e2e.test_d import x\n"
        # not borrowed: helpers, the package, pytest
        "from tests.helpers.project import copy_project\nimport pytest\nfrom kernodeck import testing_tools\n",
        encoding="utf-8",
    )
    assert layout.borrowed_imports(tmp_path / "tests") == [
        "tests/unit/test_a.py:1: tests.conftest",
        "tests/unit/test_a.py:2: conftest",
        "tests/unit/test_a.py:3: tests.unit.test_b",
        "tests/unit/test_a.py:4: tests.e2e.test_c",
        "tests/unit/test_a.py:5: .conftest",
        "tests/unit/test_a.py:7: tests.e2e.test_d",
    ]


def test_each_unit_file_is_named_after_the_module_it_tests() -> None:
    assert layout.unnamed_unit_files(ROOT, set(CROSS_CUTTING)) == []


def test_the_lists_name_only_unit_files_that_need_them() -> None:
    """An entry for a file that is gone, or that now names a module, is stale: the lists stay short and true."""
    modules = layout.module_names(ROOT)
    for name in CROSS_CUTTING:
        assert (ROOT / "tests" / "unit" / f"test_{name}.py").is_file(), name
        assert name not in modules, f"test_{name}.py names a module: drop it from the list"


def test_a_unit_file_named_after_no_module_is_caught(tmp_path: Path) -> None:
    for rel in ("kernodeck/lock/lockfile.py", "kernodeck/env/__init__.py", "kernodeck/_fs.py", "bench/run.py",
                "tests/helpers/wall.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("", encoding="utf-8")
    unit = tmp_path / "tests" / "unit"
    unit.mkdir()
    for name in ("lockfile", "lock_lockfile", "env", "fs", "bench_run", "wall", "rule", "mystery", "lock_mystery"):
        (unit / f"test_{name}.py").write_text("", encoding="utf-8")
    assert layout.unnamed_unit_files(tmp_path, {"rule"}) == [
        "tests/unit/test_lock_mystery.py",
        "tests/unit/test_mystery.py",
    ]


def test_no_two_test_files_share_a_name() -> None:
    assert layout.shared_basenames(ROOT) == []


def test_a_shared_test_file_name_is_caught(tmp_path: Path) -> None:
    for rel in ("tests/unit/test_export.py", "tests/e2e/test_export.py", "tests/e2e/test_export_e2e.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("", encoding="utf-8")
    assert layout.shared_basenames(tmp_path) == ["tests/e2e/test_export.py and tests/unit/test_export.py"]
