# -*- coding: utf-8 -*-
"""Filters over plugins/plugin_utils/pythons.py: the base Python of each Mac's venv and its
lock (python_env_require_hashes); and the
toolkit's one rule for paths a shell reads (module_utils/mlx_files.py), for the settings that
name the venv's interpreter and, in validate, every setting plugin_utils/setting_names.py lists;
validate's check that no two inventory hosts reach the same Mac, its warning for a variable
with a role's prefix that no role reads (a misspelt setting), and its check that each setting's
value is of the type its argument spec declares."""

from __future__ import annotations

from ansible.errors import AnsibleError, AnsibleFilterError
from jinja2 import Undefined

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_files import unsafe_path
from ansible_collections.mlx.cluster.plugins.plugin_utils import pythons, setting_names
from ansible_collections.mlx.cluster.plugins.plugin_utils.plain import plain

# Each filter is documented in its own file beside this one (plugins/filter/<name>.yml):
# `ansible-doc -t filter mlx.cluster.<name>`.


def mlx_base_python(pythons_by_host, versions, mlx_version="", base=""):
    if not isinstance(pythons_by_host, dict):
        raise AnsibleFilterError("mlx_base_python: expects a dict host -> mlx_cluster.pythons")
    if not isinstance(versions, (list, tuple)):
        raise AnsibleFilterError("mlx_base_python: versions must be a list of minor versions, e.g. ['3.13', '3.12']")
    try:
        return pythons.base_python(
            plain(pythons_by_host),
            {"versions": list(versions), "mlx_version": str(mlx_version), "base": str(base or "")},
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise AnsibleFilterError(f"mlx_base_python: malformed facts ({exc})") from exc


def mlx_python_probe_msg(failed, probe, host, python):
    if not isinstance(failed, dict) or not isinstance(probe, dict):
        raise AnsibleFilterError("mlx_python_probe_msg: expects the failed result and the raw probe's result (dicts)")
    return pythons.probe_message(plain(failed), plain(probe), str(host), str(python))


def mlx_script_json(stdout):
    return pythons.script_json(stdout)


def mlx_clt_stub(output):
    return pythons.is_stub(output)


def mlx_pip_failure(result, host, venv, source=""):
    if not isinstance(result, dict):
        raise AnsibleFilterError("mlx_pip_failure: expects the registered result of the install")
    return pythons.install_message(str(host), str(venv), plain(result), str(source or ""))


def mlx_lock_problem(text, requirements, path):
    if not isinstance(requirements, (list, tuple)):
        raise AnsibleFilterError("mlx_lock_problem: requirements must be a list, e.g. ['mlx==0.32.4']")
    return pythons.lock_problem(str(text or ""), [str(r) for r in requirements], str(path))


def mlx_unsafe_path(path, setting, home=False):
    if not isinstance(setting, str) or not setting:
        raise AnsibleFilterError("mlx_unsafe_path: name the setting the path comes from")
    return unsafe_path(path, setting, home=bool(home)) or ""


_UNSET = object()


def _given(host_vars_of_one, name, unset=None):
    """A host's variable as the inventory (or -e) sets it; `unset` when it is not set, or is made
    from what a later stage sets (undefined now)."""
    if name not in host_vars_of_one:
        return unset
    try:
        value = host_vars_of_one[name]
    except AnsibleError:
        return unset
    return unset if isinstance(value, Undefined) else value


def _each_host(host_vars, hosts, filter_name):
    """(host, its hostvars) for each of `hosts`; a filter error naming `filter_name` when
    `hosts` is no list or `host_vars` has no such host."""
    if not isinstance(hosts, (list, tuple)):
        raise AnsibleFilterError(f"{filter_name}: hosts must be a list of inventory host names")
    for host in hosts:
        try:
            mine = host_vars[host]
        except (KeyError, TypeError) as exc:
            raise AnsibleFilterError(f"{filter_name}: expects hostvars and hosts of it") from exc
        yield host, mine


def _settings_given(host_vars, hosts, settings, filter_name):
    """{host: {setting: value}} of `settings` as each Mac's inventory (or -e) sets them, as plain
    Python; a setting a Mac does not set, or whose value is made from what a later stage sets
    (undefined now: checked where it is used), left out."""
    given = {}
    for host, mine in _each_host(host_vars, hosts, filter_name):
        values = {setting: _given(mine, setting, _UNSET) for setting in settings}
        given[host] = {setting: plain(value) for setting, value in values.items() if value is not _UNSET}
    return given


def mlx_unsafe_settings(host_vars, hosts):
    return setting_names.problems(_settings_given(host_vars, hosts, setting_names.SETTINGS, "mlx_unsafe_settings"))


def mlx_unknown_settings(host_vars, hosts):
    names = {host: list(mine) for host, mine in _each_host(host_vars, hosts, "mlx_unknown_settings")}
    try:
        return setting_names.unknown(names, setting_names.toolkit_names())
    except (OSError, ValueError, AttributeError) as exc:  # a role's file unreadable or not YAML
        raise AnsibleFilterError(f"mlx_unknown_settings: cannot read the roles' settings ({exc})") from exc


def mlx_mistyped_settings(host_vars, hosts):
    types = setting_names.toolkit_names()["types"]  # (its errors: mlx_unknown_settings, the task before, names them)
    return setting_names.mistyped(_settings_given(host_vars, hosts, types, "mlx_mistyped_settings"), types)


def mlx_shared_targets(host_vars, hosts):
    by_target = {}
    for host, mine in _each_host(host_vars, hosts, "mlx_shared_targets"):
        address = _given(mine, "ansible_host")
        if address is None:
            continue  # reached by its inventory name: names differ
        port = _given(mine, "ansible_port")
        port = "" if port is None else str(port)
        by_target.setdefault((str(address), port), []).append(str(host))
    return [
        "%s reach the same Mac (ansible_host %s%s)" % (" and ".join(names), address, f", port {port}" if port else "")
        for (address, port), names in by_target.items()
        if len(names) > 1
    ]


class FilterModule:
    def filters(self):
        return {
            "mlx_base_python": mlx_base_python,
            "mlx_python_probe_msg": mlx_python_probe_msg,
            "mlx_clt_stub": mlx_clt_stub,
            "mlx_script_json": mlx_script_json,
            "mlx_unsafe_path": mlx_unsafe_path,
            "mlx_unsafe_settings": mlx_unsafe_settings,
            "mlx_unknown_settings": mlx_unknown_settings,
            "mlx_mistyped_settings": mlx_mistyped_settings,
            "mlx_shared_targets": mlx_shared_targets,
            "mlx_lock_problem": mlx_lock_problem,
            "mlx_pip_failure": mlx_pip_failure,
        }
