"""What may pass between the resume check's calls of train: only the checkpoint the call to K saved.

The runner calls train twice (uninterrupted to N; to K, saving its checkpoint), then each resumed run calls it in a
new process from that checkpoint. Kernodeck makes each call's folder itself, right before the call (one already there
was made by an earlier call: refused); each call may read, of the run's record, only its own folder (world.RUN_READS);
the checkpoint is sealed as the call to K returns (each entry's identity, size and times; a ``user.`` extended
attribute, state no check reads, refused), and the resumed run checks the seal before and after its call: anything
written there since (by a thread or child an earlier call left running) fails it (red-team passes 28 and 29). What
the call to K itself puts into its checkpoint is the application's (a stated limit: docs/application.md).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ._common import CheckFailed, Context
from .protocol import ConfigKey, Layer
from .world import RUN_READS


def made(folder: Path, what: str) -> Path:
    """``folder``, made now by Kernodeck for the call that fills it; one already there is refused."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    try:
        folder.mkdir()
    except FileExistsError:
        raise CheckFailed(f"{what} ({folder.name}) is already there before the call that fills it: an earlier call of "
                          "train made it, and the resumed run would read what it holds", Layer.APPLICATION) from None
    return folder


@contextmanager
def reading_only(ctx: Context, *folders: Path) -> Iterator[None]:
    """Within: of the run's record, the call may read only ``folders`` (its own, or the checkpoint)."""
    before = ctx.state.get(RUN_READS)
    ctx.state[RUN_READS] = [str(f) for f in folders]
    try:
        yield
    finally:
        if before is None:
            ctx.state.pop(RUN_READS, None)
        else:
            ctx.state[RUN_READS] = before


def _attributes(path: str) -> list[str]:
    try:
        return [n for n in os.listxattr(path, follow_symlinks=False) if n.startswith("user.")]
    except (OSError, AttributeError):  # a file system without them, or a platform
        return []


def seal(folder: Path) -> dict[str, list[int]]:
    """The checkpoint as it is now: each entry (links not followed) by its identity, size, times and type."""
    found: dict[str, list[int]] = {}
    for top, dirs, files in os.walk(folder):
        for name in [".", *dirs, *files] if top == str(folder) else [*dirs, *files]:
            path = os.path.normpath(os.path.join(top, name))
            st = os.lstat(path)
            if _attributes(path):
                raise CheckFailed(f"the checkpoint holds extended attributes ({os.path.relpath(path, folder)}): "
                                  "state no check reads; save the checkpoint's state in its files", Layer.APPLICATION)
            found[os.path.relpath(path, folder)] = [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns,
                                                    stat.S_IFMT(st.st_mode)]
    return found


def sealed(folder: Path, expected: dict[str, Any]) -> None:
    """(worker) The checkpoint still as the call to K left it."""
    now = seal(folder)
    if now != {k: list(v) for k, v in expected.items()}:
        changed = sorted(k for k in {*now, *expected} if now.get(k) != list(expected.get(k) or []))
        raise CheckFailed(f"the checkpoint changed after the call that saved it: {', '.join(changed[:6])} (written by "
                          "a thread or process an earlier call of train left running?)", Layer.APPLICATION,
                          {"changed": changed})


def train_calls(call: Callable[..., Any], ctx: Context, folder: Path, steps: int,
                at: int) -> tuple[Any, Any, dict[str, list[int]]]:
    """(runner) The uninterrupted call and the call to K, each in a folder made for it and reading only that; the
    checkpoint sealed as the call to K returns. ``call(folder, steps, save_at)`` is one call of train."""
    from . import owned, seen

    straight_dir = made(folder / "uninterrupted", "the uninterrupted run's folder")
    before = set(owned.WRITTEN)
    with reading_only(ctx, straight_dir):
        straight = call(straight_dir, steps, None)
    checkpoint = made(folder / "checkpoint", "the checkpoint's folder")
    # what the uninterrupted call wrote is barred to the call to K, as a determinism rerun's earlier files are (the
    # application's own in this process, its reads of them would not be judged: red-team pass 29, FP3)
    seen.earlier([path for path in owned.WRITTEN if path not in before])
    try:
        with reading_only(ctx, checkpoint):
            head = call(checkpoint, at, at)
    finally:
        seen.earlier(())
    return straight, head, seal(checkpoint)


def worker_context(order: dict[str, Any]) -> Context:
    """(worker) The resumed run's Context: the runner's located sources and links adopted, its settings record and
    declared libraries (what this process's call is held to: steprun.held); of the run's record only its checkpoint
    and its own folder readable (the uninterrupted call's replayed passed: red-team pass 28, FP1)."""
    from .application import adopt

    ctx = Context(config={ConfigKey.PROJECT_ROOT: order["root"], ConfigKey.APPLICATION: order["app"],
                          ConfigKey.LIBRARIES: list(order.get("libraries") or [])}, out=Path(order["out"]))
    if isinstance(order.get("settings"), dict):
        ctx.state["settings"] = order["settings"]
    adopt(ctx, order.get("sources") or {})
    ctx.state[RUN_READS] = [order["resume_from"], str(Path(order["result"]).parent)]
    return ctx
