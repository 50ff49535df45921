"""mlx_play_hosts: a play whose tasks this run's tags do not select matches no host; the same
answer as Ansible's own tag rules, and every playbook passes its play's own tags."""

from __future__ import annotations

import functools
import itertools
import warnings

import pytest
import yaml

from tests.unit.filter.controller import ROOT, controller_imports


@pytest.fixture(scope="module")
def play_hosts(checks_filters):
    return checks_filters["mlx_play_hosts"]


PLAY_TAGS = [
    ["network"],
    ["preflight", "rdma_check"],
    ["env", "benchmark", "net_check", "server"],
    ["net_check", "never"],
    ["server_stop", "never"],
]
SELECTIONS = [
    [],
    ["all"],
    ["tagged"],
    ["untagged"],
    ["network"],
    ["network", "hostfile"],
    ["server"],
    ["net_check"],
    ["server_stop"],
    ["always"],
    ["never"],
    ["rdma_check"],
]


@functools.cache
def _plugins_ready():
    """Ansible's plugin loader, once per process (a Play resolves its tasks' actions)."""
    from ansible.plugins.loader import init_plugin_loader

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # already configured by another test module: fine
        init_plugin_loader()


def ansible_runs(tags, only, skip):
    """Ansible's answer for a task of a play tagged `tags` (it carries only the play's tags)."""
    with controller_imports():
        from ansible.parsing.dataloader import DataLoader
        from ansible.playbook.play import Play
        from ansible.vars.manager import VariableManager

        _plugins_ready()
        loader = DataLoader()
        play = Play.load(
            {
                "hosts": "x",
                "gather_facts": False,
                "tags": list(tags),
                "tasks": [{"name": "the task", "ansible.builtin.debug": {"msg": "x"}}],
            },
            loader=loader,
            variable_manager=VariableManager(loader=loader),
        )
        task = next(t for b in play.compile() for t in b.block if t.name == "the task")
        return task.evaluate_tags(only, skip, {})


@pytest.mark.parametrize("tags", PLAY_TAGS, ids="+".join)
def test_the_same_answer_as_ansible_for_every_selection(play_hosts, tags):
    for only, skip in itertools.product(SELECTIONS, [[], ["network"], ["server"], ["all"], ["tagged"], ["never"]]):
        expected = ansible_runs(tags, only or ["all"], skip)
        got = play_hosts("mac_cluster", tags, only or ["all"], skip)
        assert got == ("mac_cluster" if expected else []), (tags, only, skip)


def test_a_bad_tag_list_is_a_filter_error(play_hosts):
    with controller_imports():
        from ansible.errors import AnsibleFilterError
    with pytest.raises(AnsibleFilterError, match="mlx_play_hosts"):
        play_hosts("mac_cluster", "network", ["all"], [])


def test_every_play_passes_its_own_tags():
    found = 0
    for path in sorted((ROOT / "playbooks").glob("*.yml")):
        for play in yaml.safe_load(path.read_text()):
            hosts, tags = play["hosts"], play.get("tags", [])
            if tags == ["always"]:  # discovery and planning: every run
                assert "mlx_play_hosts" not in hosts, path
                continue
            found += 1
            assert f"mlx_play_hosts({tags!r}, ansible_run_tags, ansible_skip_tags)" in hosts, (path.name, play["name"])
    assert found >= 10
