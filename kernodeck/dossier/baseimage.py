"""A container's base image: the reference ``FROM`` names, pinned by digest or a floating tag said to be one.

A tag such as ``python:3.11-slim`` moves: the OS, libc and Python patch under the same Dockerfile change with time,
so the system chain the procedure records would change under one file. A platform pins its base in
``[[tool.kernodeck.platforms]]`` (``image = "python:3.11-slim@sha256:<digest>"``, the digest shown by ``docker
buildx imagetools inspect python:3.11-slim``) or an export is given one (``--base-image``); without either, the
platform's Python image, ``python:<X.Y>-slim``, is written with a comment saying it floats.

The container carries the reference it was built from (``ENV KERNODECK_BASE_IMAGE``, OCI label
``org.opencontainers.image.base.name``): the verify run inside records it in the system chain (``container_image``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kernodeck.errors import ConfigError
from kernodeck.project.config import Project
from kernodeck.project.platforms import Platform

# The variable a container built by export carries (the in-env system step reads the same name: it cannot import
# this module, tests/unit/test_system.py holds the two together).
ENV_VAR = "KERNODECK_BASE_IMAGE"
# name[:tag][@sha256:<64 hex>]: a registry host with a port keeps its colon in the name part.
REFERENCE = re.compile(r"^[a-z0-9][a-z0-9._/:-]*(@sha256:[0-9a-f]{64})?$")
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")


@dataclass(frozen=True)
class BaseImage:
    reference: str  # what FROM names
    origin: str  # where it was declared, for the comment

    @property
    def pinned(self) -> bool:
        return DIGEST.search(self.reference) is not None

    def comment(self) -> str:
        """The line written above FROM: pinned (by what), or floating with how to pin it."""
        if self.pinned:
            return f"# base image pinned by digest ({self.origin})"
        return (f"# base image: {self.reference} is a floating tag ({self.origin}): the OS, libc and Python under it\n"
                '# change with time. Pin it: image = "NAME@sha256:DIGEST" in [[tool.kernodeck.platforms]]\n'
                f"# (digest: docker buildx imagetools inspect {self.reference}), or --base-image NAME@sha256:DIGEST")


def resolve(project: Project, plat: Platform, override: str | None = None) -> BaseImage:
    """``override`` (``--base-image``), else the platform's declared ``image``, else ``python:<X.Y>-slim``."""
    if override:
        return BaseImage(_checked(override, "--base-image"), "--base-image")
    declared = next((d.image for d in project.platforms if d.id == plat.id and d.image), "")
    if declared:
        return BaseImage(_checked(declared, f"image of platform {plat.id}"), "[[tool.kernodeck.platforms]] image")
    return BaseImage(f"python:{plat.python}-slim", "the platform's Python, no image declared")


def _checked(reference: str, where: str) -> str:
    if not REFERENCE.match(reference):
        raise ConfigError(f"{where} {reference!r} is not an image reference (NAME:TAG or NAME[:TAG]@sha256:DIGEST)",
                          tip='image = "python:3.11-slim@sha256:<64 hex digits>"')
    return reference
