"""Red-team pass 83 on b09f088 (the audit hook's fast path, ``seen.JUDGED``), ce9847d (the verify runner started once
the inventory has proven the env's files) and f07c40c (natives.install at every window). The hook's fast path is
shown by behaviour in tests/unit/test_seen.py (HOOK0, which also closes HOOK1: the source walk alone read only some
shapes of a branch).

HOOK2 (older than b09f088): ``os.forkpty`` (``pty.fork``) raises ``os.forkpty``, not ``os.fork``: the hook neither
marked the window as forked nor refused a fork after a resume call's processes ended, as it does for ``os.fork``.
Fixed: the fork branch takes both.

WIN1 (new in f07c40c): the natives' finder moved to sys.meta_path[0] at every window, so an application that put its
import hook first in one window and took it off by position in a later one removed Kernodeck's finder instead. Fixed
by going back: the finder is put first once; the one module wrapped as it is imported (torch.export.pt2_archive) has
torch._C's rows behind it (tests/unit/test_redteam81.py).

START1 (a stated limit, since the runner waits for its word): the runner imports Kernodeck's in-env files and part
of the standard library before ``site`` runs the env's ``.pth`` lines; a plain start runs them first. A ``.pth`` that
must precede those imports (a monkey-patching one) behaves otherwise under verify.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers import basevenv

ROOT = Path(__file__).resolve().parents[2]

def _forked_after_end(root: Path, call: str) -> str:
    script = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {str(root)!r})
        from kernodeck.inenv import seen
        seen.install(); seen.ON[0] = True; seen.BY[0] = "the entry"; seen.FORKS_ENDED[0] = True
        try:
            pid = {call}
        except Exception as exc:
            print(type(exc).__name__); raise SystemExit(0)
        pid = pid[0] if isinstance(pid, tuple) else pid
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        print("forked")
        """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    return done.stdout.strip() or done.stderr[-500:]


@pytest.mark.skipif(not hasattr(os, "forkpty"), reason="no os.forkpty")
def test_hook2_forkpty_after_the_call_ended_is_refused_as_fork_is() -> None:
    assert _forked_after_end(ROOT, "os.fork()") == "CheckFailed"  # the control
    assert _forked_after_end(ROOT, "os.forkpty()") == "CheckFailed"


def _meta_path_after_pop(root: Path) -> dict[str, bool]:
    """Window 1: the application puts its import hook first; window 2 (seen.install again): it takes it off by
    position, ``del sys.meta_path[0]``, as it put it on."""
    script = textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {str(root)!r})
        from kernodeck.inenv import natives, seen
        seen.install()  # window 1
        class AppHook:
            def find_spec(self, name, path=None, target=None):
                return None
        hook = AppHook()
        sys.meta_path.insert(0, hook)
        seen.install()  # window 2
        del sys.meta_path[0]
        print(json.dumps({{"app_hook_left": hook in sys.meta_path,
                          "natives_finder_left": any(isinstance(f, natives._OnImport) for f in sys.meta_path)}}))
        """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def test_win1_an_application_hook_taken_off_by_position_takes_its_own_finder_off() -> None:
    assert _meta_path_after_pop(ROOT) == {"app_hook_left": False, "natives_finder_left": True}


def _modules_when_site_runs(root: Path, *, wait: bool) -> set[str]:
    """The modules imported when the env's first ``.pth`` line runs: the runner as verify starts it (``-S``,
    ``--wait``, then ``go``), or a plain start of the env's interpreter with the runner (``site`` at its start)."""
    python = basevenv.venv(root)
    out = root / "modules.json"
    (basevenv.site_packages(python) / "aa.pth").write_text(
        f"import sys, json; open({str(out)!r}, 'w').write(json.dumps(sorted(sys.modules)))\n")
    done = basevenv.run(basevenv.runner_argv(python, root, wait=wait), root, "go\n" if wait else "")
    assert done.returncode == 0, done.stderr[-2000:]
    return {m for m in json.loads(out.read_text()) if not m.startswith("kernodeck_inenv")}


@pytest.mark.xfail(strict=True, reason="START1 (a stated limit): the runner loads Kernodeck's files and part of the "
                   "standard library before the env's .pth lines run")
def test_start1_the_pth_lines_run_before_the_standard_library_the_runner_preloads(tmp_path: Path) -> None:
    plain = _modules_when_site_runs(tmp_path / "plain", wait=False)
    waited = _modules_when_site_runs(tmp_path / "early", wait=True)
    assert "ssl" not in plain  # the control: a plain start runs the .pth lines before ssl is imported
    preloaded = sorted(m for m in waited - plain if "." not in m and not m.startswith("_"))
    assert not preloaded, f"{len(preloaded)} modules imported before the env's .pth lines ran: {preloaded[:40]}"
