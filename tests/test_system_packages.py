"""``make setup``'s decision about system packages, without touching the system."""

import importlib.util
import subprocess

import pytest

from graders.lessons import ROOT

spec = importlib.util.spec_from_file_location("system_packages", ROOT / "tools" / "system_packages.py")
system_packages = importlib.util.module_from_spec(spec)
spec.loader.exec_module(system_packages)
PACKAGES = ["dataset-fashion-mnist", "bubblewrap"]


def decide(*, has_apt=True, present=(), is_root=False, sudo=False):
    return system_packages.plan(PACKAGES, has_apt=has_apt, installed=lambda p: p in present,
                                is_root=is_root, sudo_works=lambda: sudo)


def test_nothing_to_do_when_everything_is_there():
    assert decide(present=PACKAGES).action == "nothing"


def test_root_installs_only_what_is_missing_and_says_why():
    chosen = decide(present=["bubblewrap"], is_root=True)
    assert (chosen.action, chosen.packages, chosen.prefix) == ("install", ["dataset-fashion-mnist"], [])
    assert "lessons run without internet" in system_packages.explain(chosen)


def test_passwordless_sudo_installs_through_sudo():
    chosen = decide(sudo=True)
    assert system_packages.install_command(chosen)[:4] == ["sudo", "-n", "apt-get", "install"]


def test_without_rights_it_stops_with_the_one_command_to_run():
    chosen = decide()
    assert chosen.action == "ask"
    assert "sudo apt-get install -y dataset-fashion-mnist bubblewrap" in system_packages.explain(chosen)


def test_without_apt_it_names_the_packages_and_goes_on():
    chosen = decide(has_apt=False)
    assert chosen.action == "elsewhere" and "bubblewrap" in system_packages.explain(chosen)


@pytest.mark.parametrize("is_root, expected", [(True, 0), (False, 1)])
def test_main_installs_as_root_and_stops_otherwise(monkeypatch, capsys, is_root, expected):
    commands = []
    monkeypatch.setattr(system_packages.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(system_packages, "is_installed", lambda package: False)
    monkeypatch.setattr(system_packages, "can_sudo", lambda: False)
    monkeypatch.setattr(system_packages.os, "geteuid", lambda: 0 if is_root else 1000)
    def run(command, **_):
        commands.append(command)
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(system_packages.subprocess, "run", run)
    assert system_packages.main([]) == expected
    if is_root:
        assert commands[-1][:2] == ["apt-get", "install"] and commands[-1][-2:] == PACKAGES
    else:
        assert commands == [] and "sudo apt-get install" in capsys.readouterr().err


def test_the_tests_also_need_chromium(monkeypatch):
    asked = []
    monkeypatch.setattr(system_packages, "plan", lambda packages, **_: asked.append(packages)
                        or system_packages.Plan("nothing", [], []))
    system_packages.main(["--tests"])
    system_packages.main([])
    assert asked == [PACKAGES + ["chromium"], PACKAGES]
