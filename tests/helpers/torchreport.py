"""A stand-in ``torch.utils.collect_env`` for the tests of kernodeck/inenv/torch_report.py (the test process has no
torch): ``get_pretty_env_info`` is the given function, ``run`` (torch's probe runner) the given one or a recorder."""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from typing import Any

import pytest


def stand_in(monkeypatch: pytest.MonkeyPatch, report: Callable[[], str],
             run: Callable[[Any], tuple[int, str, str]] | None = None) -> types.ModuleType:
    """The stand-in module, put where ``from torch.utils import collect_env`` finds it."""
    collect_env = types.ModuleType("torch.utils.collect_env")
    collect_env.get_pretty_env_info = report  # type: ignore[attr-defined]
    collect_env.run = run or (lambda command: (0, f"ran {command}", ""))  # type: ignore[attr-defined]
    utils = types.ModuleType("torch.utils")
    utils.collect_env = collect_env  # type: ignore[attr-defined]
    torch = types.ModuleType("torch")
    torch.utils = utils  # type: ignore[attr-defined]
    for name, module in (("torch", torch), ("torch.utils", utils), ("torch.utils.collect_env", collect_env)):
        monkeypatch.setitem(sys.modules, name, module)
    return collect_env
