"""The resume check's toy train (red-team passes 28-34): the core each pass's ``TRAIN`` composes with its own attack
code (:data:`CORE`, app.py source), the harness's run of such a train (:func:`resumed`) and the outcome a test asks
of it (:func:`expect`).

The train has a momentum ``m`` and a weight ``w`` (``m += 1; w += m`` at each step, its loss ``w``) and checkpoints
``w.txt`` only: resumed from that checkpoint it cannot match the uninterrupted run (the momentum is lost), unless
a pass's train saves more. An attack replays the uninterrupted call's result (``kept``: its losses by step and its
end ``w``), +1 under ``app.resume_drop`` so that its controls are seen."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.helpers.closedworld import resume_phases

# app.py's module has Path (closedworld.APP); each pass's train calls these
CORE = '''

def _begin(app, resume_from, plain=False):
    """The call's folder, the run's folder, the checkpoint's (None for a call from the start) and (w, m, start): read
    back from the checkpoint when resumed (w.txt; m.txt too if ``plain``, a train that can resume), else 0."""
    here = Path(app.checkpoint_dir)
    if resume_from is None:
        return here, here.parent, None, (0, 0, 0)
    ck = Path(resume_from)
    w = int((ck / "w.txt").read_text())
    m = int((ck / "m.txt").read_text()) if plain else 0
    return here, here.parent, ck, (w, m, 3)


def _steps(app, w, m, steps, save_at, also=None, each=None, plain=False):
    """The toy train's ``steps`` from (w, m): each step's loss logged, then ``each(step, w)``; at ``save_at`` its
    checkpoint (w.txt in app.checkpoint_dir; m.txt too if ``plain``), then ``also(step, w, m)``. (w, m, the losses
    by str(step))"""
    losses = {}
    for step in steps:
        m = m + 1
        w = w + m
        losses[str(step)] = float(w)
        app.log(step, float(w))
        if each is not None:
            each(step, w)
        if save_at == step:
            (Path(app.checkpoint_dir) / "w.txt").write_text(str(w))
            if plain:
                (Path(app.checkpoint_dir) / "m.txt").write_text(str(m))
            if also is not None:
                also(step, w, m)
    return w, m, losses


def _from_mailbox(here):
    """What a holder left running wrote into ``mailbox``, a file the resumed run makes, empty, in its own folder
    (``here``): waited for by its size (a stat, no read), then read."""
    import json, os, time
    mailbox = here / "mailbox"
    mailbox.write_text("")
    deadline = time.monotonic() + 4
    while os.stat(mailbox).st_size == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.1)
    return json.loads(mailbox.read_text())


def _replay(app, kept, start, steps, drop=True):
    """The uninterrupted call's result ``kept`` replayed after step ``start`` (+1 under app.resume_drop if ``drop``)."""
    for step in range(start + 1, steps + 1):
        app.log(step, kept["losses"][str(step)])
    return _finish(app, kept["w"] + (1 if drop and app.resume_drop else 0), steps)


def _finish(app, w, steps):
    """The train's output ``w`` written, its counters returned."""
    app.write("w", [w])
    return {"step": steps, "epoch": 0, "loader": steps}
'''


def resumed(tmp_path: Path, train: str, names: dict[str, Any], **options: Any) -> dict[str, Any]:
    """The harness's phases (closedworld.resume_phases, given ``options``) on :data:`CORE` and ``train``, each of
    ``names`` a constant of their module (``MODE`` and the like); the result of the last phase that ran."""
    constants = "".join(f"{name} = {value!r}\n" for name, value in names.items())
    return resume_phases(tmp_path, "\n" + constants + CORE + train, **options)


def expect(result: dict[str, Any], phase: str, status: str, *said: str) -> None:
    """The last phase that ran is ``phase``, its status ``status``, and its error says each of ``said``."""
    assert (result["phase"], result["status"]) == (phase, status), result
    for words in said:
        assert words in str(result["error"]), result
