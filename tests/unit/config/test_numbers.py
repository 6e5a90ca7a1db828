"""Number-valued keys share one check: an int or float (never a boolean) inside the key's range,
so NaN, which compares false with everything, is refused wherever a range is asked for."""

from __future__ import annotations

import pytest

from anvild.config.schema import ConfigFileError, parse_bytes


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "[models.m]\npricing.input = nan",
            "models.m.pricing.input: expected a number of USD per million tokens (0 or more), "
            "got float nan",
        ),
        (
            "[sessions]\nreap_delay = nan",
            "sessions.reap_delay: expected a number of seconds (0 or more; 0 means at once)",
        ),
        ("[budget]\ndaily_usd = nan", "budget.daily_usd: expected a number of USD above 0"),
        ("[context]\nclear_at = true", "context.clear_at: expected a percentage of the window"),
    ],
)
def test_out_of_range_numbers_are_refused_with_the_key(text: str, message: str) -> None:
    with pytest.raises(ConfigFileError) as info:
        parse_bytes(text.encode(), "c.toml")
    assert f"c.toml: {message}" in str(info.value)


def test_numbers_in_range_are_kept_as_floats() -> None:
    layer = parse_bytes(
        b"[models.m]\npricing.input = 3\n[sessions]\nreap_delay = 0\nturn_deadline = inf\n",
        "c.toml",
    )
    assert layer[("models", "m", "pricing", "input")] == 3.0
    assert isinstance(layer[("models", "m", "pricing", "input")], float)
    assert layer[("sessions", "reap_delay")] == 0.0
    assert layer[("sessions", "turn_deadline")] == float("inf")
