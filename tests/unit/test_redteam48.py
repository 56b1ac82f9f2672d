"""Red-team pass 48, the part that needs no built env (notes: /work/notes/redteam48.md; the in-env findings SET5,
SET6, SET7 and the false failure FF1 are in tests/e2e/test_redteam48_sessions.py, where the docstring says each).

SET5 (the watch hands out what it watches): setters._watched wraps each setter with ``functools.wraps``, which
stores the original binding as the wrapper's ``__wrapped__``; the application's code reaches it there
(``torch.set_flush_denormal.__wrapped__(True)``) and sets a recorded switch inside its call unwatched (the e2e test
measures the bits it moves). Fix idea: copy the name and doc only, keep the binding in the closure.
CONTROL: the wrapper is not the binding and is shown under the binding's name.
"""

from __future__ import annotations

import types
from typing import Any

from kernodeck.inenv import setters


def _binding(value: bool) -> None:
    """torch._C.set_flush_denormal's stand-in."""


def _wrapper() -> Any:
    torch = types.SimpleNamespace(__file__="/nowhere/torch/__init__.py")
    return setters._watched(torch, "set_flush_denormal", _binding, "torch._C.set_flush_denormal")


def test_set5_no_attribute_of_the_wrapper_is_the_unwatched_binding() -> None:
    """Fixed (setters._watched copies the name and docstring alone): the binding lives only in the closure."""
    wrapper = _wrapper()
    assert not hasattr(wrapper, "__wrapped__")
    assert all(value is not _binding for value in vars(wrapper).values())


def test_control_the_wrapper_is_not_the_binding_and_keeps_its_name() -> None:
    wrapper = _wrapper()
    assert wrapper is not _binding and wrapper.__name__ == "_binding"
