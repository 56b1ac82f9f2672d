"""The environment calibrate's variation process starts with (kernodeck/measure/variations.py's run_in_env, the
process stood in for): red-team passes 36-39's findings on what a variation keeps of the caller's variables."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kernodeck.inenv.protocol import ConfigKey
from kernodeck.measure import variations
from kernodeck.project.deadlines import Deadlines

AVX512 = {"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq"}  # the CPU flags the variations are planned for


def variation_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caller: dict[str, str], name: str = "declared", *,
                  declared: list[str] | None = None, libraries: list[str] | None = None) -> dict[str, str]:
    """The environment calibrate's variation ``name`` process is started with, the caller's ``caller`` set; the
    runner configuration declaring the variables ``declared`` and, if given, the ld-preload ``libraries`` (as
    runbuild puts them)."""
    seen: dict[str, str] = {}

    def supervise(argv: list[str], *, env: dict[str, str], **_: object) -> object:
        seen.update(env)
        raise RuntimeError("not started")

    for var, value in caller.items():
        monkeypatch.setenv(var, value)
    monkeypatch.setattr(variations, "supervise", supervise)
    (variation,) = [v for v in variations.plan(AVX512, 2, "cpu", "x86_64") if v.name == name]
    config: dict[str, object] = {"project_root": str(tmp_path), ConfigKey.VARIABLES: declared or []}
    if libraries is not None:
        config[ConfigKey.LIBRARIES] = libraries
    with pytest.raises(RuntimeError, match="not started"):
        variations.run_in_env(Path(sys.executable), tmp_path / "v", config, variation, Deadlines())
    return seen
