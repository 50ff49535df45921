"""The toolkit as a collection: built with ansible-galaxy, installed into another project's
collections path, and used there by FQCN against the simulated cluster (issue 12)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.e2e.runner import ROOT

pytestmark = [pytest.mark.sim, pytest.mark.slow]
BIN = Path(sys.executable).parent

PLAYBOOK = """
- name: Another project uses mlx.cluster by FQCN
  hosts: mac_cluster
  gather_facts: false
  tasks:
    - name: Discover (module, with its module_utils)
      mlx.cluster.mlx_cluster_facts:
      register: discovered
    - name: Keep it as a host variable
      ansible.builtin.set_fact:
        mlx_cluster: "{{ discovered.mlx_cluster }}"
    - name: How the controller reaches each Mac (action plugin)
      mlx.cluster.mlx_ssh_targets:
        hosts: "{{ ansible_play_hosts }}"
      register: targets
      run_once: true
    - name: Plan (filters, with their plugin_utils)
      ansible.builtin.set_fact:
        plan_links: >-
          {{ dict(ansible_play_hosts
                  | zip(ansible_play_hosts | map('extract', hostvars, ['mlx_cluster', 'thunderbolt'])))
             | mlx.cluster.mlx_links }}
      run_once: true
    - name: Keep the result
      ansible.builtin.copy:
        content: "{{ {'cables': plan_links.cables | length, 'targets': targets.targets} | to_json }}"
        dest: "{{ out }}"
        mode: "0600"
      delegate_to: localhost
      run_once: true
"""


def test_built_collection_works_from_another_project(sim_cluster, tmp_path):
    cluster = sim_cluster("pair")
    env = dict(
        os.environ,
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_HOME=str(tmp_path / "ansible-home"),
        ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"),
        ANSIBLE_HOST_KEY_CHECKING="True",
    )
    env.pop("ANSIBLE_CONFIG", None)
    build = subprocess.run(
        [str(BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    (tarball,) = tmp_path.glob("mlx-cluster-*.tar.gz")
    with tarfile.open(tarball) as tar:
        names = set(tar.getnames())
    assert "galaxy.yml" not in names and "MANIFEST.json" in names
    assert not any(n.startswith(("tests/", "collections/", ".venv/")) for n in names)
    installed = tmp_path / "collections"
    # from tmp_path: no ansible.cfg there (this repository's would say the collection is installed)
    inst = subprocess.run(
        [str(BIN / "ansible-galaxy"), "collection", "install", "--force", str(tarball), "-p", str(installed)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert inst.returncode == 0, inst.stdout + inst.stderr
    assert (installed / "ansible_collections" / "mlx" / "cluster" / "plugins" / "modules" / "mlx_launch.py").is_file()
    # ansible-test's compile sanity test on the installed tree (its validate-modules and import
    # tests fetch pip from a site CI cannot reach: tests/unit/test_module_specs.py checks the
    # documentation against each argument_spec instead)
    tree = installed / "ansible_collections" / "mlx" / "cluster"
    sanity = subprocess.run(
        [
            str(BIN / "ansible-test"),
            "sanity",
            "--test",
            "compile",
            "--local",
            "--python",
            f"{sys.version_info.major}.{sys.version_info.minor}",
            "--color",
            "no",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tree,
        timeout=300,
    )
    assert sanity.returncode == 0, sanity.stdout[-3000:] + sanity.stderr[-3000:]
    assert 'Running sanity test "compile"' in sanity.stdout + sanity.stderr
    project = tmp_path / "other-project"
    project.mkdir()
    (project / "ansible.cfg").write_text(f"[defaults]\ncollections_path = {installed}\ngathering = explicit\n")
    (project / "site.yml").write_text(PLAYBOOK)
    out = tmp_path / "out.json"
    env["ANSIBLE_CONFIG"] = str(project / "ansible.cfg")
    run = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(cluster.inventory_path), "site.yml", "-e", f"out={out}"],
        capture_output=True,
        text=True,
        env=env,
        cwd=project,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["cables"] == len(cluster.spec.cables)
    assert result["targets"]["m1"]["host"] == cluster.mgmt_address("m1")
    # the module ran from the installed copy, not this tree
    assert str(ROOT) not in run.stdout
