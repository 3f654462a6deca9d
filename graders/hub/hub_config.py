"""JupyterHub's configuration for the course, from :class:`HubSettings`.

The hub runs as root and starts each user's JupyterLab as that user (real local accounts, each in
its home), from the users' Python (:mod:`graders.hub.environment`: the course from its wheel), within
that user's limits (:mod:`graders.hub.limits`). Who may log in is the roster; instructors are the
hub's admins. Each user's server gets its role's environment (:func:`role_environment`): its Jupyter
configuration (:mod:`graders.hub.nbgrader_roles`) and, for instructors, the repository's course.
A service token (``course-admin``) lets the tests and scripts drive the hub's REST API and users'
servers.

``<hub_dir>/state/jupyterhub_config.py`` is two lines that call :func:`configure` with the
settings that ``course hub serve`` wrote beside it.
"""

import ipaddress
import json
import os
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from graders.hub import limits
from graders.hub.roster import member
from graders.lessons import ROOT

AUTHENTICATORS = ("pam", "dummy")
DUMMY_ONLY_ON_LOOPBACK = (
    "The dummy authenticator lets whoever reaches the hub log in as anyone, the instructor included, "
    "with one shared password: it is for a demonstration on this machine only, on the loopback address "
    "(HUB_IP=127.0.0.1, --ip 127.0.0.1: the default). To serve other machines, log in with each "
    "account's own system password (HUB_AUTH=pam, --authenticator pam: the default) and put TLS in front.")
# Debian's Node.js libraries, where Debian's configurable-http-proxy finds them; a Node.js from
# elsewhere (NodeSource's, in a Debian package of the same name) does not look there by itself.
DEBIAN_NODE_MODULES = "/usr/share/nodejs"
ADMIN_SERVICE = "course-admin"
# access:servers: the tests drive users' servers (their kernels) through it
ADMIN_SCOPES = ["admin:users", "admin:servers", "admin:server_state", "list:users", "read:users",
                "access:servers"]
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
    bin_dir: str = str(Path(sys.executable).parent)  # the users' Python's (environment.users_bin)
    instructors_group: str = "course-instructors"  # may read the repository and take grading slots
    memory: str = "4G"  # per user's server, as JupyterHub's Spawner.mem_limit says it
    cpus: float = 2.0
    cull_idle_s: int = 3600  # a server idle this long is stopped; 0: never
    spawner: str = "auto"  # what holds a server to its limits (limits.SPAWNERS)

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


def on_loopback(ip: str) -> bool:
    """Whether ``ip`` (what the hub binds to) is reachable from this machine only."""
    try:
        return ipaddress.ip_address(ip).is_loopback
    except ValueError:
        return ip == "localhost"


def authenticator_problem(authenticator: str, ip: str) -> str:
    """Why the hub must not serve ``ip`` with ``authenticator``, or ""."""
    return DUMMY_ONLY_ON_LOOPBACK if authenticator == "dummy" and not on_loopback(ip) else ""


def role_environment(settings: HubSettings, role: str) -> dict:
    """What a user of ``role`` runs with: the users' Python first on the path, the role's Jupyter
    configuration, the lessons' quick version where asked. An instructor's Python also imports the
    course from the repository, which only instructors may read: ``course grade`` builds the class's
    gradebook from the solutions, which the wheel leaves out."""
    return {"PATH": f"{settings.bin_dir}:/usr/local/bin:/usr/bin:/bin",
            "JUPYTER_CONFIG_PATH": str(Path(settings.hub_dir) / "jupyter" / role),
            **({"PYTHONPATH": str(ROOT)} if role == "instructor" else {}),
            **({"COURSE_FAST": "1"} if settings.fast else {})}


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


def configure(c, settings_path) -> None:
    """Fill JupyterHub's config ``c`` from the settings saved at ``settings_path``."""
    from graders.hub.roster import read_roster

    settings = HubSettings.load(settings_path)
    if problem := authenticator_problem(settings.authenticator, settings.ip):
        raise ValueError(problem)
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

    c.Spawner.cmd = [str(Path(settings.bin_dir) / "jupyterhub-singleuser")]
    c.Spawner.args = list(settings.singleuser_args)
    c.Spawner.default_url = "/lab"
    c.Spawner.notebook_dir = "~"
    # a loaded machine (or the first start of JupyterLab) is slow: nbgrader's extensions load too
    c.Spawner.http_timeout = 120
    c.Spawner.start_timeout = 120
    # Nothing of root's own environment but the locale: a PYTHONPATH or VIRTUAL_ENV of root's would
    # point users' Python at the repository.
    c.Spawner.env_keep = ["LANG", "LC_ALL"]
    # torch starts a thread per core of the machine; the server has settings.cpus of them
    c.Spawner.environment = {"OMP_NUM_THREADS": str(max(1, int(settings.cpus)))}

    def role_configuration(spawner):
        person = member(settings.roster, spawner.user.name)
        if person is None:
            raise PermissionError(f"{spawner.user.name} is not on the course's roster ({settings.roster})")
        spawner.environment = {**spawner.environment, **role_environment(settings, person.role)}

    c.Spawner.pre_spawn_hook = role_configuration

    c.JupyterHub.services = [{"name": ADMIN_SERVICE, "api_token": secret(state / "admin_token")}]
    c.JupyterHub.load_roles = [{"name": ADMIN_SERVICE, "scopes": ADMIN_SCOPES, "services": [ADMIN_SERVICE]}]
    limits.configure(c, settings)


def write_config(settings: HubSettings) -> Path:
    """``jupyterhub_config.py`` in the state folder, beside the settings it reads."""
    path = settings.state / "jupyterhub_config.py"
    path.write_text(CONFIG_PY.format(settings=str(settings.save())))
    return path
