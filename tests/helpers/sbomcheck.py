"""An SBOM checked against the CycloneDX schema, offline."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any


def validator() -> Any:
    """The CycloneDX 1.6 JSON schema as cyclonedx-python-lib ships it, its two references resolved locally."""
    from jsonschema import Draft7Validator
    from referencing import Registry, Resource

    folder = resources.files("cyclonedx.schema._res")
    load = lambda name: json.loads(folder.joinpath(name).read_text(encoding="utf-8"))  # noqa: E731
    schema = load("bom-1.6.SNAPSHOT.schema.json")
    base = schema["$id"].rsplit("/", 1)[0]
    registry = Registry().with_resources(
        (f"{base}/{name}", Resource.from_contents(load(name)))
        for name in ("spdx.SNAPSHOT.schema.json", "jsf-0.82.SNAPSHOT.schema.json")
    )
    return Draft7Validator(schema, registry=registry)


def errors(document: dict[str, Any]) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator().iter_errors(document)]
