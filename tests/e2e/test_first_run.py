"""A new user's first run on Macs as they come: the defaults, the env stage's default path
(a venv from a Python found on every Mac), a Mac without a Python for mlx, a Mac without the
Command Line Tools. Nothing but the inventory and the defaults (python_env=None)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path

import pytest
import tomllib

from tests.e2e.runner import ROOT, defaults, host_vars, is_mutating, lab_lock, lab_vars, run_site

pytestmark = [pytest.mark.sim, pytest.mark.slow]

WOULD = "Say what the env stage would do"
VENV = "/srv/admin/mlx-cluster/venv"


@contextmanager
def mac_as(cluster, host, **overrides):
    """A freshly reset cluster whose `host` is set as `overrides` say, reset again after."""
    cluster.reset()
    cluster.set_host(host, **overrides)
    try:
        yield
    finally:
        cluster.reset()


def mutations(cluster):
    return {h: [a for a in cluster.argv_log(h) if is_mutating(a)] for h in cluster.hosts}


def test_a_fresh_cluster_dry_run_with_the_defaults_passes_and_says_what_the_env_stage_would_do(sim_cluster):
    cluster = sim_cluster("pair")
    cluster.reset()
    cluster.exec("m1", ["rm", "-rf", VENV], check=True)
    cluster.exec("m2", ["rm", "-rf", VENV], check=True)
    cluster.clear_argv_logs()
    dry = run_site(cluster, check=True, diff=True, python_env=None)
    assert dry.rc == 0, dry.failures()
    said = {r["host"]: r["res"]["msg"] for r in dry.results(WOULD)}
    assert set(said) == {"m1", "m2"}, said
    minor = cluster.python_minor()
    for msg in said.values():
        assert f"would make the venv {VENV} from /opt/homebrew/bin/python{minor}" in msg, msg
        assert "mlx==0.32.4, mlx-lm==0.32.2, prometheus-client==0.26.0 by hash (the lock " in msg, msg
    assert mutations(cluster) == {"m1": [], "m2": []}
    for host in cluster.hosts:
        assert cluster.exec(host, ["test", "-e", VENV]).returncode == 1  # nothing made


def test_the_venv_is_made_from_the_lab_mirror_then_left_alone(sim_cluster):
    cluster = sim_cluster("pair")
    cluster.reset()
    for host in cluster.hosts:  # (another test's run may have made it already)
        cluster.exec(host, ["rm", "-rf", VENV], check=True)
    lab = lab_vars(cluster)
    # A wheel on the mirror that differs from the one the lock was made from: refused, on every Mac
    [served] = (cluster.state_dir / "pypi" / "simple" / "mdurl").glob("*.whl")
    original = served.resolve()
    served.unlink()
    served.write_bytes(original.read_bytes() + b"\0")
    try:
        tampered = run_site(cluster, tags=["env"], python_env=None, extravars=lab, timeout=900)
    finally:
        served.unlink()
        served.symlink_to(original)
    assert tampered.rc != 0
    refused = {h: msg for h, task, msg in tampered.failures() if task == "Stop on a Mac where pip could not install"}
    assert set(refused) == set(cluster.hosts), tampered.failures()
    assert all(
        "DO NOT MATCH THE HASHES" in msg and "mdurl" in msg and "Fix: a file on http://" in msg and h in msg
        for h, msg in refused.items()
    ), refused
    first = run_site(cluster, tags=["env"], python_env=None, extravars=lab, timeout=900)
    assert first.rc == 0, first.failures()
    made = {
        r["host"] for r in first.results("Install the pinned mlx and mlx-lm into the venv") if r["res"].get("changed")
    }
    assert made == set(cluster.hosts), made
    [choice] = [r["res"]["msg"] for r in first.results("Show the base Python of the venv")]
    assert f"Python {cluster.python_minor()} on every Mac" in choice, choice
    versions = json.loads((cluster.state_dir / "artifacts" / "versions.json").read_text())
    assert {h: (v["mlx"], v["mlx_lm"], v["executable"]) for h, v in versions.items()} == {
        h: ("0.32.4", "0.32.2", f"{VENV}/bin/python") for h in cluster.hosts
    }
    again = run_site(cluster, tags=["env"], python_env=None, extravars=lab)
    assert again.rc == 0, again.failures()
    assert again.changed() == 0, again.stats
    # every pin read in place: no pip at all
    assert again.results("Install the pinned mlx and mlx-lm into the venv") == []
    assert json.loads((cluster.state_dir / "artifacts" / "versions.json").read_text()) == versions

    # m2's venv outlives the Python it was made from (`brew uninstall`, a python.org version
    # removed): its bin/python leads to a file that is gone. The stage makes it again there,
    # emptied first, but only when the directory holds nothing but a venv.
    minor = cluster.python_minor()
    gone = f"/opt/homebrew/Cellar/python@{minor}/{minor}.0/bin/python{minor}"
    cluster.exec("m2", ["ln", "-sfn", gone, f"{VENV}/bin/python{minor}"], check=True)
    cluster.exec("m2", ["touch", f"{VENV}/lib/left-by-the-old-venv"], check=True)
    cluster.exec("m2", ["mkdir", f"{VENV}/models"], check=True)  # not a venv's: nothing is emptied
    refused = run_site(cluster, tags=["env"], python_env=None, extravars=lab, check=True)
    stops = {
        h: m for h, task, m in refused.failures() if task == "Stop on a Mac whose broken venv holds more than a venv"
    }
    assert set(stops) == {"m2"}, refused.failures()
    assert f"{VENV} holds more than a venv (models): it is not emptied" in stops["m2"], stops
    assert "Fix: set python_env_venv_dir to a directory of the venv's own" in stops["m2"], stops
    cluster.exec("m2", ["rmdir", f"{VENV}/models"], check=True)
    dry = run_site(cluster, tags=["env"], python_env=None, extravars=lab, check=True, diff=True)
    assert dry.rc == 0, dry.failures()
    would = {r["host"]: r["res"]["msg"] for r in dry.results("Say what the env stage would do")}
    assert set(would) == {"m2"}, would
    assert f"would make the venv {VENV} again, emptied first (its Python no longer starts:" in would["m2"], would
    assert "No such file" in would["m2"] or "not found" in would["m2"], would
    assert cluster.exec("m2", ["test", "-e", f"{VENV}/lib/left-by-the-old-venv"]).returncode == 0  # nothing changed
    remade = "Make the venv again where its Python no longer starts (its base Python was removed or moved)"
    healed = run_site(cluster, tags=["env"], python_env=None, extravars=lab, timeout=900)
    assert healed.rc == 0, healed.failures()
    assert {r["host"] for r in healed.results(remade) if r["res"].get("changed")} == {"m2"}
    assert {
        r["host"] for r in healed.results("Install the pinned mlx and mlx-lm into the venv") if r["res"].get("changed")
    } == {"m2"}
    assert cluster.exec("m2", ["test", "-e", f"{VENV}/lib/left-by-the-old-venv"]).returncode == 1
    assert cluster.exec("m2", [f"{VENV}/bin/python", "-c", "import mlx_lm"]).returncode == 0
    assert json.loads((cluster.state_dir / "artifacts" / "versions.json").read_text()) == versions


def test_a_mac_without_a_python_for_mlx_is_named_by_the_preflight_before_anything_changes(sim_cluster):
    cluster = sim_cluster("pair")
    with mac_as(cluster, "m2", pythons=[]):
        cluster.clear_argv_logs()
        run = run_site(cluster, tags=["rdma_check"], python_env=None)
        assert run.rc != 0
        text = run.preflight_summary()
        minor = cluster.python_minor()
        line = next(ln for ln in text.splitlines() if "m2 has no Python" in ln)
        assert line.startswith("[ERROR] m2:"), text
        assert f"brew install python@{minor}" in line and "python.org" in line, line
        assert "m1 has no Python" not in text
        assert mutations(cluster) == {"m1": [], "m2": []}


def test_a_mac_without_the_command_line_tools_is_named_with_how_to_install_them(sim_cluster):
    cluster = sim_cluster("pair")
    with mac_as(cluster, "m2", command_line_tools=False):
        run = run_site(cluster, tags=["rdma_check"], python_env=None)
        assert run.rc != 0
        fails = {h: msg for h, task, msg in run.failures() if h and task.startswith("Name the Mac")}
        assert set(fails) == {"m2"}, run.failures()
        msg = fails["m2"]
        assert msg.startswith("m2: /usr/bin/python3 is the stub macOS has until the Command Line Tools"), msg
        assert "xcode-select --install" in msg and "softwareupdate --install" in msg, msg
        assert "Traceback" not in run.stdout
        # The other fix it names, taken: Ansible runs Homebrew's python3.N on m2, whose
        # site-packages hold pip alone (no setuptools, no packaging). The env stage makes m2's
        # venv all the same (ansible.builtin.pip would need either of them there).
        assert "Or set ansible_python_interpreter for m2 to another Python it has" in msg, msg
        # An inventory that sets no interpreter: Ansible's discovery (ansible.cfg's auto_silent)
        # finds no python3.N on a Mac's PATH and takes /usr/bin/python3: the Command Line Tools'
        # Python on m1, their stub on m2.
        auto = "ansible_python_interpreter: auto_silent\n"
        with host_vars(cluster, m1=auto, m2=auto):
            found = run_site(cluster, tags=["rdma_check"], python_env=None)
        named = {h: m for h, task, m in found.failures() if h and task.startswith("Name the Mac")}
        assert set(named) == {"m2"}, found.failures()
        assert named["m2"].startswith("m2: /usr/bin/python3 is the stub macOS has"), named
        assert "xcode-select --install" in named["m2"], named
        discovered = {
            e["event_data"]["host"]: facts["discovered_interpreter_python"]
            for e in found.events
            if "discovered_interpreter_python"
            in (facts := ((e.get("event_data") or {}).get("res") or {}).get("ansible_facts") or {})
        }
        assert discovered.get("m1") == "/usr/bin/python3", discovered
        homebrew = f"ansible_python_interpreter: /opt/homebrew/bin/python{cluster.python_minor()}\n"
        with host_vars(cluster, m2=homebrew):
            cluster.exec("m2", ["rm", "-rf", VENV], check=True)
            env = run_site(cluster, tags=["env"], python_env=None, extravars=lab_vars(cluster), timeout=900)
        assert env.rc == 0, env.failures()
        assert "m2" in {r["host"] for r in env.results("Install the pinned mlx and mlx-lm into the venv")}
        versions = json.loads((cluster.state_dir / "artifacts" / "versions.json").read_text())
        assert versions["m2"]["mlx"] == "0.32.4" and versions["m2"]["executable"] == f"{VENV}/bin/python"


def test_the_command_line_tools_installed_headless_when_asked_then_the_run_goes_on(sim_cluster):
    cluster = sim_cluster("pair")
    # m2's interpreter left to Ansible's discovery, as an inventory that sets none leaves it: the
    # probe before any module runs takes /usr/bin/python3, as discovery would on a Mac
    with mac_as(cluster, "m2", command_line_tools=False):
        with host_vars(cluster, m2="ansible_python_interpreter: auto\n"):
            run = run_site(
                cluster,
                tags=["rdma_check"],
                python_env=None,
                extravars={"mlx_cluster_install_command_line_tools": True},
            )
        assert run.rc == 0, run.failures()
        [installed] = [
            r
            for r in run.results("Install the Command Line Tools with softwareupdate (bounded in time)")
            if r["host"] == "m2"
        ]
        assert "installing: Command Line Tools for Xcode" in installed["res"]["stdout"], installed["res"]
        assert [
            r["host"]
            for r in run.results("Install the Command Line Tools with softwareupdate (bounded in time)")
            if not r["res"].get("skipped")
        ] == ["m2"]
        assert cluster.exec("m2", ["xcode-select", "-p"]).stdout.strip() == "/Library/Developer/CommandLineTools"
        # for good: a second run finds them and installs nothing
        again = run_site(
            cluster, tags=["rdma_check"], python_env=None, extravars={"mlx_cluster_install_command_line_tools": True}
        )
        assert again.rc == 0, again.failures()
        assert again.results("Install the Command Line Tools with softwareupdate (bounded in time)") == []
        probes = {
            r["host"]: r["res"]["stdout"]
            for r in again.results("Run the Mac's Ansible interpreter without Ansible (raw, no Python needed)")
        }
        assert set(probes) == {"m1", "m2"} and all("mlx-cluster-python" in o for o in probes.values()), probes


ARCHIVE = "Copy the archive to every Mac the management network carries it to"
WHEELS_SENT = "Send along the cables, every copy at once, each file verified as it arrives: the wheels"


def test_an_offline_cluster_installs_from_the_wheels_the_controller_brings(sim_cluster):
    """python_env_wheelhouse: the Macs reach no index at all (no mirror given); the controller
    downloads the pins once for their platform and Python, copies them to one Mac, which passes
    them on over its cable, pip installs from there."""
    from packaging.tags import sys_tags

    cluster = sim_cluster("pair")
    cluster.reset()
    for host in cluster.hosts:
        cluster.exec(host, ["rm", "-rf", VENV, "/srv/admin/mlx-cluster/wheels"], check=True)
    mlx = defaults("python_env")["python_env_mlx_version"]
    offline = {
        "python_env_wheelhouse": True,
        # the simulated Macs run Linux: their platform's tags, mlx's CPU back end, and a
        # lock for those wheels (the download is checked against it)
        "python_env_wheel_platforms": sorted({t.platform for t in sys_tags()}),
        "python_env_extra_packages": [f"mlx-cpu=={mlx}"],
        "python_env_lock_file": lab_lock(cluster),
    }
    dry = run_site(cluster, tags=["env"], check=True, python_env=None, extravars=offline)
    assert dry.rc == 0, dry.failures()
    said = [r["res"]["msg"] for r in dry.results(WOULD)]
    assert len(said) == 2 and all("from the wheels the controller brings" in m for m in said), said
    # (with the network stage: the wheels reach the second Mac over the cable)
    first = run_site(cluster, tags=["network", "env"], python_env=None, extravars=offline, timeout=900)
    assert first.rc == 0, first.failures()
    # the management network carried one archive, to one Mac; the other got the wheels over its cable
    lan = [r["host"] for r in first.results(ARCHIVE) if not r["res"].get("skipped")]
    cable = [r["host"] for r in first.results(WHEELS_SENT) if not r["res"].get("skipped")]
    assert len(lan) == 1 and sorted(lan + cable) == sorted(cluster.hosts), (lan, cable)
    assert [r["res"]["bytes"] > 0 for r in first.results(WHEELS_SENT) if not r["res"].get("skipped")] == [True]
    [download] = first.results("Download the pinned wheels for the Macs once, on the controller")
    assert download["res"]["changed"] in (True, False)  # False: an earlier run's download, kept
    versions = json.loads((cluster.state_dir / "artifacts" / "versions.json").read_text())
    assert {h: (v["mlx"], v["executable"]) for h, v in versions.items()} == {
        h: (mlx, f"{VENV}/bin/python") for h in cluster.hosts
    }
    for host in cluster.hosts:  # the wheels are on the Mac: what pip read
        listing = cluster.exec(host, ["sh", "-c", "ls /srv/admin/mlx-cluster/wheels/*/"], check=True).stdout
        assert f"mlx-{mlx}-" in listing and "mlx_lm-" in listing, listing
    again = run_site(cluster, tags=["env"], python_env=None, extravars=offline)
    assert again.rc == 0, again.failures()
    assert again.changed() == 0, again.stats
    # every Mac holds its pins: neither the wheels nor pip are needed
    assert again.results(ARCHIVE) == [] and again.results("Install the pinned mlx and mlx-lm into the venv") == []


def newest_python():
    """A Python 3.12 or 3.13 on this machine (PATH, then pyenv's versions), or None: what
    scripts/controller.sh picks first on a Mac (python3.13), where pip installs the newest
    ansible-core pyproject.toml allows, not the one this suite's own Python 3.11 gets."""
    candidates = [shutil.which(f"python3.{minor}") for minor in (13, 12)]
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    candidates += sorted(pyenv.glob("3.1[23]*/bin/python3"), reverse=True)
    for python in filter(None, candidates):
        probe = subprocess.run(
            [str(python), "-c", "import sys, venv; print(sys.version_info[1])"], capture_output=True, text=True
        )
        if probe.returncode == 0 and probe.stdout.strip() in ("12", "13"):
            return str(python)
    return None


def next_controller():
    """bin/ of a venv made from newest_python() with pyproject.toml's controller dependencies
    (mlx and mlx-lm left out: a dry run starts no rank), the newest each allows; kept in .venv
    while pyproject.toml's dependencies stay the same."""
    python = newest_python()
    if python is None:
        pytest.skip("no Python 3.12 or 3.13 on this machine: the newest ansible-core needs one")
    deps = [
        d
        for d in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
        if not d.startswith("mlx")
    ]
    home = ROOT / ".venv" / ".next-controller"
    marker = home / ".deps"
    if not (marker.exists() and marker.read_text() == json.dumps(deps)):
        shutil.rmtree(home, ignore_errors=True)
        subprocess.run([python, "-m", "venv", str(home)], check=True)
        subprocess.run([str(home / "bin" / "python"), "-m", "pip", "install", "-q", *deps], check=True)
        marker.write_text(json.dumps(deps))
    return home / "bin"


def test_the_newest_ansible_core_pyproject_allows_dry_runs_a_fresh_cluster_without_a_deprecation(sim_cluster):
    """ansible-core 2.20 (Python 3.12+) deprecated reading facts as top-level variables, and
    warned for every stage of the dry run; run_site fails any run with a deprecation warning."""
    bin_dir = next_controller()
    version = subprocess.run(
        [str(bin_dir / "python"), "-c", "from importlib import metadata; print(metadata.version('ansible-core'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    ours = metadata.version("ansible-core")
    assert tuple(map(int, version.split(".")[:2])) >= tuple(map(int, ours.split(".")[:2])), (version, ours)
    cluster = sim_cluster("pair")
    cluster.reset()
    cluster.clear_argv_logs()  # (what earlier tests ran on this pair)
    dry = run_site(cluster, check=True, diff=True, python_env=None, controller_bin=bin_dir)
    assert dry.rc == 0, dry.failures()
    assert (
        f"core {version}"
        in subprocess.run([str(bin_dir / "ansible-playbook"), "--version"], capture_output=True, text=True).stdout
    )
    assert mutations(cluster) == {"m1": [], "m2": []}
