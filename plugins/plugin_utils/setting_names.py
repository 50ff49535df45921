# -*- coding: utf-8 -*-
"""The settings validate checks, before any Mac is contacted, against the toolkit's one rule for
names that reach a shell line, an interpreter the Macs run or a path root writes
(module_utils/mlx_files.py `unsafe_path`, `unsafe_component`, `unsafe_label`).

`problems(values_by_host)` takes each Mac's settings as the inventory and the command line give
them ({host: {setting: value}}; a setting a Mac does not set is left out) and returns one
reason per setting and value, naming the setting, the value, the Macs when not all of them
have it, the fix and where the value goes. A setting that is not set is not checked here: the
roles' defaults are safe, and each module checks again what it is given. mlx_cluster_remote_dir
(which may be under ~) is validate's own check; the settings checked where they are first used
(the cluster key's forced command: ssh_trust_*) are not listed here. model_sync_dest is: a
`site.yml` run reaches the models stage only after the network and env stages, minutes later.
"""

from __future__ import annotations

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_files import unsafe_component, unsafe_label, unsafe_path

# setting -> where its value goes (said in the reason). Empty means "the role's default" for
# every one of them.
PATHS = {
    "mlx_server_run_dir": "the server's directory, named in the LaunchDaemon root loads",
    "mlx_server_python": "the program of the LaunchDaemon root loads",
    "python_env_interpreter": "ansible.builtin.script's executable, a shell line",
    "python_env_venv_dir": "its bin/python, ansible.builtin.script's executable, a shell line",
    "python_env_base_python": "pip's virtualenv_command, split on spaces",
    "python_env_python": "ansible.builtin.script's executable, a shell line",
    "benchmark_python": "mlx.launch's command line, which the far Mac's shell reads",
    "net_check_python": "mlx.launch's command line, which the far Mac's shell reads",
    "port_check_python": "the program of the port probe's LaunchDaemon, which root loads",
    "model_sync_rsync_path": "rsync's --rsync-path, which the receiving Mac's shell reads",
    "model_sync_dest": "rsync's remote path, which the receiving Mac's shell reads, and the cluster key's "
    "forced command",
}
# One directory name: setting -> where it goes.
NAMES = {
    "model_sync_name": "the model's directory on every Mac (<cluster dir>/models/<name>), rsync's remote path",
}
# A launchd label: it names /Library/LaunchDaemons/<label>.plist, which root writes and removes.
LABELS = ("mlx_server_label",)
SETTINGS = tuple(PATHS) + tuple(NAMES) + LABELS


def problems(values_by_host):
    """{host: {setting: value}} -> [reason], in SETTINGS' order, then in the hosts' order."""
    hosts = list(values_by_host)
    found = []
    for setting in SETTINGS:
        by_value = {}  # repr(value) -> (value, [host]): a value need not be hashable
        for host in hosts:
            given = values_by_host[host] or {}
            if setting not in given or (setting not in LABELS and given[setting] in ("", None)):
                continue
            by_value.setdefault(repr(given[setting]), (given[setting], []))[1].append(host)
        for value, where in by_value.values():
            named = setting if len(where) == len(hosts) else "%s of %s" % (setting, ", ".join(where))
            if setting in LABELS:
                why, goes = unsafe_label(value, named), None
            elif setting in NAMES:
                why, goes = unsafe_component(value, named), NAMES[setting]
            else:
                why, goes = unsafe_path(value, named), PATHS[setting]
            if why:
                found.append("%s (it reaches %s)" % (why, goes) if goes else why)
    return found
