"""The bench's bookkeeping (no timing is asserted: speed is judged only by `nox -s bench` itself)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench import pieces, run, table, timing, work
from tests.helpers.project import copy_project


def _side(median: float) -> dict[str, Any]:
    return {"name": "x", "command": "x", "times_s": [median], "median_s": median, "min_s": median, "max_s": median,
            "note": ""}


def _row(ratio: float, kd: float | None = None) -> dict[str, Any]:
    kd = ratio if kd is None else kd
    return {"kernodeck": _side(kd), "bare": _side(kd / ratio), "ratio": ratio, "ratio_low": ratio * 0.9,
            "ratio_high": ratio * 1.1, "ratio_of_medians": ratio, "pairs": 1, "others_share": 0.05}


def _record(rebuild: float, verify: float, lock_uv: float, check_s: float, job: float | None = None,
            hash_s: float = 0.05) -> dict[str, Any]:
    rows: dict[str, Any] = {
        "rebuild": {**_row(rebuild), "kernodeck_steps_s": {"install": 0.3, "freeze": 0.4}},
        "job": _row(job if job is not None else rebuild),
        "verify": {**_row(verify), "kernodeck_steps_s": {"embed": 2.0, "resume": 2.2}},
        "lock_uv": _row(lock_uv),
        "lock_check": _row(check_s / 0.2, kd=check_s),
        "lock_check_init": _row(1.0, kd=check_s / 2),  # an init-made project's, against its 0.5 s target
        "application": {**_row(verify), "whole": _row(verify + 0.1)},  # the guarded steps against the bare work
        "hashing": {**_row(lock_uv), "snapshot": {"mib": 2048, "files": 8, "bytes": 2 << 30, "threads": 2},
                    "unchanged_s": {"times_s": [hash_s], "median_s": hash_s}},
        "cold": {"cold": _side(40.0), "warm": _side(10.0), "ratio": 4.0, "cold_steps_s": {}},
        "scaling": {
            "steps": list(run.SCALING_STEPS),
            "points": [{"texts": 32, "seconds": 5.0, "embed_step_s": 2.0, "embed_items_per_s": 16.0,
                        "determinism_step_s": 0.2, "determinism_texts": 32}],
            "line": {"fixed_s": 4.9, "per_item_ms": 6.0, "r2": 0.999},
            "embed_line": {"fixed_s": 1.9, "per_item_ms": 2.0, "r2": 0.998},
        },
    }
    return {
        "finished": "2026-11-30T00:00:00+0000",
        "platform": "cp311-linux_x86_64-cpu",
        "lock": "lockfiles/x.txt",
        "repeat": 3,
        "nox_backend": "uv",
        "rows": rows,
        "verdicts": table.verdicts(rows),
        "machine": {"cpu": "Test CPU", "cores": 2, "os": "Linux", "python": "3.11.7", "load_average": [0.1, 0.1, 0.1],
                    "load_average_after": [0.2, 0.2, 0.2], "others_share": 0.05},
    }


def test_verdicts_meet_and_miss_each_target() -> None:
    met = _record(rebuild=1.2, verify=1.15, lock_uv=1.3, check_s=1.0, job=1.1, hash_s=0.2)["verdicts"]
    assert all(v["met"] for v in met.values()) and set(met) == set(table.TARGETS)
    missed = _record(rebuild=1.21, verify=1.16, lock_uv=3.0, check_s=1.01, job=1.11, hash_s=0.21)["verdicts"]
    assert not any(v["met"] for v in missed.values())
    text = table.render_markdown(_record(rebuild=2.4, verify=1.1, lock_uv=2.6, check_s=0.5, job=2.2))
    assert "≤ 1.2x: MISSED (2.00x over)" in text and "≤ 1.15x: met" in text and "≤ 1.3x: MISSED (2.00x over)" in text
    assert "≤ 1.1x: MISSED (2.00x over)" in text
    assert "≤ 1.0 s: met (whole command)" in text
    assert "Test CPU, 2 cores" in text and "| 32 | 5.00s |" in text and "4.90s + 6.00 ms per text" in text
    assert "(0.99..1.21)" in text  # the spread of the pairs' ratios beside their median
    assert "the `settings` and `application` steps" in text and "2048 MiB snapshot (8 files" in text
    assert "checked again unchanged (the stat record reused, no file read): 0.050s (≤ 0.2 s: met)" in text
    assert "hashed 788 MiB/s (2 threads), `sha256sum` 2048 MiB/s" in text  # 2 GiB in 2.6 s and in 1 s


def test_rows_measured_alone_join_the_last_whole_run_with_their_date() -> None:
    whole = _record(rebuild=1.2, verify=1.1, lock_uv=1.3, check_s=0.5)
    del whole["rows"]["application"], whole["rows"]["hashing"]
    whole["verdicts"] = table.verdicts(whole["rows"])  # a record made before these rows: judged without them
    assert "application" not in whole["verdicts"] and "the `settings` and" not in table.render_markdown(whole)
    alone = {**_record(1.0, 1.3, 1.2, 0.5)["rows"]["application"], "measured": "2026-12-01T16:00:00+0000",
             "machine": {"load_average": [1.0, 1.0, 1.0]}}
    record = pieces.merged(whole, {"application": alone})
    assert record["rows"]["verify"] == whole["rows"]["verify"] and record["rows"]["application"]["alone"]
    assert not record["verdicts"]["application"]["met"]  # 1.3x against its 1.15x
    assert "(measured alone 2026-12-01, load average [1.0, 1.0, 1.0] before)" in table.render_markdown(record)
    with pytest.raises(timing.BenchError):
        pieces.merged(None, {"application": alone})


def test_pair_ratios_are_per_pair_and_cancel_a_shared_slowdown() -> None:
    # The second pair ran while the machine was twice as busy: both sides slowed, the pair's ratio did not.
    a = timing.Measure("a", "a", [2.0, 4.0, 2.2])
    b = timing.Measure("b", "b", [1.0, 2.0, 1.0])
    stats = timing.pair_stats(a, b)
    assert stats["ratio"] == 2.0 and stats["ratio_low"] == 2.0 and stats["ratio_high"] == 2.2 and stats["pairs"] == 3
    with pytest.raises(ValueError):  # unpaired runs are refused, never silently truncated
        timing.pair_stats(timing.Measure("a", "a", [1.0, 2.0]), timing.Measure("b", "b", [1.0]))


def test_fit_line_recovers_the_line_and_says_how_well_it_fits() -> None:
    xs = [32.0, 128.0, 512.0, 2048.0]
    line = timing.fit_line(xs, [4.0 + 0.006 * x for x in xs])
    assert line == {"fixed_s": 4.0, "per_item_ms": 6.0, "r2": 1.0}
    bent = timing.fit_line(xs, [4.0 + 0.00001 * x * x for x in xs])  # quadratic: a line fits it less well
    assert bent["r2"] < 0.99
    with pytest.raises(timing.BenchError):
        timing.fit_line([32.0, 32.0], [1.0, 2.0])


def test_bare_lock_command_is_the_header_command_runnable() -> None:
    root = Path("/p")
    recorded = ["MACOSX_DEPLOYMENT_TARGET=14.0", "uv", "pip", "compile", "--generate-hashes", "--output-file",
                "lockfiles/x.txt", "requirements/base.in"]
    argv = work._bare_lock(recorded, root / "lockfiles/x.txt", root / "seed.txt", root)
    assert isinstance(argv, list) and [str(a) for a in argv[1:]] == [
        "pip", "compile", "--generate-hashes", "--output-file", "/p/seed.txt", "requirements/base.in"]
    with pytest.raises(timing.BenchError):
        work._bare_lock(["pip-compile", "x.in"], root / "lockfiles/x.txt", root / "seed.txt", root)


def test_readme_section_is_replaced_between_markers_or_added(tmp_path: Path) -> None:
    project_root = copy_project(tmp_path / "project")
    readme = project_root / "docs" / "speed.md"
    readme.parent.mkdir(exist_ok=True)
    readme.write_text("# Title\n\nintro\n", encoding="utf-8")
    table.write(project_root, _record(2.0, 1.1, 3.0, 2.0))
    first = readme.read_text(encoding="utf-8")
    assert first.startswith("# Title\n\nintro\n") and first.count(table.README_START) == 1
    readme.write_text(first + "\n## After\n\nkept\n", encoding="utf-8")
    table.write(project_root, _record(1.05, 1.1, 1.1, 0.6))
    second = readme.read_text(encoding="utf-8")
    assert second.count(table.README_START) == 1 and second.count(table.README_END) == 1
    assert "## After\n\nkept" in second and "MISSED" not in second
    md = (project_root / "bench" / "latest.md").read_text(encoding="utf-8")
    assert (project_root / "bench" / "latest.json").exists() and md.split("\n\n", 1)[1] in second


def test_bench_is_beside_the_package_not_in_it() -> None:
    root = Path(__file__).resolve().parents[2]
    assert not (root / "kernodeck" / "bench.py").exists()
    proc = subprocess.run([sys.executable, "-m", "kernodeck", "bench"], cwd=root, capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 2 and "invalid choice: 'bench'" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "bench.run", "--sizes", "a,b"], cwd=root, capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 2 and "--sizes takes numbers" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "bench.run", "--only", "rebuild"], cwd=root, capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 2 and "--only takes verify, application, hashing, not rebuild" in proc.stderr
