"""Configuration: the user's trusted config, a project's instruction/data config, and the trust
grants between them (DESIGN section 9).

- `anvild.config.schema`: the file format; each file is validated on its own, and errors name
  the file, the key and what was expected.
- `anvild.config.trust`: which keys carry authority, and the digest-bound trust grants.
- `anvild.config.load`: built-in defaults, user file and project file merged with the source and
  trust level of every key; builds the model registry from trusted values only.
- `anvild.config.report`: each effective setting with where it came from (a session's `config`).
- `anvild.config.check`: the configured model names and their keys, checked at the daemon's
  start (`check_models`).
- `anvild.config.hosts`: which listen hosts are loopback (the 9P listeners and the web board).

This package may import `anvild.llm` (it builds the registry); `anvild.llm` never imports it.
"""

from anvild.config.check import check_models
from anvild.config.load import (
    Config,
    ConfigWarning,
    ContextLimits,
    Instruction,
    Permissions,
    ProjectFile,
    ServerLimits,
    SessionLimits,
    Source,
    Trust,
    find_project_config,
    load,
    merge_project,
    user_config_file,
    user_data_dir,
)
from anvild.config.schema import ConfigFileError
from anvild.config.trust import Grant, TrustStore, authority_of, digest

__all__ = [
    "Config",
    "ConfigFileError",
    "ConfigWarning",
    "ContextLimits",
    "Grant",
    "Instruction",
    "Permissions",
    "ProjectFile",
    "ServerLimits",
    "SessionLimits",
    "Source",
    "Trust",
    "TrustStore",
    "authority_of",
    "check_models",
    "digest",
    "find_project_config",
    "load",
    "merge_project",
    "user_config_file",
    "user_data_dir",
]
