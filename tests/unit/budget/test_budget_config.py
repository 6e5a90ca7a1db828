"""`[budget]`: its keys and their checks, the typed limits, and its authority (a project file
cannot raise a budget without a grant; the config file shows it as daemon-wide)."""

from __future__ import annotations

from pathlib import Path

import pytest

from anvild.config import ConfigFileError, load
from anvild.config.load import BudgetLimits, DailyLimit
from anvild.config.trust import authority_of
from anvild.session.project_config import DAEMON_WIDE

BUDGET = """\
[budget]
daily_usd = 20
daily_tokens = 5000000

[budget.roles.reviewer]
daily_tokens = 100000

[budget.convoys]
daily_usd = 2.5
"""


def _load(tmp_path: Path, text: str) -> BudgetLimits:
    user = tmp_path / "config.toml"
    user.write_text(text)
    return load(user_file=user, data_dir=tmp_path / "data", project=False).budget


def test_the_budget_table_becomes_typed_limits(tmp_path: Path) -> None:
    limits = _load(tmp_path, BUDGET)
    assert limits.daemon == DailyLimit(usd=20.0, tokens=5_000_000)
    assert limits.roles == {"reviewer": DailyLimit(tokens=100_000)}
    assert limits.convoy == DailyLimit(usd=2.5)
    assert limits.any


def test_no_budget_table_means_no_limits(tmp_path: Path) -> None:
    assert not _load(tmp_path, "").any


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[budget]\ndaily_usd = 0", "budget.daily_usd: expected a number of USD above 0"),
        ("[budget]\ndaily_usd = true", "budget.daily_usd: expected a number of USD above 0"),
        ("[budget]\ndaily_tokens = 1.5", "budget.daily_tokens: expected a positive integer"),
        ("[budget]\nmonthly_usd = 1", "budget.monthly_usd: unknown key; expected one of"),
        ("[budget.convoys]\nhourly = 1", "budget.convoys.hourly: unknown key"),
        ("[budget.roles.dev]\ndaily = 1", "budget.roles.dev.daily: unknown key"),
        ("[budget.roles]\ndev = 1", "budget.roles.dev: expected a table"),
    ],
)
def test_bad_budget_settings_say_what_to_write(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigFileError, match=message.replace(".", r"\.")):
        _load(tmp_path, text)


def test_budgets_carry_budget_authority_and_are_daemon_wide() -> None:
    assert authority_of(("budget", "daily_usd")) == "budget"
    assert authority_of(("budget", "roles", "reviewer", "daily_tokens")) == "budget"
    assert authority_of(("budget", "convoys", "daily_usd")) == "budget"
    assert "budget" in DAEMON_WIDE


def test_the_telemetry_table_and_its_authority(tmp_path: Path) -> None:
    user = tmp_path / "config.toml"
    user.write_text(
        '[telemetry]\notlp_endpoint = "http://127.0.0.1:4318"\nheaders_env = "OTEL_HDRS"\n'
        'service_name = "night-shift"\ncapture_content = true\n'
    )
    telemetry = load(user_file=user, data_dir=tmp_path / "data", project=False).telemetry
    assert telemetry.otlp_endpoint == "http://127.0.0.1:4318"
    assert (telemetry.headers_env, telemetry.service_name) == ("OTEL_HDRS", "night-shift")
    assert telemetry.capture_content
    assert authority_of(("telemetry", "otlp_endpoint")) == "endpoint"
    assert authority_of(("telemetry", "capture_content")) == "endpoint"
    assert authority_of(("telemetry", "headers_env")) == "credential"
    assert "telemetry" in DAEMON_WIDE
    user.write_text('[telemetry]\notlp_endpoint = "grpc://collector"\n')
    with pytest.raises(ConfigFileError, match=r"telemetry\.otlp_endpoint: expected an http"):
        load(user_file=user, data_dir=tmp_path / "data", project=False)
