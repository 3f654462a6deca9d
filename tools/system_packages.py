"""Install the Debian packages the course needs, when this machine allows it; else say how.

``make setup`` runs this with the system's Python (standard library only, before any venv);
``make test`` runs it with ``--tests``, which adds what only the tests need; ``make hub`` with
``--hub``, for JupyterHub's proxy alone:

- already installed: nothing to do;
- root, or sudo without a password: ``apt-get install`` them, saying what and why;
- otherwise: stop with the one command that installs them;
- not a Debian/Ubuntu system (no ``apt-get``): say what to install by hand and go on, since the
  data can also come from torchvision's download and grading runs without the sandbox.
"""

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass

WHY = {
    "dataset-fashion-mnist": "FashionMNIST's four files, so that the lessons run without internet",
    "bubblewrap": "the sandbox in which `make grade` runs each student's code",
    "chromium": "the browser in which the tests open every lesson in JupyterLab",
    "node-configurable-http-proxy": "the proxy in front of the course's JupyterHub (make hub)",
}
COURSE_PACKAGES = ["dataset-fashion-mnist", "bubblewrap"]
TEST_PACKAGES = [*COURSE_PACKAGES, "chromium"]
HUB_PACKAGES = ["node-configurable-http-proxy"]
OPTIONS = {"--tests": TEST_PACKAGES, "--hub": HUB_PACKAGES}


@dataclass
class Plan:
    """What to do: ``action`` is "nothing", "install", "ask" (cannot install) or "elsewhere"."""

    action: str
    packages: list
    prefix: list


def is_installed(package: str) -> bool:
    """dpkg's view of ``package``."""
    done = subprocess.run(["dpkg-query", "-W", "-f=${Status}", package],
                          capture_output=True, text=True)
    return done.returncode == 0 and done.stdout.strip().endswith(" installed")


def can_sudo() -> bool:
    """Whether sudo runs without asking for a password."""
    return bool(shutil.which("sudo")) and subprocess.run(
        ["sudo", "-n", "true"], capture_output=True).returncode == 0


def plan(packages, *, has_apt: bool, installed, is_root: bool, sudo_works) -> Plan:
    """Decide, given how to ask the system (functions, so that tests can stand in for it)."""
    if not has_apt:
        return Plan("elsewhere", list(packages), [])
    missing = [package for package in packages if not installed(package)]
    if not missing:
        return Plan("nothing", [], [])
    if is_root:
        return Plan("install", missing, [])
    if sudo_works():
        return Plan("install", missing, ["sudo", "-n"])
    return Plan("ask", missing, ["sudo"])


def install_command(chosen: Plan) -> list:
    return [*chosen.prefix, "apt-get", "install", "-y", "--no-install-recommends", *chosen.packages]


def explain(chosen: Plan) -> str:
    """What the student reads."""
    reasons = "\n".join(f"  {package}: {WHY[package]}" for package in chosen.packages)
    if chosen.action == "install":
        return f"Installing system packages the course needs:\n{reasons}"
    if chosen.action == "ask":
        command = " ".join([*chosen.prefix, "apt-get", "install", "-y", *chosen.packages])
        return (f"The course needs these system packages, and installing them needs root:\n"
                f"{reasons}\nRun this once, then `make` again:\n  {command}")
    if chosen.action == "elsewhere":
        return (f"No apt-get here: install these with your system's package manager if it has "
                f"them (the course also works without them: data/README.md, "
                f"docs/instructors/sandbox.md):\n{reasons}")
    return ""


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    packages = next((OPTIONS[option] for option in argv if option in OPTIONS), COURSE_PACKAGES)
    chosen = plan(packages, has_apt=bool(shutil.which("apt-get")),
                  installed=is_installed, is_root=os.geteuid() == 0, sudo_works=can_sudo)
    message = explain(chosen)
    if message:
        print(message, file=sys.stderr if chosen.action == "ask" else sys.stdout)
    if chosen.action == "ask":
        return 1
    if chosen.action == "install":
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        quiet = {"check": True, "env": env, "stdout": subprocess.DEVNULL}  # errors still reach stderr
        subprocess.run([*chosen.prefix, "apt-get", "update", "-qq"], **quiet)
        subprocess.run(install_command(chosen), **quiet)
    return 0


if __name__ == "__main__":
    sys.exit(main())
