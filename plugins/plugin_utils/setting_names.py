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

`unknown(names_by_host, toolkit_names())` names the variables the inventory or the command line
set with a role's prefix (`model_sync_`, `benchmark_`, ...) that no role reads: a misspelt
setting, which Ansible would otherwise ignore without a word, with the closest real one.

`mistyped(values_by_host, toolkit_names()["types"])` names the settings whose value is not of
the type their role's argument spec declares. `-e key=value` gives every value as a string:
`-e power_manage=false` is the string "false", which a condition reads as true (and
ansible-core 2.19 refuses in a `when`). Such a string is accepted where it reads as what it
says (Ansible's own words for true and false, digits for a number): every use in the roles
converts it (`| bool`, `| int`, tests/unit/test_setting_types.py holds them to it). Anything
else is named, with the fix: JSON for a list (`-e '{"benchmark_modes": ["pipeline"]}'`).
"""

from __future__ import annotations

import difflib
import functools
import json
import re
from pathlib import Path

import yaml
from ansible.module_utils.parsing.convert_bool import BOOLEANS

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


def _each_value(values_by_host, setting, skip=()):
    """(value, the setting as a reason names it) for each value of `setting` the Macs give, in the
    hosts' order, values in `skip` left out: "setting" when every Mac has that value, else
    "setting of m1, m2"."""
    hosts = list(values_by_host)
    by_value = {}  # repr(value) -> (value, [host]): a value need not be hashable
    for host in hosts:
        given = values_by_host[host] or {}
        if setting in given and given[setting] not in skip:
            by_value.setdefault(repr(given[setting]), (given[setting], []))[1].append(host)
    for value, where in by_value.values():
        yield value, setting if len(where) == len(hosts) else "%s of %s" % (setting, ", ".join(where))


def problems(values_by_host):
    """{host: {setting: value}} -> [reason], in SETTINGS' order, then in the hosts' order."""
    found = []
    for setting in SETTINGS:
        for value, named in _each_value(values_by_host, setting, () if setting in LABELS else ("", None)):
            if setting in LABELS:
                why, goes = unsafe_label(value, named), None
            elif setting in NAMES:
                why, goes = unsafe_component(value, named), NAMES[setting]
            else:
                why, goes = unsafe_path(value, named), PATHS[setting]
            if why:
                found.append("%s (it reaches %s)" % (why, goes) if goes else why)
    return found


# The collection's root: its roles/ (their argument specs, defaults and vars) and playbooks/.
ROOT = Path(__file__).resolve().parents[2]
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser when PyYAML has it
_NAMES = ("register", "loop_var")  # a name
_KEYS = ("set_fact", "ansible.builtin.set_fact", "vars")  # a mapping: its keys


def _defined(node, found):
    """Adds to `found` the names a task or play defines as it runs: register, set_fact's keys, vars'
    keys, loop_var (nested blocks included)."""
    if isinstance(node, list):
        for item in node:
            _defined(item, found)
    elif isinstance(node, dict):
        for key, value in node.items():
            if key in _NAMES and isinstance(value, str):
                found.add(value)
            elif key in _KEYS and isinstance(value, dict):
                found.update(str(name) for name in value)
            _defined(value, found)


def _load(path):
    """A YAML file's data, None when there is no such file."""
    if not path.is_file():
        return None
    return yaml.load(path.read_text(), Loader=_LOADER)


def _facts(path):
    """The facts a module sets: the keys its RETURN documents under ansible_facts."""
    found = re.search(r'^RETURN = r?"""(.*?)"""', path.read_text(), re.MULTILINE | re.DOTALL)
    returned = (yaml.load(found.group(1), Loader=_LOADER) if found else None) or {}
    return list((returned.get("ansible_facts") or {}).get("contains") or {})


@functools.lru_cache(maxsize=4)
def toolkit_names(root=ROOT):
    """What the roles read, from the files that say it once: {"settings": {name: role} (each
    role's meta/argument_specs.yml, defaults/main.yml, vars/main.yml), "internal": set of names
    the roles and playbooks define as they run (and the facts the modules set), "prefixes":
    {role + "_": role}}."""
    root = Path(root)
    settings, internal, types = {}, set(), {}
    roles = sorted(path for path in (root / "roles").iterdir() if (path / "tasks").is_dir())
    for role in roles:
        specs = _load(role / "meta" / "argument_specs.yml") or {}
        for entry in (specs.get("argument_specs") or {}).values():
            options = (entry or {}).get("options") or {}
            settings.update(dict.fromkeys(options, role.name))
            for name, option in options.items():
                types.setdefault(name, set()).add((option or {}).get("type", "str"))
        for part in ("defaults", "vars"):
            settings.update(dict.fromkeys(_load(role / part / "main.yml") or {}, role.name))
        for path in sorted(role.glob("tasks/*.yml")) + sorted(role.glob("handlers/*.yml")):
            _defined(_load(path), internal)
    for path in sorted((root / "playbooks").glob("*.yml")):
        _defined(_load(path), internal)
    for path in sorted((root / "plugins" / "modules").glob("*.py")):  # (library/, linked)
        internal.update(_facts(path))
    return {
        "settings": settings,
        "internal": internal,
        "prefixes": {role.name + "_": role.name for role in roles},
        "types": {name: frozenset(kinds) for name, kinds in types.items()},
    }


def _closest(name, role, names):
    """[the setting `name` most likely misspells], or []: among its role's settings, by the part
    after the prefix (the prefix they share would make any two look alike), else any setting by
    the whole name."""
    prefix = role + "_"
    mine = {setting[len(prefix) :]: setting for setting, owner in names["settings"].items() if owner == role}
    near = difflib.get_close_matches(name[len(prefix) :], list(mine), n=1, cutoff=0.6)
    return [mine[near[0]]] if near else difflib.get_close_matches(name, list(names["settings"]), n=1, cutoff=0.85)


def unknown(names_by_host, names):
    """{host: [variable name]} (as the inventory and the command line set them) and
    toolkit_names() -> [warning], one per name with a role's prefix that no role reads, sorted,
    naming the Macs when not all of them set it and the closest setting of the toolkit."""
    hosts = list(names_by_host)
    prefixes = sorted(names["prefixes"].items(), key=lambda item: -len(item[0]))  # the longest first
    where = {}
    for host in hosts:
        for name in names_by_host[host] or ():
            name = str(name)
            role = next((role for prefix, role in prefixes if name.startswith(prefix)), None)
            if role and name not in names["settings"] and name not in names["internal"]:
                where.setdefault(name, (role, []))[1].append(host)
    found = []
    for name, (role, macs) in sorted(where.items()):
        set_on = "every Mac" if len(macs) == len(hosts) else ", ".join(macs)
        near = _closest(name, role, names)
        hint = (
            "did you mean %s?" % near[0]
            if near
            else "check its spelling against the settings of the role %s (roles/%s/README.md)" % (role, role)
        )
        found.append(
            "%s (set for %s, in the inventory or with -e) is not a setting of mlx-cluster: no stage reads it, "
            "so it changes nothing; %s" % (name, set_on, hint)
        )
    return found


# (Ansible's own words for true and false, BOOLEANS, are what its `bool` filter and a module's
# bool option read; a string is compared lower-cased.)
_NUMBER = {"int": re.compile(r"^\s*[-+]?[0-9]+\s*$"), "float": re.compile(r"^\s*[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)\s*$")}
_JSON = "-e '{\"%s\": %s}'"


def _reads_as(kind, value):
    """None when `value` reads as the argument spec's type `kind` (str, path and raw: anything;
    null: the role's own default, as an argument spec takes it), else what the setting must be."""
    if value is None:
        return None
    if kind == "bool":
        word = value.strip().lower() if isinstance(value, str) else value
        if isinstance(value, bool) or (isinstance(word, (str, int, float)) and word in BOOLEANS):
            return None
        return "true or false"
    if kind in _NUMBER:
        numeric = (int,) if kind == "int" else (int, float)
        if (isinstance(value, numeric) and not isinstance(value, bool)) or (
            isinstance(value, str) and _NUMBER[kind].match(value)
        ):
            return None
        return "a whole number" if kind == "int" else "a number"
    if kind == "list":
        return None if isinstance(value, (list, tuple)) else "a list"
    if kind == "dict":
        return None if isinstance(value, dict) else "a mapping"
    return None


def mistyped(values_by_host, types):
    """{host: {setting: value}} (as the inventory and the command line give them; a setting a Mac
    does not set left out) and toolkit_names()["types"] -> [reason], one per setting and value,
    sorted by setting: the value, the Macs when not all of them have it, what it must be and how
    to give it. A setting several entry points declare with different types is not checked."""
    found = []
    for setting in sorted({name for given in values_by_host.values() for name in given or {}}):
        kinds = types.get(setting) or frozenset()
        if len(kinds) != 1:
            continue
        (kind,) = kinds
        for value, named in _each_value(values_by_host, setting):
            must = _reads_as(kind, value)
            if must is None:
                continue
            words = [word.strip() for word in value.split(",") if word.strip()] if isinstance(value, str) else []
            example = {"bool": "false", "int": "3", "float": "0.5", "list": json.dumps(words or ["..."]), "dict": "{}"}[
                kind
            ]
            how = (
                "-e key=value gives every value as a string: give it as JSON, %s, or in the inventory"
                % (_JSON % (setting, example))
                if isinstance(value, str) and kind in ("list", "dict")
                else "e.g. %s" % (_JSON % (setting, example))
            )
            found.append("%s must be %s (got %r): %s" % (named, must, value, how))
    return found
