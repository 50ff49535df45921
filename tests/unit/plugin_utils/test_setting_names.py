"""plugins/plugin_utils/setting_names.py and its filters: mlx_unsafe_settings, the settings
validate checks against the toolkit's one rule for names (module_utils/mlx_files.py), each
refused naming the setting, the value, the Macs that set it, the fix and where it goes; and
mlx_unknown_settings, the variables with a role's prefix that no role reads (a misspelt
setting), each named with the Macs that set it and the closest setting."""

from __future__ import annotations

import importlib
import re

import pytest
import yaml
from jinja2 import Undefined

from ansible_collections.mlx.cluster.plugins.plugin_utils import planner, setting_names
from tests.unit.filter.controller import controller_imports

SAFE = {
    "mlx_server_run_dir": "/opt/mlx-cluster/server",
    "mlx_server_python": "/opt/mlx-cluster/venv/bin/python",
    "python_env_interpreter": "/opt/homebrew/bin/python3.13",
    "python_env_venv_dir": "/opt/mlx-cluster/venv",
    "python_env_base_python": "/usr/bin/python3",
    "python_env_python": "/opt/mlx-cluster/venv/bin/python",
    "benchmark_python": "/opt/mlx-cluster/venv/bin/python",
    "net_check_python": "/opt/mlx-cluster/venv/bin/python",
    "port_check_python": "/opt/mlx-cluster/venv/bin/python",
    "model_sync_rsync_path": "/opt/homebrew/bin/rsync",
    "model_sync_dest": "/Volumes/Models/Qwen3-4B-Instruct-2507-4bit",
    "model_sync_name": "Qwen3-4B-Instruct-2507-4bit",
    "mlx_server_label": "org.example.mlx-server",
}


def test_every_setting_listed_has_a_safe_example_here():
    assert set(SAFE) == set(setting_names.SETTINGS)


def test_safe_values_and_unset_paths_pass():
    assert setting_names.problems({"m1": dict(SAFE), "m2": dict(SAFE)}) == []
    # an empty path is the role's default; a setting a Mac does not set is not checked
    assert setting_names.problems({"m1": {s: "" for s in setting_names.PATHS}, "m2": {}}) == []


@pytest.mark.parametrize("setting", sorted(setting_names.PATHS))
@pytest.mark.parametrize(
    "value, rule",
    [
        ("/opt/x; touch /tmp/pwned", "holds whitespace or characters a shell reads"),
        ("/opt/$(id)/python", "holds whitespace or characters a shell reads"),
        ("/opt/../etc/python", "holds '.' or '..' components"),
        ("venv/bin/python", "is not an absolute path"),
    ],
    ids=["semicolon", "substitution", "dotdot", "relative"],
)
def test_a_path_a_shell_would_read_is_refused_naming_setting_value_fix_and_where(setting, value, rule):
    (why,) = setting_names.problems({"m1": {setting: value}, "m2": {setting: value}})
    assert why.startswith(f"{setting} {value!r} {rule}"), why
    assert ("use letters, digits" in why) or ("give " in why), why  # the fix
    assert why.endswith(f"(it reaches {setting_names.PATHS[setting]})"), why


@pytest.mark.parametrize(
    "value, rule",
    [
        ("Qwen 3 4B", "holds whitespace or characters a shell reads"),
        ("qwen;id", "holds whitespace or characters a shell reads"),
        ("mlx-community/Qwen3-4B", "is not one directory name"),
        ("..", "is not one directory name"),
    ],
)
def test_a_model_name_that_is_not_one_safe_directory_name_is_refused(value, rule):
    [why] = setting_names.problems({"m1": {"model_sync_name": value}, "m2": {"model_sync_name": value}})
    assert why.startswith(f"model_sync_name {value!r} {rule}"), why
    assert why.endswith(f"(it reaches {setting_names.NAMES['model_sync_name']})"), why
    assert setting_names.problems({"m1": {"model_sync_name": ""}}) == []  # no model: nothing to check


@pytest.mark.parametrize("label", ["../../tmp/evil", "org.x y", "", "org.x\n", 7])
def test_a_label_that_is_not_reverse_dns_words_is_refused(label):
    (why,) = setting_names.problems({"m1": {"mlx_server_label": label}})
    assert why.startswith(f"mlx_server_label {label!r} is not a launchd label"), why
    assert "e.g. org.mlx-cluster.server" in why and "LaunchDaemon's plist" in why


def test_the_macs_are_named_when_not_all_have_the_value_and_each_value_once():
    bad = "/opt/py thon"
    why = setting_names.problems(
        {
            "m1": {"python_env_interpreter": bad},
            "m2": {"python_env_interpreter": bad},
            "m3": {"python_env_interpreter": "/usr/bin/python3"},
            "m4": {"python_env_interpreter": "/opt/a;b", "model_sync_rsync_path": ["/opt/rsync"]},
        }
    )
    assert [w.split(" '")[0].split(" [")[0] for w in why] == [
        "python_env_interpreter of m1, m2",
        "python_env_interpreter of m4",
        "model_sync_rsync_path of m4",
    ], why
    assert why[2].startswith("model_sync_rsync_path of m4 ['/opt/rsync'] is not a path")  # (nor need it be hashable)


@pytest.fixture(scope="module")
def unsafe_settings():
    with controller_imports():
        filters = importlib.import_module("ansible_collections.mlx.cluster.plugins.filter.python_filters")
    return filters.FilterModule().filters()["mlx_unsafe_settings"]


def test_the_filter_reads_each_macs_settings_and_leaves_what_a_later_stage_sets(unsafe_settings):
    """A value made from a variable a later stage sets (undefined in validate, as Ansible hands
    it over) is left to the module that uses it; a host's other variables are not read."""
    host_vars = {
        "m1": {"benchmark_python": Undefined(name="python_env_python"), "mlx_server_label": "org.x y", "other": 1},
        "m2": {"mlx_server_label": "org.x y"},
    }
    assert unsafe_settings(host_vars, ["m1", "m2"]) == [
        "mlx_server_label 'org.x y' is not a launchd label: use dot-separated words of letters, digits, _ and - "
        "(e.g. org.mlx-cluster.server); it names the LaunchDaemon's plist"
    ]
    assert unsafe_settings(host_vars, ["m2"]) == unsafe_settings(host_vars, ["m1", "m2"])
    with controller_imports():
        from ansible.errors import AnsibleFilterError
    with pytest.raises(AnsibleFilterError, match="hosts must be a list"):
        unsafe_settings(host_vars, "m1")
    with pytest.raises(AnsibleFilterError, match="expects hostvars"):
        unsafe_settings(host_vars, ["m9"])


def test_two_hosts_that_reach_one_mac_are_named_and_ports_behind_one_address_are_not():
    with controller_imports():
        filters = importlib.import_module("ansible_collections.mlx.cluster.plugins.filter.python_filters")
        from ansible.errors import AnsibleFilterError
    shared = filters.FilterModule().filters()["mlx_shared_targets"]
    host_vars = {
        "m1": {"ansible_host": "10.0.0.1"},
        "m5": {"ansible_host": "10.0.0.1"},
        "m2": {"ansible_host": "10.0.0.2"},
        "j1": {"ansible_host": "jump.lan", "ansible_port": 2201},
        "j2": {"ansible_host": "jump.lan", "ansible_port": "2202"},
        "j3": {"ansible_host": "jump.lan", "ansible_port": 2201},
        "n1": {},
        "n2": {"ansible_host": Undefined(name="later")},
    }
    assert shared(host_vars, list(host_vars)) == [
        "m1 and m5 reach the same Mac (ansible_host 10.0.0.1)",
        "j1 and j3 reach the same Mac (ansible_host jump.lan, port 2201)",
    ]
    assert shared(host_vars, ["m1", "m2", "j1", "j2", "n1", "n2"]) == []
    with pytest.raises(AnsibleFilterError, match="hosts must be a list"):
        shared(host_vars, "m1")
    with pytest.raises(AnsibleFilterError, match="expects hostvars"):
        shared(host_vars, ["m9"])


# --- variables with a role's prefix that no role reads (validate's warning) ---


def _collection(root):
    """A collection of one role, `demo`, and one module, as toolkit_names reads them."""
    role = root / "roles" / "demo"
    for part in ("tasks", "meta", "defaults", "vars"):
        (role / part).mkdir(parents=True)
    (role / "meta" / "argument_specs.yml").write_text(
        "argument_specs:\n  main:\n    options:\n      demo_mode: {type: str}\n"
        "  other:\n    options:\n      demo_trials: {type: int}\n"
    )
    (role / "defaults" / "main.yml").write_text("demo_timeout: 60\n")
    (role / "vars" / "main.yml").write_text("demo_lock_path: /x\n")
    (role / "tasks" / "main.yml").write_text(
        "- block:\n"
        "    - ansible.builtin.command: [true]\n      register: demo_probe\n"
        "    - ansible.builtin.set_fact:\n        demo_seen: 1\n"
        "  vars:\n    demo_here: 2\n"
        "- ansible.builtin.debug: {msg: x}\n  loop: [1]\n  loop_control: {loop_var: demo_item}\n"
    )
    (root / "roles" / "notes").mkdir()  # no tasks/: not a role
    (root / "playbooks").mkdir()
    (root / "playbooks" / "p.yml").write_text("- hosts: all\n  vars:\n    demo_play: 1\n  tasks: []\n")
    (root / "plugins" / "modules").mkdir(parents=True)
    (root / "plugins" / "modules" / "demo_facts.py").write_text(
        'DOCUMENTATION = r"""\nmodule: demo_facts\n"""\n'
        'RETURN = r"""\nansible_facts:\n  contains:\n    demo_facts_found:\n      type: dict\n"""\n'
    )
    return root


def test_the_toolkits_names_come_from_the_roles_playbooks_and_modules_files(tmp_path):
    names = setting_names.toolkit_names(_collection(tmp_path))
    assert names["settings"] == dict.fromkeys(["demo_mode", "demo_trials", "demo_timeout", "demo_lock_path"], "demo")
    assert names["internal"] == {"demo_probe", "demo_seen", "demo_here", "demo_item", "demo_play", "demo_facts_found"}
    assert names["prefixes"] == {"demo_": "demo"}
    assert names["types"] == {"demo_mode": frozenset({"str"}), "demo_trials": frozenset({"int"})}


def test_a_name_no_role_reads_is_named_once_with_the_macs_that_set_it_and_the_closest_setting(tmp_path):
    names = setting_names.toolkit_names(_collection(tmp_path))
    given = {
        "m1": ["demo_mdoe", "demo_probe", "demo_mode", "ansible_host", "mine", "demo_nap"],
        "m2": ["demo_mdoe", "demo_trails"],
    }
    assert setting_names.unknown(given, names) == [
        "demo_mdoe (set for every Mac, in the inventory or with -e) is not a setting of mlx-cluster: no stage "
        "reads it, so it changes nothing; did you mean demo_mode?",
        "demo_nap (set for m1, in the inventory or with -e) is not a setting of mlx-cluster: no stage reads it, "
        "so it changes nothing; check its spelling against the settings of the role demo (roles/demo/README.md)",
        "demo_trails (set for m2, in the inventory or with -e) is not a setting of mlx-cluster: no stage reads "
        "it, so it changes nothing; did you mean demo_trials?",
    ]
    assert setting_names.unknown({"m1": ["demo_mode"], "m2": []}, names) == []


def test_the_closest_setting_is_looked_for_after_the_prefix_the_role_longest_first():
    """The prefix two names share makes any two look alike (power_nap is not power_manage), and
    mlx_cluster_ names belong to mlx_cluster, not to a shorter prefix."""
    names = {
        "settings": {"power_manage": "power", "mlx_cluster_backend": "mlx_cluster", "mlx_backend": "mlx"},
        "internal": set(),
        "prefixes": {"power_": "power", "mlx_": "mlx", "mlx_cluster_": "mlx_cluster"},
    }
    why = setting_names.unknown({"m1": ["power_nap", "mlx_cluster_backed"]}, names)
    assert why[0].endswith("did you mean mlx_cluster_backend?"), why
    assert why[1].endswith("the settings of the role power (roles/power/README.md)"), why


def test_every_name_with_a_roles_prefix_the_toolkit_reads_is_one_it_knows():
    """The warning's list is the roles' files: a name a task, template or playbook reads that
    is in none of them would be called unread when a user sets it."""
    names = setting_names.toolkit_names()
    read = re.compile(r"(?<![\w./&*-])((?:%s)\w+)(?![\w.(-])" % "|".join(names["prefixes"]))
    root = setting_names.ROOT
    files = [root / "site.yml"] + sorted(root.glob("playbooks/*.yml")) + sorted(root.glob("roles/*/*/*"))
    unknown = {
        (match.group(1), str(path.relative_to(root)))
        for path in files
        if path.suffix in (".yml", ".j2", ".yaml") and "README" not in path.name
        for match in read.finditer(path.read_text())
    }
    unknown = {
        (name, where)
        for name, where in unknown
        if name not in names["settings"] and name not in names["internal"] and name not in planner.STAGE_TAGS
    }
    assert unknown == {("model_sync_sorce", "roles/mlx_cluster/tasks/validate.yml")}  # (its comment's example)
    # the example inventory's settings, and the roles' own: nothing to warn about
    example = yaml.safe_load((root / "inventory" / "mac_cluster" / "group_vars" / "mac_cluster.yml").read_text())
    assert setting_names.unknown({"m1": list(example), "m2": list(names["settings"])}, names) == []


# --- each setting's value against the type its argument spec declares (validate's check) ---

TYPES = {
    "demo_manage": frozenset({"bool"}),
    "demo_trials": frozenset({"int"}),
    "demo_ratio": frozenset({"float"}),
    "demo_modes": frozenset({"list"}),
    "demo_env": frozenset({"dict"}),
    "demo_name": frozenset({"str"}),
    "demo_either": frozenset({"int", "str"}),  # two entry points that differ: not checked
}


@pytest.mark.parametrize(
    "value",
    [True, False, "false", "False", " no ", "yes", "on", "0", "1", "t", "n", 0, 1],
)
def test_a_bool_setting_takes_ansibles_words_for_true_and_false(value):
    assert setting_names.mistyped({"m1": {"demo_manage": value}}, TYPES) == []


@pytest.mark.parametrize("value", [7, "7", " 12 ", "-3", "+4"])
def test_an_int_setting_takes_digits(value):
    assert setting_names.mistyped({"m1": {"demo_trials": value}}, TYPES) == []


@pytest.mark.parametrize("value", [0.2, 1, "0.25", ".5", "3"])
def test_a_float_setting_takes_a_number_written_as_one(value):
    assert setting_names.mistyped({"m1": {"demo_ratio": value}}, TYPES) == []


def test_a_value_that_does_not_read_as_its_type_is_named_with_how_to_give_it():
    given = {
        "m1": {
            "demo_manage": "ture",
            "demo_trials": "ten",
            "demo_ratio": "fast",
            "demo_modes": "tensor, pipeline",
            "demo_env": "A=1",
            "demo_name": ["any", "thing"],
            "demo_either": "x",
            "ansible_host": "192.0.2.1",
        },
        "m2": {"demo_manage": "ture", "demo_trials": True, "demo_modes": ["pipeline"], "demo_env": {}, "demo_ratio": 2},
    }
    assert setting_names.mistyped(given, TYPES) == [
        "demo_env of m1 must be a mapping (got 'A=1'): -e key=value gives every value as a string: give it as JSON, "
        "-e '{\"demo_env\": {}}', or in the inventory",
        "demo_manage must be true or false (got 'ture'): e.g. -e '{\"demo_manage\": false}'",
        "demo_modes of m1 must be a list (got 'tensor, pipeline'): -e key=value gives every value as a string: give "
        'it as JSON, -e \'{"demo_modes": ["tensor", "pipeline"]}\', or in the inventory',
        "demo_ratio of m1 must be a number (got 'fast'): e.g. -e '{\"demo_ratio\": 0.5}'",
        "demo_trials of m1 must be a whole number (got 'ten'): e.g. -e '{\"demo_trials\": 3}'",
        "demo_trials of m2 must be a whole number (got True): e.g. -e '{\"demo_trials\": 3}'",
    ]
    assert setting_names.mistyped({"m1": {}, "m2": {"demo_modes": ["a"]}}, TYPES) == []
    assert setting_names.mistyped({"m1": {"demo_manage": ["no"]}}, TYPES) == [
        "demo_manage must be true or false (got ['no']): e.g. -e '{\"demo_manage\": false}'"
    ]
    # null: the role's default, as an argument spec takes it
    assert setting_names.mistyped({"m1": {name: None for name in TYPES}}, TYPES) == []


def test_the_filter_reads_each_macs_settings_from_hostvars():
    with controller_imports():
        filters = importlib.import_module("ansible_collections.mlx.cluster.plugins.filter.python_filters")
        from ansible.errors import AnsibleFilterError
    mlx_mistyped_settings = filters.FilterModule().filters()["mlx_mistyped_settings"]
    host_vars = {
        "m1": {"benchmark_modes": "pipeline", "power_manage": "false", "mine": "x"},
        "m2": {"benchmark_modes": "pipeline", "power_manage": "off"},
    }
    why = mlx_mistyped_settings(host_vars, ["m1", "m2"])
    assert why == [
        "benchmark_modes must be a list (got 'pipeline'): -e key=value gives every value as a string: give it as "
        'JSON, -e \'{"benchmark_modes": ["pipeline"]}\', or in the inventory'
    ]
    with pytest.raises(AnsibleFilterError, match="hosts must be a list"):
        mlx_mistyped_settings(host_vars, "m1")
