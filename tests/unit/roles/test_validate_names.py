"""roles/mlx_cluster validate: the names that reach a shell line, an interpreter the Macs run or
a path root writes (plugins/plugin_utils/setting_names.py) are refused before any Mac is
contacted, all at once, naming the setting, the value, the Macs that set it and the fix (the
real ansible-playbook, `--tags validate`, over an inventory of Macs that do not exist)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
# two Macs at TEST-NET-1 addresses (192.0.2.0/24: nothing answers there)
TWO = {f"m{i}": {"ansible_host": f"192.0.2.{i}"} for i in (1, 2)}


def validate(tmp_path, hosts, extravars, *options, config=ROOT / "ansible.cfg", cwd=ROOT, group="mac_cluster"):
    """`ansible-playbook <ROOT>/site.yml --tags validate` run in `cwd`, reading `config` (None: no
    ANSIBLE_CONFIG, so ./ansible.cfg of `cwd` or Ansible's own defaults), over an inventory of
    `hosts` under `group` (None: under no group)."""
    inv = tmp_path / "inventory" / "hosts.yml"
    inv.parent.mkdir(exist_ok=True)
    inv.write_text(yaml.safe_dump({"all": {"hosts": hosts}} if group is None else {group: {"hosts": hosts}}))
    env = dict(
        os.environ,
        ANSIBLE_HOME=str(tmp_path / "ansible-home"),
        NO_COLOR="1",
        PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
    )
    env.pop("ANSIBLE_CONFIG", None)
    if config is not None:
        env["ANSIBLE_CONFIG"] = str(config)
    argv = [str(Path(sys.executable).parent / "ansible-playbook"), str(ROOT / "site.yml"), "-i", str(inv.parent)]
    argv += ["--tags", "validate"]
    for k, v in extravars.items():
        argv += ["-e", json.dumps({k: v})]
    argv += options
    return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, timeout=120)


def test_a_run_started_elsewhere_parses_and_names_the_toolkits_ansible_cfg(tmp_path):
    """From another directory Ansible reads no ansible.cfg of ours: the roles are still found (by
    FQCN, through the collections/ beside site.yml), and validate says which file to read."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    res = validate(tmp_path, TWO, {}, config=None, cwd=elsewhere)
    out = " ".join(res.stdout.split())
    assert res.returncode != 0
    assert "was not found" not in res.stdout + res.stderr, res.stderr[-2000:]
    assert f"not from mlx-cluster's own {ROOT.resolve() / 'ansible.cfg'}" in out, res.stdout[-3000:]
    assert f"cd {ROOT.resolve()} and run again, or export ANSIBLE_CONFIG={ROOT.resolve() / 'ansible.cfg'}" in out
    assert "Discover" not in res.stdout  # stopped before contacting any Mac


def test_an_inventory_without_the_clusters_group_is_named_not_a_run_that_does_nothing(tmp_path):
    """Every play runs on the group: without it each matched no host and the run ended "ok". The
    Macs the inventory has are named by group: another group's, and those in no group."""
    (tmp_path / "inventory").mkdir()
    (tmp_path / "inventory" / "more.yml").write_text(yaml.safe_dump({"all": {"hosts": {"m3": {}}}}))
    res = validate(tmp_path, TWO, {}, group="macs")
    out = " ".join(res.stdout.split())
    assert res.returncode != 0, res.stdout[-3000:]
    assert (
        "no Mac is in the group 'mac_cluster', the one every stage runs on (the inventory's groups: "
        "macs (m1, m2); ungrouped (m3))" in out
    ), res.stdout[-3000:]
    assert "or name your own group on the command line: -e mlx_cluster_group=<group>" in out


def test_the_group_named_in_inventory_variables_is_refused_naming_the_fix(tmp_path):
    """group_vars/all: the plays choose their hosts before inventory variables are read."""
    (tmp_path / "inventory" / "group_vars").mkdir(parents=True)
    (tmp_path / "inventory" / "group_vars" / "all.yml").write_text("mlx_cluster_group: macs\n")
    res = validate(tmp_path, TWO, {}, group="macs")
    out = " ".join(res.stdout.split())
    assert res.returncode != 0
    assert "mlx_cluster_group is 'macs' in the inventory's variables, but the plays choose their Macs before" in out
    assert "ran on none of m1, m2. Fix: name the group on the command line, -e mlx_cluster_group=macs" in out


SAID = ["-e", "power_manage=false", "-e", "mlx_cluster_rdma_wanted=no", "-e", "mlx_cluster_command_timeout=90"]


def test_every_mistake_is_named_at_once_before_any_mac_is_contacted(tmp_path):
    """validate checks everything and names every mistake in one message, before any Mac is
    contacted; one run here makes each of these mistakes:
    - names that reach a shell line, an interpreter the Macs run or a path root writes, each named
      with its setting, its value, the Macs that set it and the fix;
    - a --limit leaving Macs of the group out (the plan is made for the whole group at once);
    - another ansible.cfg than the toolkit's (its keepalives and inventory rules unread);
    - a --tags or --skip-tags no play has: it would run only what every run does and end "ok";
    - -e key=value gives strings: "false" and "90" read as what they say (the roles convert them
      where they use them, tests/unit/test_setting_types.py); a list given so is named with its
      JSON, and so is a value that reads as nothing."""
    hosts = {
        # 192.0.2.0/24 (TEST-NET-1): nothing answers there, and nothing is asked
        "m1": {"ansible_host": "192.0.2.1", "python_env_interpreter": "/opt/py thon/bin/python3"},
        "m2": {
            "ansible_host": "192.0.2.2",
            "model_sync_rsync_path": "/opt/homebrew/bin/rsync; touch /tmp/pwned",
            # made from what the env stage sets: left to where it is used, not an error here
            "benchmark_python": "{{ python_env_python }}",
            "benchmark_trials": "ten",
        },
        "m3": {"ansible_host": "192.0.2.3"},
    }
    other = tmp_path / "mine.cfg"
    other.write_text("[defaults]\ncollections_path = %s\n" % (ROOT / "collections"))
    names = {
        "mlx_server_label": "../../../tmp/evil",
        "mlx_server_run_dir": "/opt/mlx/../server",
        "python_env_base_python": "/usr/bin/python3 -I",
        "port_check_python": "$(id)",
        "model_sync_dest": "models/qwen",
        "model_sync_name": "Qwen 3 4B",
    }
    options = ["--limit", "m1", "--tags", "rdma_chek", "--skip-tags", "modles", *SAID]
    options += ["-e", "benchmark_modes=tensor,pipeline", "-e", "hostfile_picture=ture"]
    res = validate(tmp_path, hosts, names, *options, config=other)
    out = " ".join(res.stdout.split())
    assert res.returncode != 0
    for fragment in (
        # names
        "python_env_interpreter of m1 '/opt/py thon/bin/python3' holds whitespace or characters a shell reads: "
        "use letters, digits, / and . _ - + @ % = , : only (it reaches ansible.builtin.script's executable, "
        "a shell line)",
        "model_sync_rsync_path of m2 '/opt/homebrew/bin/rsync; touch /tmp/pwned' holds whitespace",
        "(it reaches rsync's --rsync-path, which the receiving Mac's shell reads)",
        "mlx_server_label '../../../tmp/evil' is not a launchd label: use dot-separated words",
        "mlx_server_run_dir '/opt/mlx/../server' holds '.' or '..' components: give the path itself",
        "python_env_base_python '/usr/bin/python3 -I' holds whitespace",
        "port_check_python '$(id)' is not an absolute path",
        "model_sync_dest 'models/qwen' is not an absolute path",
        "model_sync_name 'Qwen 3 4B' holds whitespace or characters a shell reads",
        # --limit
        "--limit m1 leaves m2, m3 of 'mac_cluster' out of the run",
        "run without --limit",
        # another ansible.cfg
        f"ansible-playbook read its settings from {other}, not from",
        # tags
        "--tags rdma_chek: no stage has that tag, so it selects no stage",
        "--skip-tags modles: no stage has that tag, so it skips nothing",
        # -e key=value
        "benchmark_modes must be a list (got 'tensor,pipeline'): -e key=value gives every value as a string: give "
        """it as JSON, -e '{"benchmark_modes": ["tensor", "pipeline"]}', or in the inventory""",
        "benchmark_trials of m2 must be a whole number (got 'ten')",
        """hostfile_picture must be true or false (got 'ture'): e.g. -e '{"hostfile_picture": false}'""",
    ):
        assert fragment in out, (fragment, res.stdout[-3000:])
    assert "--tags validate,rdma_chek: no stage has" not in out  # (validate is a stage's tag)
    for fine in ("benchmark_python", "power_manage", "mlx_cluster_rdma_wanted", "mlx_cluster_command_timeout"):
        assert fine not in out, fine
    assert "mlx_cluster_facts" not in out and "Discover" not in out  # stopped before contacting any Mac


def test_a_run_validate_lets_through_names_misspelt_settings_and_goes_on(tmp_path):
    """The cases validate lets through, walking the same tasks, in one run:
    - a misspelt setting is named with the closest one, and the run goes on: Ansible ignores a
      variable nothing reads (`-e model_sync_sorce=m1` copied from the controller, as if unset,
      without a word);
    - a group named on the command line is the cluster's (-e mlx_cluster_group);
    - a --limit naming every Mac (the group itself) is no limit;
    - the toolkit's own ansible.cfg, read from another directory, is fine;
    - -e key=value strings that read as what they say ("false", "no", "90") are not named."""
    (tmp_path / "inventory" / "host_vars").mkdir(parents=True)
    (tmp_path / "inventory" / "host_vars" / "m2.yml").write_text("benchmark_trails: 5\nmy_own_note: kept\n")
    said = {"model_sync_sorce": "m1", "model_sync_source": "tree", "power_nap": False, "mlx_cluster_group": "macs"}
    res = validate(tmp_path, TWO, said, "--limit", "macs", *SAID, group="macs", cwd=tmp_path)
    out = " ".join(res.stdout.split())
    # validate passes (a warning: the run goes on); discovery then finds no Mac at these addresses
    assert checked(res) == "ok: [m1]", res.stdout[-3000:]
    assert "no Mac is in the group" not in out and "leaves" not in out and "read its settings from" not in out
    for fine in ("power_manage", "mlx_cluster_rdma_wanted", "mlx_cluster_command_timeout"):
        assert fine not in out, fine
    assert (
        "WARNING: model_sync_sorce (set for every Mac, in the inventory or with -e) is not a setting of "
        "mlx-cluster: no stage reads it, so it changes nothing; did you mean model_sync_source?" in out
    ), res.stdout[-3000:]
    assert "WARNING: benchmark_trails (set for m2, in the inventory or with -e) is not a setting" in out
    assert "did you mean benchmark_trials?" in out
    assert "power_nap (set for every Mac, in the inventory or with -e) is not a setting of mlx-cluster" in out
    assert "check its spelling against the settings of the role power (roles/power/README.md)" in out
    # the settings themselves, a variable of the user's own, the inventory's and Ansible's are not named
    for name in ("model_sync_source ", "my_own_note", "ansible_host", "inventory_hostname"):
        assert f"WARNING: {name}" not in out


def checked(res):
    """The last line of the validate task's output."""
    check = res.stdout.split("TASK [mlx.cluster.mlx_cluster : Check the inventory and the cluster-wide settings]")[1]
    return check.split("TASK [")[0].strip().splitlines()[-1]


def test_when_no_mac_answers_each_is_named_with_ssh_s_cause_and_fix(tmp_path):
    """Every Mac silent (.invalid never resolves, RFC 2606): none is left to run discovery's own
    stop, so the controller asks ssh about each and stops naming them, not a run that ends with
    Ansible's UNREACHABLE lines alone."""
    hosts = {f"m{i}": {"ansible_host": f"m{i}.invalid"} for i in (1, 2)}
    res = validate(tmp_path, hosts, {})
    out = " ".join(res.stdout.split())
    assert res.returncode != 0
    for mac in ("m1", "m2"):
        assert f"{mac} did not answer over ssh: ssh from this controller to {mac} ({mac}.invalid) failed:" in out, out
        assert f"The name {mac}.invalid does not resolve on this controller. Fix: set ansible_host of {mac}" in out
    # (with none answering, leaving them all out is no fix: not advised)
    assert "leave them out of the inventory" not in out and "The plan needs every Mac" not in out
