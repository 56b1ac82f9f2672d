"""The wall's protocol (kernodeck/inenv/protocol.py): one definition of the step names, statuses, layers and JSON keys,
imported by both sides; every literal the in-env side writes is one of them, and a planted stranger is caught."""

from __future__ import annotations

import ast
import dataclasses
import shutil
import sys
from pathlib import Path

import pytest

from kernodeck.inenv import protocol
from kernodeck.inenv.steptable import StepName
from kernodeck.upgrade import bisect
from kernodeck.verify import record
from kernodeck.verify.steps import in_env
from tests.helpers import wall

ROOT = Path(__file__).resolve().parents[2]
INENV = ROOT / "kernodeck" / "inenv"
# in-env scripts with a config of their own (not run-config.json): drift's pairs, compare_outputs' arrays
OWN_CONFIG = {"drift.py", "compare_outputs.py"}


def _const(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _layer_literal(node: ast.AST) -> str | None:
    """The layer a node names when it is written in place: a literal, an f-string's literal head, ``Layer.X``."""
    if isinstance(node, ast.JoinedStr) and node.values and _const(node.values[0]) is not None:
        head = _const(node.values[0]) or ""
        return head if ":" in head or len(node.values) == 1 else None
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "Layer":
        return protocol.Layer[node.attr].value if node.attr in protocol.Layer.__members__ else f"Layer.{node.attr}"
    return _const(node)


def _call_name(node: ast.Call) -> str:
    return getattr(node.func, "id", None) or getattr(node.func, "attr", "")


def _is_config(node: ast.AST) -> bool:
    return (isinstance(node, ast.Name) and node.id == "config") or (
        isinstance(node, ast.Attribute) and node.attr == "config")


def strangers(path: Path) -> list[str]:
    """Every step-name, status, layer or run-config key literal in ``path`` that the protocol does not define."""
    found: list[str] = []
    config_keys = path.name not in OWN_CONFIG
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        layers: list[ast.AST] = []
        statuses: list[ast.AST] = []
        if isinstance(node, ast.Call):
            if _call_name(node) in ("CheckFailed", "fail") and len(node.args) > 1:
                layers.append(node.args[1])
            layers += [k.value for k in node.keywords if k.arg == "layer"]
            statuses += [k.value for k in node.keywords if k.arg == "status"]
            if (config_keys and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                    and _is_config(node.func.value) and node.args):
                key = _const(node.args[0])
                if key is not None and key not in protocol.CONFIG_KEYS:
                    found.append(f"{path.name}:{node.lineno}: run-config key {key!r}")
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                (layers if _const(key) == "layer" else statuses if _const(key) == "status" else []).append(value)
        elif isinstance(node, ast.arguments):  # a default such as ``layer: str = "application"``
            named = [*node.posonlyargs, *node.args][-len(node.defaults):] if node.defaults else []
            layers += [d for a, d in zip(named, node.defaults, strict=True) if a.arg == "layer"]
            layers += [d for a, d in zip(node.kwonlyargs, node.kw_defaults, strict=True) if a.arg == "layer" and d]
        elif isinstance(node, ast.Subscript) and config_keys and _is_config(node.value):
            key = _const(node.slice)
            if key is not None and key not in protocol.CONFIG_KEYS:
                found.append(f"{path.name}:{node.lineno}: run-config key {key!r}")
        elif isinstance(node, ast.Return) and isinstance(node.value, ast.Attribute):
            layers.append(node.value)  # _layer_of's ``return Layer.X``
        for value in layers:
            layer = _layer_literal(value)
            if layer is not None and not protocol.is_layer(layer):
                found.append(f"{path.name}:{value.lineno}: layer {layer!r}")
        for value in statuses:
            status = _const(value)
            if status is not None and status not in protocol.STATUSES:
                found.append(f"{path.name}:{value.lineno}: status {status!r}")
    return found


def step_tables(path: Path) -> list[list[ast.AST]]:
    """The step names each step table names besides THE table (kernodeck/inenv/steptable.py, whose rows are the
    ``StepName`` members): the ``STEPS`` dict of a runner that kept its own, calibrate's ``steps`` list of pairs."""
    tables = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        names = {t.id for t in targets if isinstance(t, ast.Name)}
        if "STEPS" in names and isinstance(node.value, ast.Dict):
            tables.append([k for k in node.value.keys if k is not None])
        elif "steps" in names and isinstance(node.value, ast.List):
            tables.append([e.elts[0] for e in node.value.elts if isinstance(e, ast.Tuple) and e.elts])
    return tables


def test_every_in_env_literal_comes_from_the_protocol() -> None:
    files = sorted(INENV.glob("*.py"))
    assert len(files) >= 10
    assert [s for path in files for s in strangers(path)] == []


def test_the_step_tables_name_the_protocols_steps() -> None:
    assert step_tables(INENV / "steptable.py") == []  # its rows are StepName's members: no name written twice
    assert step_tables(INENV / "calibrate.py") == []  # a variation runs the rows flagged ``variation``


def test_a_runner_keeping_its_own_step_list_is_caught(tmp_path: Path) -> None:
    planted = tmp_path / "calibrate.py"
    planted.write_text("steps = [(StepName.SETTINGS, settings_step), (StepName.SYSTEM, lambda: system.run(ctx))]\n",
                       encoding="utf-8")
    assert [[ast.unparse(k) for k in table] for table in step_tables(planted)] == [
        ["StepName.SETTINGS", "StepName.SYSTEM"]]


@pytest.mark.parametrize(("line", "what"), [
    ('raise CheckFailed("x", "gpu-melted")', "layer 'gpu-melted'"),
    ('raise CheckFailed(f"x {y}", f"opreator:{op}")', "layer 'opreator:'"),
    ('raise CheckFailed("x", Layer.MELTED)', "layer 'Layer.MELTED'"),
    ('def fail(message, layer="gremlins"):\n    pass', "layer 'gremlins'"),
    ('result.update(status="done")', "status 'done'"),
    ('result = {"status": "ok", "layer": "elsewhere"}', "status 'ok'"),
    ('root = ctx.config["project_dir"]', "run-config key 'project_dir'"),
    ('mode = config.get("modus")', "run-config key 'modus'"),
])
def test_a_planted_stranger_is_caught(tmp_path: Path, line: str, what: str) -> None:
    good = tmp_path / "good.py"
    good.write_text('raise CheckFailed(f"x {op}", f"operator:{op}")\n'
                    'result.update(status="not-run", layer=Layer.WEIGHTS)\nconfig.get("mode")\n', encoding="utf-8")
    assert strangers(good) == []
    planted = tmp_path / "planted.py"
    planted.write_text(line + "\n", encoding="utf-8")
    assert any(what in s for s in strangers(planted)), strangers(planted)


def test_a_step_table_naming_a_literal_is_caught(tmp_path: Path) -> None:
    planted = tmp_path / "runner.py"
    planted.write_text('STEPS = {StepName.SETTINGS: ("settings", "run", "t"), "warmup": ("x", "run", "t")}\n',
                       encoding="utf-8")
    table, = step_tables(planted)
    assert [isinstance(k, ast.Attribute) for k in table] == [True, False]


def test_the_orchestrator_reads_with_the_protocols_names() -> None:
    assert protocol.Status is protocol.Status and protocol.Layer is protocol.Layer
    # the layers the in-env side attributes failures to are the report's too (they had drifted apart)
    assert {"weights", "application", "unknown"} <= {layer.value for layer in protocol.Layer}
    assert tuple(s.value for s in StepName) == in_env.IN_ENV_STEPS
    assert set(in_env.REFERENCE_STEPS) < set(StepName) and set(bisect.STEPS) < set(StepName)
    # every key a step file holds is a field of the orchestrator's Step, which reads it back (Step.from_dict)
    assert {f.name for f in dataclasses.fields(record.Step)} >= protocol.STEP_KEYS
    assert in_env.InEnvPhases().feed("[kernodeck] compare: not-run in 0.00s") is None
    assert in_env.InEnvPhases().feed("[kernodeck] compare: tolerance") == "kernodeck: compare: tolerance"


def test_a_layer_may_be_refined_after_a_colon() -> None:
    assert protocol.is_layer("operator:matmul") and protocol.is_layer("weights")
    assert not protocol.is_layer("matmul:operator") and not protocol.is_layer("")


def test_the_protocol_needs_only_the_standard_library(tmp_path: Path) -> None:
    imported = wall.imports_of(ROOT, INENV / "protocol.py")
    assert imported and all(name.split(".")[0] in sys.stdlib_module_names or name == "__future__" for name in imported)
    # the orchestrator may import it (report does) because it needs no in-env package: planted, numpy is a breach
    shutil.copytree(ROOT / "kernodeck", tmp_path / "kernodeck", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "checks", tmp_path / "checks")
    assert wall.breaches(tmp_path) == []
    protocol_copy = tmp_path / "kernodeck" / "inenv" / "protocol.py"
    protocol_copy.write_text(protocol_copy.read_text(encoding="utf-8") + "\nimport numpy\n", encoding="utf-8")
    assert any("in-env module that needs numpy" in str(b) for b in wall.breaches(tmp_path))


def _key(node: ast.AST | None) -> str:
    """A run-config key written as a literal or as ``ConfigKey.X`` ("?" for anything else)."""
    if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "ConfigKey"
            and node.attr in protocol.ConfigKey.__members__):
        return protocol.ConfigKey[node.attr].value
    return _const(node) or "?"


def verify_config_keys(source: str) -> set[str]:
    """The run-config keys the run builder writes: ``config["k"] = …`` (or ``config[ConfigKey.K]``),
    ``config.update(k=…)`` or ``config.update({"k": …})``, ``{**config, "k": …}``."""
    keys: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store)
                and (_is_config(node.value) or getattr(node.value, "id", "") == "run_config")):
            keys.add(_key(node.slice))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "update"
              and getattr(node.func.value, "id", "") in ("run_config", "config")):
            keys.update(k.arg for k in node.keywords if k.arg)
            keys.update(_key(k) for a in node.args if isinstance(a, ast.Dict) for k in a.keys if k is not None)
        elif isinstance(node, ast.Dict) and any(k is None and _is_config(v) for k, v in zip(node.keys, node.values,
                                                                                              strict=True)):
            keys.update(_const(k) or "?" for k in node.keys if k is not None)  # {**config, "steps": …}
    return keys


def test_the_orchestrators_run_config_uses_the_protocols_keys(tmp_path: Path) -> None:
    from kernodeck.project import app_contract
    from kernodeck.project.config import load_project
    from kernodeck.runformat import manifest
    from tests.helpers.project import copy_project

    project = load_project(copy_project(tmp_path / "p"))
    app = app_contract.load(project.root)
    verify = ROOT / "kernodeck" / "verify"  # the run builder writes it, the in-env phase adds "steps"
    written = set().union(*(verify_config_keys((verify / f).read_text(encoding="utf-8"))
                            for f in ("runbuild.py", "steps/in_env.py")))
    assert {"steps", "project_root", "mode", "resume"} <= written
    assert {*manifest.load(project).run_config(project, app), *written} <= protocol.CONFIG_KEYS
    assert verify_config_keys('run_config.update(modus="x")\nrun_config["projekt"] = 1\n') == {"modus", "projekt"}
    assert verify_config_keys('config.update({ConfigKey.MODE: 1, "projekt": 2})\nconfig[ConfigKey.NEU] = 1\n') == {
        "mode", "projekt", "?"}
