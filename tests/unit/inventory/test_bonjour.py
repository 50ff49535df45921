"""The inventory plugin mlx.cluster.bonjour as Ansible loads it, with the browse replaced: the
options, the group it gives, the inventory cache and the errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.errors import AnsibleParserError
from ansible.inventory.data import InventoryData
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import inventory_loader

from ansible_collections.mlx.cluster.plugins.inventory import bonjour as plugin_module
from ansible_collections.mlx.cluster.plugins.plugin_utils import bonjour

SSH, SFTP = bonjour.SERVICE_TYPES
FOUND = {
    "records": [
        {"type": SSH, "instance": "Studio 10", "server": "studio-10.local.", "port": 22, "addresses": ["192.168.1.40"]},
        {"type": SFTP, "instance": "Studio 2", "server": "studio-2.local.", "port": 22, "addresses": ["192.168.1.12"]},
        {
            "type": SSH,
            "instance": "Studio 2",
            "server": "studio-2.local.",
            "port": 2222,
            "addresses": ["169.254.4.4", "192.168.1.12"],
        },
    ],
    "networks": ["127.0.0.0/8", "192.168.1.0/24"],
}


@pytest.fixture
def browses(monkeypatch):
    """The browse replaced: each call recorded (its seconds), answering what `browses.found` holds."""

    class Browses(list):
        found = FOUND

    calls = Browses()

    def fake(seconds):
        calls.append(seconds)
        return calls.found

    monkeypatch.setattr(plugin_module, "browse", fake)
    return calls


def source(tmp_path, text, name="bonjour.yml"):
    path = tmp_path / name
    path.write_text("plugin: mlx.cluster.bonjour\n" + text)
    return str(path)


def parse(path, cache=True):
    inventory = InventoryData()
    plugin = inventory_loader.get("mlx.cluster.bonjour")
    plugin.parse(inventory, DataLoader(), path, cache=cache)
    if getattr(plugin, "_cache", None) is not None:
        plugin.update_cache_if_changed()  # what Ansible's InventoryManager does after a parse
    return inventory


def hostvars(inventory, name):
    return inventory.get_host(name).vars


@pytest.mark.parametrize(
    ("name", "ok"),
    [("bonjour.yml", True), ("lab.bonjour.yaml", True), ("hosts.yml", False), ("bonjour.yml.example", False)],
)
def test_the_files_it_reads(tmp_path, name, ok):
    assert inventory_loader.get("mlx.cluster.bonjour").verify_file(source(tmp_path, "", name)) is ok


def test_the_group_names_addresses_and_order(tmp_path, browses):
    inv = parse(source(tmp_path, "user: admin\nkey: /keys/id_ed25519\ntimeout: 1.5\n"))
    assert browses == [1.5]
    assert [h.name for h in inv.groups["mac_cluster"].get_hosts()] == ["studio-2", "studio-10"]
    assert hostvars(inv, "studio-2")["ansible_host"] == "192.168.1.12"
    assert hostvars(inv, "studio-2")["ansible_port"] == 2222  # the ssh record's port, not sftp-ssh's
    assert "ansible_port" not in hostvars(inv, "studio-10")
    for h in ("studio-2", "studio-10"):
        assert hostvars(inv, h)["ansible_user"] == "admin"
        assert hostvars(inv, h)["ansible_ssh_private_key_file"] == "/keys/id_ed25519"


def test_without_user_and_key_the_inventory_says_them(tmp_path, browses):
    inv = parse(source(tmp_path, "name_patterns: ['-10$']\n"))
    assert [h.name for h in inv.groups["mac_cluster"].get_hosts()] == ["studio-10"]
    assert not {"ansible_user", "ansible_ssh_private_key_file"} & set(hostvars(inv, "studio-10"))
    assert browses == [5.0]  # the default time bound


def test_no_mac_found_is_an_error_with_the_fix(tmp_path, browses):
    browses.found = {"records": [], "networks": ["192.168.1.0/24"]}
    with pytest.raises(AnsibleParserError) as err:
        parse(source(tmp_path, "timeout: 2\n"))
    msg = str(err.value)
    assert "no Mac announced _ssh._tcp.local and _sftp-ssh._tcp.local" in msg and "within 2 s" in msg
    assert "Remote Login" in msg and "inventory/mac_cluster/hosts.yml" in msg


def test_patterns_that_match_nothing_name_what_was_seen(tmp_path, browses):
    with pytest.raises(AnsibleParserError, match=r"\(studio-2, studio-10\) matches name_patterns \['\^m'\]"):
        parse(source(tmp_path, "name_patterns: ['^m']\n"))


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("name_patterns: ['(']\n", "name pattern '(' is not a regular expression"),
        ("timeout: 0\n", "timeout must be a number of seconds above 0"),
    ],
)
def test_bad_options_are_named(tmp_path, browses, text, words):
    with pytest.raises(AnsibleParserError, match=words.replace("(", r"\(")):
        parse(source(tmp_path, text))


def test_the_inventory_cache_keeps_what_was_found(tmp_path, browses):
    path = source(
        tmp_path,
        f"cache: true\ncache_plugin: ansible.builtin.jsonfile\ncache_connection: {tmp_path / 'cache'}\n",
    )
    first = parse(path)
    assert len(browses) == 1 and list((tmp_path / "cache").iterdir())
    browses.found = {"records": [], "networks": []}
    again = parse(path)  # from the cache: no browse
    assert len(browses) == 1
    assert [h.name for h in again.groups["mac_cluster"].get_hosts()] == [
        h.name for h in first.groups["mac_cluster"].get_hosts()
    ]
    browses.found = {"records": FOUND["records"][:1], "networks": FOUND["networks"]}
    flushed = parse(path, cache=False)  # --flush-cache: browse again, and keep that
    assert len(browses) == 2 and [h.name for h in flushed.groups["mac_cluster"].get_hosts()] == ["studio-10"]
    assert [h.name for h in parse(path).groups["mac_cluster"].get_hosts()] == ["studio-10"]
    assert len(browses) == 2


def test_nothing_found_is_not_cached(tmp_path, browses):
    path = source(
        tmp_path,
        f"cache: true\ncache_plugin: ansible.builtin.jsonfile\ncache_connection: {tmp_path / 'cache'}\n",
    )
    browses.found = {"records": [], "networks": []}
    with pytest.raises(AnsibleParserError):
        parse(path)
    browses.found = FOUND
    assert [h.name for h in parse(path).groups["mac_cluster"].get_hosts()] == ["studio-2", "studio-10"]
    assert len(browses) == 2


def test_without_zeroconf_the_error_says_how_to_install_it(monkeypatch):
    def missing(*_):
        raise ImportError("No module named 'zeroconf'")

    monkeypatch.setattr(bonjour, "browse", missing)
    with pytest.raises(AnsibleParserError, match="needs the Python package zeroconf.*scripts/controller.sh"):
        plugin_module.browse(1.0)


def test_ansible_doc_shows_the_plugin():
    root = Path(__file__).resolve().parents[3]
    res = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-doc"), "-t", "inventory", "--json", "mlx.cluster.bonjour"],
        cwd=root,
        env=dict(os.environ, ANSIBLE_CONFIG=str(root / "ansible.cfg")),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    page = json.loads(res.stdout)["mlx.cluster.bonjour"]
    options = page["doc"]["options"]
    assert {"name_patterns", "user", "key", "timeout", "exclude_networks", "cache", "cache_plugin"} <= set(options)
    assert options["timeout"]["default"] == 5 and options["exclude_networks"]["default"] == [bonjour.THUNDERBOLT_POOL]
    assert "plugin: mlx.cluster.bonjour" in page["examples"]


def test_the_example_source_file_is_a_valid_source(tmp_path, browses):
    """inventory/bonjour.yml.example, under a name Ansible reads: what the README has users copy."""
    example = Path(__file__).resolve().parents[3] / "inventory" / "bonjour.yml.example"
    path = tmp_path / "bonjour.yml"
    path.write_text(example.read_text())
    inv = parse(str(path))
    assert [h.name for h in inv.groups["mac_cluster"].get_hosts()] == ["studio-2", "studio-10"]
    assert hostvars(inv, "studio-2")["ansible_user"] == "admin"
    assert browses == [5.0]
