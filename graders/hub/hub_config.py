"""JupyterHub's configuration for the course, from :class:`HubSettings`.

The hub runs as root and starts each user's JupyterLab as that user (``LocalProcessSpawner``: real
local accounts, each in its home), from this environment, so that every kernel has the course's
helpers. Who may log in is the roster; instructors are the hub's admins. Each user's server gets
its role's Jupyter configuration (:mod:`graders.hub.nbgrader_roles`) on ``JUPYTER_CONFIG_PATH``.
A service token (``course-admin``) lets the tests and scripts drive the hub's REST API.

``<hub_dir>/state/jupyterhub_config.py`` is two lines that call :func:`configure` with the
settings that ``course hub serve`` wrote beside it.
"""

import json
import os
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from graders.hub.roster import member

AUTHENTICATORS = ("pam", "dummy")
# Debian's Node.js libraries, where Debian's configurable-http-proxy finds them; a Node.js from
# elsewhere (NodeSource's, in a Debian package of the same name) does not look there by itself.
DEBIAN_NODE_MODULES = "/usr/share/nodejs"
ADMIN_SERVICE = "course-admin"
ADMIN_SCOPES = ["admin:users", "admin:servers", "admin:server_state", "list:users", "read:users"]
CONFIG_PY = '''\
# Written by `make hub` (graders/hub/hub_config.py); edit that file, not this one.
from graders.hub.hub_config import configure

configure(c, {settings!r})
'''


@dataclass
class HubSettings:
    """Everything the hub's configuration depends on; saved as JSON in the state folder."""

    hub_dir: str  # world-readable: the roster, each role's Jupyter configuration
    exchange: str
    course_root: str
    ip: str = "127.0.0.1"
    port: int = 8000
    hub_port: int = 8081  # the hub's own API, behind the proxy
    proxy_api_port: int = 8001
    authenticator: str = "pam"
    fast: bool = False  # students' kernels run the lessons' quick version (COURSE_FAST=1)
    singleuser_args: list = field(default_factory=list)
    bin_dir: str = str(Path(sys.executable).parent)

    @property
    def state(self) -> Path:
        return Path(self.hub_dir) / "state"

    @property
    def roster(self) -> Path:
        return Path(self.hub_dir) / "roster.csv"

    @property
    def url(self) -> str:
        return f"http://{'127.0.0.1' if self.ip in ('', '0.0.0.0') else self.ip}:{self.port}"

    def save(self) -> Path:
        path = self.state / "hub_settings.json"
        path.write_text(json.dumps(asdict(self), indent=1))
        return path

    @classmethod
    def load(cls, path) -> "HubSettings":
        return cls(**json.loads(Path(path).read_text()))


def secret(path: Path) -> str:
    """A secret kept in a root-only file of the state folder."""
    return Path(path).read_text().strip()


def proxy_environment() -> dict:
    """This process's environment, with Debian's Node.js libraries on the proxy's module path."""
    paths = [path for path in os.environ.get("NODE_PATH", "").split(os.pathsep) if path]
    if Path(DEBIAN_NODE_MODULES).is_dir() and DEBIAN_NODE_MODULES not in paths:
        paths.append(DEBIAN_NODE_MODULES)
    return {**os.environ, **({"NODE_PATH": os.pathsep.join(paths)} if paths else {})}


def proxy_problem() -> str:
    """Why JupyterHub's proxy cannot start here, in words, or "" when it can."""
    command = shutil.which("configurable-http-proxy")
    if not command:
        return ("configurable-http-proxy is missing: `make hub` installs it (Debian's "
                "node-configurable-http-proxy: apt-get install node-configurable-http-proxy), or "
                "`npm install -g configurable-http-proxy`")
    done = subprocess.run([command, "--version"], env=proxy_environment(), capture_output=True, text=True)
    if done.returncode != 0:
        return f"{command} does not start: {(done.stderr or done.stdout).strip().splitlines()[-1:]}"
    return ""


def role_folder(settings: HubSettings, user: str) -> Path | None:
    """The Jupyter configuration folder of ``user``'s role, ``None`` for someone not enrolled."""
    person = member(settings.roster, user)
    return None if person is None else Path(settings.hub_dir) / "jupyter" / person.role


def configure(c, settings_path) -> None:
    """Fill JupyterHub's config ``c`` from the settings saved at ``settings_path``."""
    from graders.hub.roster import read_roster

    settings = HubSettings.load(settings_path)
    members = read_roster(settings.roster)
    state = settings.state
    c.JupyterHub.bind_url = f"http://{settings.ip}:{settings.port}"
    c.JupyterHub.hub_bind_url = f"http://127.0.0.1:{settings.hub_port}"
    c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{settings.proxy_api_port}"
    c.ConfigurableHTTPProxy.command = [shutil.which("configurable-http-proxy") or "configurable-http-proxy"]
    os.environ.update(proxy_environment())  # the hub starts the proxy with its own environment
    c.JupyterHub.db_url = f"sqlite:///{state / 'jupyterhub.sqlite'}"
    c.JupyterHub.cookie_secret_file = str(state / "jupyterhub_cookie_secret")
    c.JupyterHub.pid_file = str(state / "jupyterhub.pid")

    c.JupyterHub.authenticator_class = settings.authenticator
    c.PAMAuthenticator.open_sessions = False  # no login session to open: the spawner switches user
    if settings.authenticator == "dummy":
        c.DummyAuthenticator.password = secret(state / "dummy_password")
    c.Authenticator.allowed_users = {person.user for person in members}
    c.Authenticator.admin_users = {person.user for person in members if person.role == "instructor"}

    c.JupyterHub.spawner_class = "jupyterhub.spawner.LocalProcessSpawner"
    c.Spawner.cmd = [str(Path(settings.bin_dir) / "jupyterhub-singleuser")]
    c.Spawner.args = list(settings.singleuser_args)
    c.Spawner.default_url = "/lab"
    c.Spawner.notebook_dir = "~"
    # a loaded machine (or the first start of JupyterLab) is slow: nbgrader's extensions load too
    c.Spawner.http_timeout = 120
    c.Spawner.start_timeout = 120
    c.Spawner.environment = {"PATH": f"{settings.bin_dir}:/usr/local/bin:/usr/bin:/bin",
                             **({"COURSE_FAST": "1"} if settings.fast else {})}

    def role_configuration(spawner):
        folder = role_folder(settings, spawner.user.name)
        if folder is None:
            raise PermissionError(f"{spawner.user.name} is not on the course's roster ({settings.roster})")
        spawner.environment = {**spawner.environment, "JUPYTER_CONFIG_PATH": str(folder)}

    c.Spawner.pre_spawn_hook = role_configuration

    c.JupyterHub.services = [{"name": ADMIN_SERVICE, "api_token": secret(state / "admin_token")}]
    c.JupyterHub.load_roles = [{"name": ADMIN_SERVICE, "scopes": ADMIN_SCOPES, "services": [ADMIN_SERVICE]}]


def write_config(settings: HubSettings) -> Path:
    """``jupyterhub_config.py`` in the state folder, beside the settings it reads."""
    path = settings.state / "jupyterhub_config.py"
    path.write_text(CONFIG_PY.format(settings=str(settings.save())))
    return path
