# -*- coding: utf-8 -*-
# Copyright: mlx-cluster contributors
# MIT License
"""Inventory plugin mlx.cluster.bonjour: the Macs on the LAN that announce ssh over Bonjour, as
the group mac_cluster. Thin: the rules are plugins/plugin_utils/bonjour.py."""

from __future__ import annotations

DOCUMENTATION = r"""
name: bonjour
short_description: The Macs on the LAN that announce ssh over Bonjour, as the group mac_cluster
version_added: "0.4.0"
description:
  - Browses the LAN with multicast DNS (Bonjour) for C(_ssh._tcp) and C(_sftp-ssh._tcp), which
    every Mac with Remote Login on announces, resolves each Mac to its IPv4 address on the LAN,
    and gives the group C(mac_cluster) with C(ansible_host) set, in a stable order.
  - The inventory source is a YAML file whose name ends in C(bonjour.yml) or C(bonjour.yaml),
    whose C(plugin) is C(mlx.cluster.bonjour). Try it with C(ansible-inventory -i bonjour.yml --graph);
    C(ansible-inventory -i bonjour.yml --list --yaml > inventory/mac_cluster/hosts.yml) turns what
    it found into a written inventory.
  - B(Names.) A Mac's inventory name is its mDNS host name, the target of its SRV record
    without C(.local) (macOS's Local Hostname, System Settings > General > Sharing, for example
    C(Studio-1) for C(Studio-1.local)), a DNS label and so a valid Ansible host name. The instance
    name the Mac announces (its Computer Name, C(Studio 1)) is used only when the host name is
    not a DNS label, with every run of characters other than letters and digits made one C(-).
    A Mac announcing both services is one host.
  - B(Order.) Hosts are sorted by name with digit runs compared as numbers (C(studio-2) before
    C(studio-10)), whatever order the answers arrived in, so ranks stay the same from run to run.
  - B(Address.) A Mac answers on every interface, so it may be seen with several addresses. The
    one chosen as C(ansible_host) is never in 169.254.0.0/16 (link-local, the Thunderbolt
    Bridge); it is the lowest address on one of this controller's own networks shorter than /30
    (the LAN), one outside O(exclude_networks) first (a LAN as wide as 10.0.0.0/8 holds the
    Thunderbolt pool). When none is (the Macs are on another subnet, seen through a Bonjour gateway), it
    is the lowest address outside this controller's /30-or-longer networks (its own Thunderbolt
    cables) and outside O(exclude_networks) (the Thunderbolt /30s), with a warning. A Mac with no
    such address is left out, with a warning naming it and its addresses.
  - A Mac announced but not resolved to a host and address within O(timeout) is left out with a
    warning. A Mac that announces but does not answer ssh stays in the inventory; the run's own
    checks name it. No Mac found is an error saying what was browsed, for how long, and the fix;
    Ansible stops on it only with C(unparsed_is_failed) in C([inventory]) (this project's
    ansible.cfg sets it; elsewhere C(ANSIBLE_INVENTORY_UNPARSED_FAILED=true)), else it warns and
    runs over no host.
  - The browse runs on this controller, on every interface with an IPv4 address, and takes
    O(timeout) seconds (and at most a second more), never longer. With O(cache) on, what it found
    is kept per Ansible's inventory cache options and used until O(cache_timeout), or until
    C(--flush-cache).
requirements:
  - the Python package C(zeroconf) on the controller (C(bash scripts/controller.sh) installs it,
    pyproject.toml)
  - this controller on the same LAN (the same link, or one a Bonjour gateway serves) as the Macs
extends_documentation_fragment:
  - inventory_cache
options:
  plugin:
    description: Marks the file as a source for this plugin.
    type: str
    required: true
    choices: [mlx.cluster.bonjour]
  name_patterns:
    description:
      - Regular expressions (Python's, searched anywhere in the name); a Mac is kept when one of
        them matches its inventory name or its instance name. Empty keeps every Mac that
        announces ssh.
    type: list
    elements: str
    default: []
  user:
    description: The login user on the Macs, set as C(ansible_user) on every host. Unset, the
      inventory's group_vars or Ansible's default decide.
    type: str
  key:
    description: The controller's private key for the Macs, set as C(ansible_ssh_private_key_file)
      on every host.
    type: path
  timeout:
    description: Seconds to browse; the Macs that have answered by then are the inventory.
    type: float
    default: 5
  exclude_networks:
    description:
      - Networks (CIDRs) never chosen as a Mac's address when none of its addresses is on this
        controller's own networks. The default is the network stage's Thunderbolt pool
        (C(mlx_cluster_ip_pool)'s default); set it to your pool if you changed that.
    type: list
    elements: str
    default: [10.208.0.0/16]
"""

EXAMPLES = r"""
# bonjour.yml (cp inventory/bonjour.yml.example bonjour.yml; or in inventory/mac_cluster in
# place of hosts.yml, where its group_vars apply): every Mac announcing ssh on this LAN
plugin: mlx.cluster.bonjour
user: admin
key: ~/.ssh/id_ed25519

---
# only the Mac Studios, browsing for 10 seconds, what was found kept for an hour
plugin: mlx.cluster.bonjour
name_patterns: ['^studio-\d+$']
user: admin
timeout: 10
cache: true
cache_plugin: ansible.builtin.jsonfile
cache_connection: ~/.cache/mlx-cluster-inventory
cache_timeout: 3600

# ansible-inventory -i bonjour.yml --graph
# ansible-inventory -i bonjour.yml --list --yaml > inventory/mac_cluster/hosts.yml
"""

import os

from ansible.errors import AnsibleParserError
from ansible.plugins.inventory import BaseInventoryPlugin, Cacheable

from ansible_collections.mlx.cluster.plugins.plugin_utils import bonjour

FILE_ENDINGS = ("bonjour.yml", "bonjour.yaml")


def browse(seconds):
    """What the LAN announces and this controller's networks: {"records", "networks"}."""
    try:
        records = bonjour.browse(bonjour.SERVICE_TYPES, seconds)
        networks = bonjour.controller_networks()
    except ImportError as exc:
        raise AnsibleParserError(
            f"mlx.cluster.bonjour needs the Python package zeroconf on the controller ({exc}): "
            "bash scripts/controller.sh, or pip install zeroconf into Ansible's Python"
        ) from exc
    except OSError as exc:
        raise AnsibleParserError(
            f"mlx.cluster.bonjour: cannot browse with multicast DNS on this controller ({exc}); "
            "or write inventory/mac_cluster/hosts.yml by hand"
        ) from exc
    return {"records": records, "networks": networks}


class InventoryModule(BaseInventoryPlugin, Cacheable):
    NAME = "mlx.cluster.bonjour"
    # ansible-core 2.19+: what this plugin sets may be templated, as a hand-written inventory's
    # values are. Safe: the values from the network are checked before they get here (a name is
    # a DNS label, an address what ipaddress made of it, a port an int); user and key are the
    # source file's own.
    trusted_by_default = True

    def verify_file(self, path):
        return super().verify_file(path) and os.path.basename(path).endswith(FILE_ENDINGS)

    def parse(self, inventory, loader, path, cache=True):
        super().parse(inventory, loader, path, cache)
        self._read_config_data(path)
        seconds = self.get_option("timeout")
        if not seconds or seconds <= 0:
            raise AnsibleParserError(f"mlx.cluster.bonjour: timeout must be a number of seconds above 0, not {seconds}")
        found = self._found(path, cache, seconds)
        patterns = list(self.get_option("name_patterns") or [])
        try:
            chosen = bonjour.choose_hosts(
                found["records"], found["networks"], patterns, list(self.get_option("exclude_networks") or [])
            )
        except ValueError as exc:
            raise AnsibleParserError(f"mlx.cluster.bonjour: {exc}") from exc
        for warning in chosen["warnings"]:
            self.display.warning(f"mlx.cluster.bonjour: {warning}")
        if not chosen["hosts"]:
            raise AnsibleParserError(bonjour.nothing_found(bonjour.SERVICE_TYPES, seconds, chosen["seen"], patterns))
        self._populate(chosen["hosts"])

    def _found(self, path, cache, seconds):
        """The browse's result, from the inventory cache when it is on and holds one."""
        use_cache = self.get_option("cache")
        key = self.get_cache_key(path)
        if use_cache and cache:
            try:
                return self._cache[key]
            except KeyError:
                pass
        found = browse(seconds)
        if use_cache and found["records"]:
            self._cache[key] = found
        return found

    def _populate(self, hosts):
        user, key = self.get_option("user"), self.get_option("key")
        self.inventory.add_group(bonjour.GROUP)
        for host in hosts:
            name = host["name"]
            self.inventory.add_host(name, group=bonjour.GROUP)
            self.inventory.set_variable(name, "ansible_host", host["address"])
            if host["port"] != bonjour.SSH_PORT:
                self.inventory.set_variable(name, "ansible_port", host["port"])
            if user:
                self.inventory.set_variable(name, "ansible_user", user)
            if key:
                self.inventory.set_variable(name, "ansible_ssh_private_key_file", key)
