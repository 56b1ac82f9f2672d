"""Red-team pass 26 (9f7291f: the links on the way to every declared name held for the run, links.py; paths.places
resolving the folder before folding ``..``): each finding reproduced, marked ``xfail(strict=True)`` with its id while
it stands (a plain test once fixed), beside a control that passes today (notes: /work/notes/redteam26.md).

FP1 (links never met, FALSE PASS): links._resolve splits each path with os.path.split, and a path that ends in a
separator splits into (folder, ""), which it returns unresolved. A link whose target ends in "/" (``ln -s x/ cur``, as
a shell's completion writes it; ``/mnt/datasets/current/``) hands on its target's last part unresolved: a link there
(``x``, a "current version" link) is never taken, and an absolute target's whole chain is not either. Another process
(or the application itself: the guard protects the source's names and folders, not a link above or beside them)
retargets ``x`` onto another folder of the source for one read and puts it back: the entry computes from other bytes
and the step passes. The same chain with ``cur -> x`` (no slash) fails (the control).
FP2 (the baseline taken after application code ran, FALSE PASS): a weights or data source's links are taken at the
first window that opens after it was located (world._taken: a new key), not when it was located. A declared smoke
check (extensions step) runs the project's code before the application step locates the sources; a thread it leaves
running can, between the source's check and the entry's window (the whole time a data source is fingerprinted after
the weights), retarget a link on the way to the weights, read through it and put it back: the put-back link is then
what is taken, and the entry computes from the other bytes (here stashed in the application's own file). The same
thread acting once the entry's window has opened fails (the control). The docs' "taken before the application's
code first runs" is untrue of the sources.
FP3 (relative names, FALSE PASS): links.take skips every name that is not absolute. A ``url`` source's file is
``KERNODECK_CACHE/sha256/<digest>/<name>`` with the variable as set (locate.cache_root never makes it absolute;
``KERNODECK_CACHE=.kd-cache``, the env start passes it on): its names are relative and no link on their way is taken,
so a cache folder reached through a link (a cache on another disk), retargeted for a read and put back, is not seen.
The same name given absolute is (the control).
FP4 (no hold, FALSE PASS): calibrate.py's steps (calibrate._step) never call world.sources_held (nor the libraries'
or the settings' hold): a variation's application step whose read went through a source's link retargeted and put
back passes, its noise (and the margin search's hundreds of criterion calls after the last step) measured from bytes
no fingerprint names, and calibrate's proposal and verdict built on them. The runner's step fails (the control).
FF1 (the guard's trees, FALSE FAILURE): seen._guard_tree resolves the moved name (paths.real) before asking whether it
holds what the run relies on, while a move replaces the name, never what a link there names (the fix pass 25 made
for seen._guard, follows=False). The application's own link to a project folder holding declared files, made under a
temporary name and moved into place (the atomic ``ln -sfn`` idiom: a "latest" link), is refused ("moved ..., which
holds ..."). The same link made in place and removed passes (the control).
NOTE1 (held elsewhere, no test): the resume worker (resume_app._serve) opens windows (links.take) but holds nothing
after its call; a link it replaces is seen by the runner's hold after the resume-application step (a replaced link
stays replaced), and its own reads are judged at its window's end. Only what is not a link (a file changed and put
back between two of its windows: it has one) would need its own hold.
COST1 (no test): world._taken builds the list of every declared and source name at every window (8 ms a window at 1M
names, hundreds of windows in the controls); links.take re-resolves every name at each new key (a source located),
~10 us a name (10 s at 1M); links.replaced ~2 us a link a step (measured at 100k hf-style links: take 1.0 s, 0.8 ms
a window, 0.2 s a hold). Bounded, once per key. COST2 (no test, not 9f7291f's): the application's own os.symlink to a
folder walks the whole folder as reads (seen._linked -> _moved): 42 us a file measured (20k files: 0.84 s), ~54 s for
a 1.28M-file data source linked into a working folder (an ImageFolder root), each file then in the window's READ for
its end's judgement.

Fixed by class: FP1 (links._resolve drops a trailing separator and follows the link as any other), FP2 (a source's
links are taken as locate.py fingerprints it, before its files are hashed: links.met), FP3 (every name and every
source is made absolute against the working folder, unfolded: locate.resolve, locate.cache_root, links.met), FP4 (one
step rule for every in-env step loop, steprun.py, the runner's and a calibrate variation's: what must still hold is
checked after each step, and the margin search is a step of its own), FF1 (the guard on a moved tree lands on the
name, its folder resolved: paths.places(follows=False)), NOTE1 (the resume worker holds the sources before it writes
its result), COST1 (the names are built only when a new set of declared names is to be taken). COST2 stays a note.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from kernodeck.inenv import links, locate, world
from kernodeck.inenv._common import Context
from tests.helpers.closedworld import (
    CRITERION,
    EDITED,
    RELINK,
    TWICE,
    WAIT,
    _closed_project,
    _with_criterion,
    edited_run,
)
from tests.helpers.closedworld import _run as closed_run

NOTHING = "def before():\n    pass\ndef after():\n    pass\n"

# Another process acts twice: at MARK (then MARK.done), and at MARK2 (then MARK2.done) (passes 24 and 25's harness).


# The entry reads the weights' 0.csv between the marks: x = the length of what it read (a's "1\n": 2; "222\n": 4).
READS = (
    """import os, time
from pathlib import Path

"""
    + WAIT
    + """

def run(app):
    _at({mark!r})
    value = len((app.weights / "0.csv").read_bytes())
    _at({mark2!r})
    app.write("x", [value], ["a"])
"""
    + CRITERION
)


def _run(tmp_path: Path, table_extra: dict[str, Any], entry: str, edit: str, script: str = EDITED,
         files: dict[str, str] | None = None) -> dict[str, Any]:
    """closedworld.edited_run with the step's script given (``script``: EDITED, the runner's order) and more project
    ``files`` written before the fingerprints."""
    return edited_run(tmp_path, table_extra, entry, edit, script, files)


def _refused_or_fingerprinted(result: dict[str, Any]) -> bool:
    """Refused, or computed from the bytes the record names (0.csv: "1\\n", two bytes)."""
    return bool(result["status"] == "failed" or result["x"] == [2])


def _marks(tmp_path: Path) -> tuple[str, str]:
    return str(tmp_path / "mark"), str(tmp_path / "mark2")


# --- FP1: a link whose target ends in "/" hands on its target unresolved --------------------------------------------


def _slashed(tmp_path: Path, cur: str, to: str | None) -> dict[str, Any]:
    """Weights ``models/cur`` (a link to ``cur``), ``models/x`` a link to ``a`` (0.csv: "1\\n"), ``a/evil/0.csv``
    ("222\\n", a file of the source too); another process retargets ``x`` onto ``to`` for the entry's read and puts it
    back (``to`` None: it does nothing)."""
    models = tmp_path / "models"
    (models / "a" / "evil").mkdir(parents=True)
    (models / "a" / "0.csv").write_text("1\n")
    (models / "a" / "evil" / "0.csv").write_text("222\n")
    os.symlink("a", models / "x")
    os.symlink(cur, models / "cur")
    mark, mark2 = _marks(tmp_path)
    x = str(models / "x")
    return _run(tmp_path, {"weights": {"path": str(models / "cur")}}, READS.format(mark=mark, mark2=mark2),
                TWICE.format(first="pass" if to is None else RELINK.format(to=to, link=x),
                             second="pass" if to is None else RELINK.format(to="a", link=x), mark=mark, mark2=mark2))


def test_fp1_control_a_link_on_the_way_retargeted_and_put_back_fails(tmp_path: Path) -> None:
    result = _slashed(tmp_path, "x", "a/evil")
    assert result["status"] == "failed" and "models/x" in result["error"], result


def test_fp1_control_the_slashed_chain_untouched_passes(tmp_path: Path) -> None:
    result = _slashed(tmp_path, "x/", None)
    assert result["status"] == "passed" and result["x"] == [2], result


def test_fp1_the_resolver_meets_every_link_of_a_slashed_chain(tmp_path: Path) -> None:
    """The mechanism, alone: ``cur -> x/`` then ``x -> a``: both are met, and the file the name opens is ``a/0.csv``
    (was: only ``cur``, and ``x/0.csv``)."""
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "0.csv").write_text("1\n")
    os.symlink("a", tmp_path / "x")
    os.symlink("x/", tmp_path / "cur")
    met: dict[str, Any] = {}
    opened = links._resolve(str(tmp_path / "cur" / "0.csv"), met, {})
    assert sorted(met) == [str(tmp_path / "cur"), str(tmp_path / "x")]
    assert opened == str(tmp_path / "a" / "0.csv") == os.path.realpath(tmp_path / "cur" / "0.csv")


def test_fp1_a_link_behind_a_slashed_target_retargeted_and_put_back_fails(tmp_path: Path) -> None:
    result = _slashed(tmp_path, "x/", "a/evil")
    assert _refused_or_fingerprinted(result), result  # passes: x = [4], a/evil/0.csv's bytes read as 0.csv


# --- FP2: a source's links taken at the first window after it was located -------------------------------------------

# The runner's order with a declared smoke check first (extensions._smoke: the project's code, in a window, before the
# application step locates the sources), then the application step and each step's hold.
SMOKED = r"""
import json, os, runpy, sys
os.environ['KERNODECK_CACHE'] = sys.argv[6]
from pathlib import Path
runpy.run_path(sys.argv[1])
sys.path.insert(0, sys.argv[5])
from kernodeck_inenv import application, world
from kernodeck_inenv._common import CheckFailed, Context
config = json.loads(Path(sys.argv[2]).read_text())
ctx = Context(config=config, out=Path(sys.argv[3]))
edit = runpy.run_path(sys.argv[4])
try:
    world.forget()
    with world.window(ctx, "the smoke check of ext"):
        runpy.run_path(str(Path(config["project_root"]) / "smoke.py"))["smoke"]()
    world.settle()
    world.sources_held(ctx)  # the extensions step's hold
    world.forget()
    edit["before"]()
    application.weights(ctx), application.data(ctx)  # the application step: its sources located and checked
    edit["after"]()  # (the time a data source takes to be fingerprinted, say)
    details = application.run_entry(ctx)
    world.settle()
    world.sources_held(ctx)
    print(json.dumps({"status": "passed"}))
except CheckFailed as exc:
    print(json.dumps({"status": "failed", "error": str(exc)}))
"""

# The smoke check leaves a thread that, at MARK, retargets ``store`` (a link above the weights folder: no source's name
# or folder, so not guarded) onto a folder of its own, reads the weights' 0.csv through it, puts the link back and
# stashes what it read in its own file.
SMOKE = """import os, threading, time

STORE, OWN, STASH, MARK = {store!r}, {own!r}, {stash!r}, {mark!r}


def smoke():
    def work():
        while not os.path.exists(MARK):
            time.sleep(0.01)
        os.makedirs(OWN + "/models")
        with open(OWN + "/models/0.csv", "w") as f:
            f.write("222\\n")
        os.remove(STORE)
        os.symlink(OWN, STORE)
        with open(STORE + "/models/0.csv") as f:
            data = f.read()
        os.remove(STORE)
        os.symlink("A", STORE)
        with open(STASH, "w") as f:
            f.write(data)
        open(MARK + ".done", "w").close()

    threading.Thread(target=work, daemon=True).start()
"""

STASHED = (
    """import os, time
from pathlib import Path

"""
    + WAIT
    + """

def run(app):
    {sync}
    app.write("x", [len(Path({stash!r}).read_bytes())], ["a"])
"""
    + CRITERION
)

AFTER_CHECK = """import os, time
def before():
    pass
def after():
    open({mark!r}, "w").close()
    deadline = time.monotonic() + 20
    while not os.path.exists({mark!r} + ".done") and time.monotonic() < deadline:
        time.sleep(0.01)
"""


def _smoked(tmp_path: Path, *, in_entry: bool) -> dict[str, Any]:
    """Weights ``store/models`` (store -> A, A/models/0.csv "1\\n"); the smoke check's thread acts at MARK, made by the
    entry once its window is open (``in_entry``) or between the sources' check and the entry's window."""
    (tmp_path / "A" / "models").mkdir(parents=True)
    (tmp_path / "A" / "models" / "0.csv").write_text("1\n")
    store = tmp_path / "store"
    os.symlink("A", store)
    mark, stash = str(tmp_path / "mark"), str(tmp_path / "stash.txt")
    smoke = SMOKE.format(store=str(store), own=str(tmp_path / "own"), stash=stash, mark=mark)
    entry = STASHED.format(sync=f"_at({mark!r})" if in_entry else "pass", stash=stash)
    return _run(tmp_path, {"weights": {"path": str(store / "models")}, "code": ["smoke.py"]}, entry,
                NOTHING if in_entry else AFTER_CHECK.format(mark=mark), SMOKED, files={"smoke.py": smoke})


def test_fp2_control_the_thread_acting_once_the_entrys_window_is_open_fails(tmp_path: Path) -> None:
    result = _smoked(tmp_path, in_entry=True)
    assert result["status"] == "failed" and "store" in result["error"], result


def test_fp2_a_smoke_checks_thread_acting_between_the_sources_check_and_the_entry_fails(tmp_path: Path) -> None:
    result = _smoked(tmp_path, in_entry=False)
    assert _refused_or_fingerprinted(result), result  # passes: x = [4], the bytes read through the retargeted link


# --- FP3: a relative name: no link on its way taken ------------------------------------------------------------------


def _cache_link_replaced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache: str) -> list[str]:
    """A ``url`` source's file in KERNODECK_CACHE=``cache`` (run from tmp_path), the cache folder a link to ``disk``;
    its links taken as a window opens, then the cache link retargeted onto ``disk2`` and put back: what the step's
    hold (world.replaced_links) names."""
    digest = "0" * 64
    for disk, text in (("disk", "1\n"), ("disk2", "222\n")):
        folder = tmp_path / disk / "sha256" / digest
        folder.mkdir(parents=True)
        (folder / "f.csv").write_text(text)
    os.symlink("disk", tmp_path / "kd-cache")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KERNODECK_CACHE", cache)
    name = str(locate.cached_file(digest, "f.csv"))  # the source as locate._url finds it
    root = tmp_path / "project"
    root.mkdir()
    (root / "sample.jsonl").write_text('{"id": "a"}\n')
    ctx = Context(config={"project_root": str(root), "application": {"sources": {}, "sample": "sample.jsonl"}},
                  out=tmp_path / "out")
    monkeypatch.setattr(world, "source_names", lambda _ctx: {name: digest})
    world._taken(ctx)  # as the entry's window opens
    link = str(tmp_path / "kd-cache")
    for target in ("disk2", "disk"):  # retargeted for a read, then put back
        os.symlink(target, link + ".tmp")
        os.replace(link + ".tmp", link)
    return world.replaced_links(ctx)


def test_fp3_control_an_absolute_cache_names_its_link_replaced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    replaced = _cache_link_replaced(tmp_path, monkeypatch, str(tmp_path / "kd-cache"))
    assert replaced and "kd-cache" in replaced[0], replaced


def test_fp3_a_relative_cache_names_its_link_replaced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    replaced = _cache_link_replaced(tmp_path, monkeypatch, "kd-cache")
    assert replaced, replaced  # []: the retarget is never seen


# --- FP4: calibrate's steps hold nothing ----------------------------------------------------------------------------

CALIBRATED = r"""
import json, os, runpy, sys
os.environ['KERNODECK_CACHE'] = sys.argv[6]
from pathlib import Path
runpy.run_path(sys.argv[1])
sys.path.insert(0, sys.argv[5])
from kernodeck_inenv import application, calibrate
from kernodeck_inenv._common import Context
config = json.loads(Path(sys.argv[2]).read_text())
out = Path(sys.argv[3])
(out / "steps").mkdir(parents=True, exist_ok=True)
ctx = Context(config=config, out=out)
edit = runpy.run_path(sys.argv[4])
edit["before"]()
application.weights(ctx), application.data(ctx)
edit["after"]()
result = calibrate._step(ctx, out, 1, "application", lambda: application.run_entry(ctx))  # a variation's step
print(json.dumps({"status": result["status"], "error": result.get("error", "")}))
"""


def _relinked(tmp_path: Path, script: str) -> dict[str, Any]:
    """Weights a.csv ("1\\n"), b.csv ("222\\n"), 0.csv -> a.csv; another process retargets 0.csv onto b.csv for the
    entry's read and puts it back (pass 25's FP2 control)."""
    source = tmp_path / "models"
    source.mkdir()
    (source / "a.csv").write_text("1\n")
    (source / "b.csv").write_text("222\n")
    link = str(source / "0.csv")
    os.symlink("a.csv", link)
    mark, mark2 = _marks(tmp_path)
    return _run(tmp_path, {"weights": {"path": str(source)}}, READS.format(mark=mark, mark2=mark2),
                TWICE.format(first=RELINK.format(to="b.csv", link=link), second=RELINK.format(to="a.csv", link=link),
                             mark=mark, mark2=mark2), script)


def test_fp4_control_the_runners_step_fails(tmp_path: Path) -> None:
    result = _relinked(tmp_path, EDITED)
    assert result["status"] == "failed" and "0.csv" in result["error"], result


def test_fp4_a_calibrate_variations_step_fails(tmp_path: Path) -> None:
    result = _relinked(tmp_path, CALIBRATED)
    assert _refused_or_fingerprinted(result), result  # passes: x = [4]


# --- FF1: the guard's tree follows the application's own link being moved --------------------------------------------

OWN_LINK = (
    """import os
from pathlib import Path


def run(app):
{make}
    app.write("x", [len((Path("latest") / "extra.csv").read_bytes())], ["a"])
    os.remove("latest")
"""
    + CRITERION
)


def _own_link(tmp_path: Path, make: str) -> dict[str, Any]:
    entry = OWN_LINK.format(make="\n".join("    " + line for line in make.splitlines()))
    return _run(tmp_path, {"files": ["data/*.csv"]}, entry, NOTHING)


def test_ff1_control_its_own_link_to_a_declared_folder_made_in_place_passes(tmp_path: Path) -> None:
    result = _own_link(tmp_path, 'os.symlink(app.root / "data", "latest")')
    assert result["status"] == "passed" and result["x"] == [8], result  # data/extra.csv: "label\n1\n"


def test_ff1_its_own_link_to_a_declared_folder_moved_into_place_passes(tmp_path: Path) -> None:
    result = _own_link(tmp_path, 'os.symlink(app.root / "data", "latest.tmp")\nos.replace("latest.tmp", "latest")')
    # refused: "moved .../latest.tmp, which holds .../data/extra.csv, while the run relies on it as it was checked"
    assert result["status"] == "passed" and result["x"] == [8], result


# --- COST2: a link the application makes to a folder is not walked ----------------------------------------------------


def _linking(tmp_path: Path, then: str) -> dict[str, Any]:
    """A criterion that links an undeclared folder of 3000 files into the project's scratch folder, then ``then``."""
    bulk = tmp_path / "bulk"
    bulk.mkdir()
    for i in range(3000):
        (bulk / f"f{i}.txt").write_text(str(i))
    config = _closed_project(tmp_path, code=["src/mypkg/**/*.py"])
    doing = (f"os.makedirs(ROOT / 'scratch', exist_ok=True); os.symlink({str(bulk)!r}, ROOT / 'scratch' / 'bulk'); "
             + then)
    return closed_run(tmp_path, _with_criterion(config, doing, code=["src/mypkg/**/*.py"]))


def test_cost2_a_link_made_to_a_folder_reads_nothing_of_it(tmp_path: Path) -> None:
    """Fixed (pass 26 COST2): making the link moves no bytes; nothing of the folder was read, so nothing is judged."""
    result = _linking(tmp_path, "pass")
    assert result["status"] == "passed", result


def test_cost2_control_a_file_read_through_the_link_is_judged_by_the_file_it_opens(tmp_path: Path) -> None:
    result = _linking(tmp_path, "(ROOT / 'scratch' / 'bulk' / 'f7.txt').read_text()")
    assert result["status"] == "failed" and str(tmp_path / "bulk" / "f7.txt") in result["error"], result
    assert "f8.txt" not in result["error"]
