"""Package sources (kernodeck/sources/): credentials redacted, pip's sources mapped to uv's."""

from __future__ import annotations

from kernodeck.sources import Source, redact_text, redact_url, strip_credentials, uv_environment


def test_redaction() -> None:
    assert redact_url("https://user:s3cret@host/simple") == "https://***@host/simple"
    assert redact_url("file:///opt/pypi/simple") == "<local>"
    assert "s3cret" not in redact_text("ERROR: cannot reach https://u:s3cret@h/x and http://tok@h2/y")
    assert Source("find-links", "/opt/wheels").redacted() == "find-links <local path>"
    assert strip_credentials("https://u:s3cret@h/whl/cpu/t.whl") == "https://h/whl/cpu/t.whl"
    assert strip_credentials("https://h/x") == "https://h/x"


def test_uv_environment_maps_pip_sources() -> None:
    env = uv_environment(
        [Source("find-links", "/w"), Source("extra-index-url", "file:///a"), Source("index-url", "https://i/simple")]
    )
    assert (
        env["UV_FIND_LINKS"] == "/w"
        and env["UV_INDEX"] == "file:///a"
        and env["UV_DEFAULT_INDEX"] == "https://i/simple"
    )
    assert env["UV_INDEX_STRATEGY"] == "unsafe-best-match"
    assert uv_environment([]) == {}
