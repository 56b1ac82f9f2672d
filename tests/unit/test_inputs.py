"""A lock's inputs (kernodeck/lock/inputs.py): the resolution date, its forms and its refusals."""

from __future__ import annotations

import datetime as dt

import pytest

from kernodeck.errors import ConfigError
from kernodeck.lock import inputs


def test_a_date_is_midnight_utc_and_a_bad_or_future_one_is_refused() -> None:
    assert inputs.as_of_instant("2024-06-01") == "2024-06-01T00:00:00Z"
    assert inputs.as_of_instant("2024-06-01T12:30:00Z") == "2024-06-01T12:30:00Z"
    for bad in ("2024-6-1", "yesterday", "2024-06-01T12:30:00+02:00", "2024-13-01"):
        with pytest.raises(ConfigError, match="is not a date"):
            inputs.as_of_instant(bad)
    tomorrow = (dt.datetime.now(dt.UTC) + dt.timedelta(days=2)).strftime("%Y-%m-%d")
    with pytest.raises(ConfigError, match="in the future"):
        inputs.as_of_instant(tomorrow)
