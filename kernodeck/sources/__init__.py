"""Package sources: the machine's own (pip's and uv's configuration, PIP_*/UV_* variables) kept apart from anything
written.

A lockfile or dossier never holds an index URL, a find-links path or a credential of the machine that made it.
Remote sources are recorded as scheme and host only; local ones (paths, ``file://``) only as what kind of source
they are. Every text Kernodeck writes is checked against the values of every source and credential variable
(:func:`check_written`) before it is written; what it prints from its subprocesses goes through :func:`redact_text`.

- :mod:`.urls`: what of a URL may be shown, its normalised form, whether it parses or answers;
- :mod:`.config`: pip's and uv's configuration files and variables, read as they read them (each file once per
  process while its stat stays the same);
- :mod:`.index`: a variant's index or its mirror, and the installer options and variables that name them;
- :mod:`.redaction`: the secrets read from all of the above, and the checks and rewrites of a text against them.
"""

from __future__ import annotations

from kernodeck.errors import MalformedSource, SecretInText
from kernodeck.sources.index import (
    VariantIndex,
    index_args,
    index_of,
    indexes_asked,
    mirror_var,
    uv_environment,
    variant_index,
)
from kernodeck.sources.installer_config import (
    MIRROR_PREFIX,
    SOURCE_VARS,
    Source,
    config_bytes,
    machine_sources,
    pip_config,
    pip_config_files,
    pip_no_index,
    require_valid_sources,
    source_values,
    uv_config_files,
    uv_config_sources,
)
from kernodeck.sources.redaction import (
    Needle,
    Secrets,
    check_written,
    needles,
    redact_text,
    scrub_text,
    secrets,
)
from kernodeck.sources.urls import (
    PYPI,
    Base,
    host_of,
    is_local,
    malformed,
    normalise,
    public_url,
    reachable,
    redact_url,
    strip_credentials,
)

__all__ = [
    "MIRROR_PREFIX",
    "PYPI",
    "SOURCE_VARS",
    "Base",
    "MalformedSource",
    "Needle",
    "SecretInText",
    "Secrets",
    "Source",
    "VariantIndex",
    "check_written",
    "config_bytes",
    "host_of",
    "index_args",
    "index_of",
    "indexes_asked",
    "is_local",
    "machine_sources",
    "malformed",
    "mirror_var",
    "needles",
    "normalise",
    "pip_config",
    "pip_config_files",
    "pip_no_index",
    "public_url",
    "reachable",
    "redact_text",
    "redact_url",
    "require_valid_sources",
    "scrub_text",
    "secrets",
    "source_values",
    "strip_credentials",
    "uv_config_files",
    "uv_config_sources",
    "uv_environment",
    "variant_index",
]
