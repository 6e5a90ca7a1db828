"""Files shipped inside the anvild package, found with `importlib.resources`:

    roles/<role>.txt            the built-in role texts (`anvild.session.roles`)
    sandbox-roles/<role>.yaml   the built-in sandbox roles (`anvild.sandbox.roles`)
    scripts/                    the workflow scripts (`fanout`, `fanout.rc`, `DevReview`,
                                `Planning`, `conductor`), served at `agent/scripts/NAME`
                                (`anvild.tree.roles`); `scripts/NAME` in a checkout is
                                a symlink to each
    skills/                     skills `anvilctl auto` installs in a project (`.anvil/skills/`)
    llama-server                the recipe that builds, fetches and runs the embedded model
    llama-server.d/             its patch to llama.cpp (`anvild.daemon.llama`)

They are wherever the package is, a checkout or an installed wheel, and are nowhere else: no
copy outside the package, no path computed from another module's location. `main` is the
`anvil-llama-server` command, the recipe for an installed anvild.
"""

from __future__ import annotations

import os
import sys
from importlib import resources
from pathlib import Path

__all__ = [
    "LLAMA_SERVER",
    "ROLES",
    "SANDBOX_ROLES",
    "SCRIPTS",
    "SKILLS",
    "WORKFLOW_SCRIPTS",
    "main",
    "path",
]

ROLES = "roles"
SANDBOX_ROLES = "sandbox-roles"
SCRIPTS = "scripts"
SKILLS = "skills"
WORKFLOW_SCRIPTS = ("fanout", "fanout.rc", "DevReview", "Planning", "conductor")
LLAMA_SERVER = "llama-server"


def path(name: str) -> Path:
    """The shipped file or directory `name` on the file system. Wheel installers always unpack
    the package into directories, so this is a real path (a zip import is refused)."""
    found = resources.files(__name__) / name
    if not isinstance(found, Path):
        raise FileNotFoundError(
            f"anvild's {name} is inside an archive ({found}); install anvild with pip, pipx or "
            "uv, which unpack it"
        )
    return found


def main() -> None:
    """`anvil-llama-server COMMAND`: run the shipped recipe (`build`, `model`, `start`, `stop`,
    `status`, `path`, `env`) with bash, whatever the installer did to its mode bits."""
    script = str(path(LLAMA_SERVER))
    os.execvp("bash", ["bash", script, *sys.argv[1:]])
