"""The written-text scan knows the declared index: its userinfo and query are refused, its public URL is not."""

from __future__ import annotations

import pytest

from kernodeck.sources import SecretInText, check_written, public_url

DECLARED = "https://carol:s3cr3t-variant@127.0.0.1:9/whl/cpu?token=t0k3n-value"


@pytest.mark.parametrize("secret", ["carol:s3cr3t-variant", "s3cr3t-variant", "token=t0k3n-value", "t0k3n-value"])
def test_declared_index_secret_refused(secret: str) -> None:
    text = f'{{"index": "declared (https://127.0.0.1:9/whl/cpu)", "commands": ["pip install {secret}"]}}'
    with pytest.raises(SecretInText, match="declared index") as caught:
        check_written(text, "kernodeck-complete.json", public=[public_url(DECLARED)], declared=[DECLARED])
    assert secret not in str(caught.value)  # the error names where the value came from, never the value


def test_declared_index_public_url_allowed() -> None:
    text = f"declared ({public_url(DECLARED)}) --extra-index-url {public_url(DECLARED)}"
    check_written(text, "kernodeck-complete.json", public=[public_url(DECLARED)], declared=[DECLARED])


def test_without_declared_the_secret_passes() -> None:
    """Negative control: the secret is caught through ``declared``, not by chance (it is in no variable here)."""
    check_written("pip install s3cr3t-variant", "kernodeck-complete.json")
