"""An extension's smoke check run by the extensions step (kernodeck/inenv/extensions.py's _smoke) with its window
stood in for as world.window marks it (seen.ON[0] True inside): red-team passes 38 and 39's findings on the smoke
answer's code running outside its window."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


def smoke_in_window(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str,
                    name: str) -> tuple[dict[str, Any] | None, list[tuple[str, bool]]]:
    """The extensions step's smoke check of extension ``name`` (module kdext._C, declared path "compiled") whose
    ``checks/smoke.py`` in a project at ``tmp_path`` is ``source``: its record (None: refused) and each call of the
    project's code (the module's CALLS) with whether a window was open. The smoke module leaves sys.modules (not left
    for later windows to see)."""
    from kernodeck.inenv import _common, declared_files, extensions, seen, world

    @contextlib.contextmanager
    def window(ctx: object, who: str) -> Iterator[None]:
        seen.ON[0] = True
        try:
            yield
        finally:
            seen.ON[0] = False

    (tmp_path / "checks").mkdir()
    (tmp_path / "checks" / "smoke.py").write_text(source, encoding="utf-8")
    monkeypatch.setattr(world, "window", window)
    monkeypatch.setattr(extensions, "_import", lambda *args: object())
    monkeypatch.setattr(declared_files, "declared", lambda ctx: {})
    ctx = _common.Context(config={"project_root": str(tmp_path)}, out=tmp_path / "out")
    decl: dict[str, Any] = {"module": "kdext._C", "smoke": "checks/smoke.py:smoke", "rtol": 0.0, "atol": 0.0,
                            "path": "compiled"}
    record: dict[str, Any] | None
    try:
        record = extensions._smoke(ctx, name, decl, "cpu", {}, {})
    except _common.CheckFailed:
        record = None
    module = sys.modules.pop(f"kernodeck_extension_smoke_{name}")
    calls: list[tuple[str, bool]] = module.CALLS
    return record, calls
