"""A stand-in ``torch.utils.collect_env`` for the tests of kernodeck/inenv/torch_report.py (the test process has no
torch): ``get_pretty_env_info`` is the given function."""

from __future__ import annotations

import sys
import types
from collections.abc import Callable

import pytest


def stand_in(monkeypatch: pytest.MonkeyPatch, report: Callable[[], str]) -> None:
    collect_env = types.ModuleType("torch.utils.collect_env")
    collect_env.get_pretty_env_info = report  # type: ignore[attr-defined]
    utils = types.ModuleType("torch.utils")
    utils.collect_env = collect_env  # type: ignore[attr-defined]
    torch = types.ModuleType("torch")
    torch.utils = utils  # type: ignore[attr-defined]
    for name, module in (("torch", torch), ("torch.utils", utils), ("torch.utils.collect_env", collect_env)):
        monkeypatch.setitem(sys.modules, name, module)
