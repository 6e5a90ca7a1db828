"""`[web]` in the user config: checked by the schema, read by `web_settings`, and authority
that a project file cannot take without a grant."""

from __future__ import annotations

from pathlib import Path

import pytest

from anvild.config import ConfigFileError, load
from anvild.config.trust import authority_of
from anvild.web import WebSettings, web_settings


def user(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def test_web_listen_and_allow_remote_come_from_the_user_config(tmp_path: Path) -> None:
    config = load(
        user_file=user(tmp_path, '[web]\nlisten = "0.0.0.0:8080"\nallow_remote = true\n'),
        data_dir=tmp_path,
        project=False,
    )
    settings = web_settings(config)
    assert settings.listen == "0.0.0.0:8080"
    assert settings.allow_remote is True
    unset = load(user_file=tmp_path / "none.toml", data_dir=tmp_path, project=False)
    assert web_settings(unset) == WebSettings()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[web]\nlisten = 8080\n", 'web.listen: expected an address HOST:PORT, e.g. "127.0.0.1'),
        ("[web]\nallow_remote = 1\n", "web.allow_remote: expected"),
        ("[web]\nport = 1\n", "port"),
    ],
)
def test_a_bad_web_table_names_the_key(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigFileError, match=message.replace(".", r"\.").replace("(", r"\(")):
        load(user_file=user(tmp_path, text), data_dir=tmp_path, project=False)


def test_the_web_keys_carry_authority() -> None:
    assert authority_of(("web", "listen")) == "listener"
    assert authority_of(("web", "allow_remote")) == "listener"
