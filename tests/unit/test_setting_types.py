"""Every use of a bool or numeric setting in the roles and playbooks converts it.

`-e power_manage=false` gives the string "false", and validate accepts it (it reads as what it
says: plugins/plugin_utils/setting_names.py `mistyped`). Used as it is, a condition reads any
non-empty string as true (ansible-core 2.19 refuses it in a `when`, and takes it as true inside
`{{ x if power_manage else y }}`), and a filter compares "0.2" with numbers. So in every Jinja
expression of a task, handler, role default or variable, template and playbook, a bool setting
is followed by `| bool`, an int one by `| int` or `| string`, a float one by `| float`; unless
the whole expression is the setting (`key: "{{ power_manage }}"`: a module option or a role
variable, which its own type converts or whose own uses this test holds to the same rule), it
is joined into a message as text (`~`), or only asked whether it is set (`is none`).
"""

from __future__ import annotations

import re

import pytest
import yaml

from ansible_collections.mlx.cluster.plugins.plugin_utils import setting_names

ROOT = setting_names.ROOT
CONVERT = {"bool": ("bool",), "int": ("int", "string"), "float": ("float", "string")}
CONDITIONS = ("when", "changed_when", "failed_when", "until")
JINJA = re.compile(r"\{\{(.*?)\}\}|\{%(.*?)%\}", re.DOTALL)


def expressions(node, condition=False):
    """(expression, is a condition) for every Jinja expression in a task file's data: the
    conditions' values whole, the `{{ }}` and `{% %}` parts of every string."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from expressions(value, key in CONDITIONS)
    elif isinstance(node, list):
        for item in node:
            yield from expressions(item, condition)
    elif isinstance(node, str):
        if condition:
            yield node, True
        for match in JINJA.finditer(node):
            yield (match.group(1) if match.group(1) is not None else match.group(2)), False


def unconverted(expression, settings, condition=False):
    """[(setting, expression)] for each use of a setting in `expression` not followed by its
    conversion (a `| default(...)` before it allowed), unless the expression is the setting alone
    and no condition (`when: power_manage` is a condition on a string)."""
    if expression.strip() in settings and not condition:
        return []
    found = []
    for name, kind in settings.items():
        for match in re.finditer(r"(?<![\w.'\"])%s(?![\w'\"])" % name, expression):
            rest = expression[match.end() :]
            if re.search(r"~\s*$", expression[: match.start()]) or re.match(r"\s*~", rest):
                continue  # joined into a message as text: any type reads
            if re.match(r"\s+is\s+(not\s+)?(none|defined|undefined)\b", rest):
                continue  # whether it is set at all
            if not re.match(r"\s*(\|\s*default\([^)]*\)\s*)?\|\s*(%s)\b" % "|".join(CONVERT[kind]), rest):
                found.append((name, " ".join(expression.split())))
    return found


def typed_settings():
    """{setting: bool | int | float} of the roles' argument specs (one type each)."""
    types = setting_names.toolkit_names()["types"]
    return {
        name: next(iter(kinds)) for name, kinds in types.items() if len(kinds) == 1 and next(iter(kinds)) in CONVERT
    }


def files():
    roles = [
        path
        for part in ("tasks", "handlers", "defaults", "vars")
        for path in sorted(ROOT.glob(f"roles/*/{part}/*.yml"))
    ]
    return [ROOT / "site.yml", *sorted(ROOT.glob("playbooks/*.yml")), *roles, *sorted(ROOT.glob("roles/*/templates/*"))]


def test_the_settings_checked_are_the_argument_specs_bools_and_numbers():
    settings = typed_settings()
    assert settings["power_manage"] == "bool" and settings["benchmark_trials"] == "int"
    assert settings["net_check_slow_ratio"] == "float"
    assert len([kind for kind in settings.values() if kind == "bool"]) >= 20


@pytest.mark.parametrize(
    "expression, found",
    [
        ("power_manage", []),
        (" power_manage | bool and x", []),
        ("x if power_manage else y", [("power_manage", "x if power_manage else y")]),
        ("power_manage | default(true) | bool", []),
        ("'power_manage' in names or hostvars[h].power_manage", []),
        ("benchmark_trials | string", []),
        ("benchmark_trials > 3", [("benchmark_trials", "benchmark_trials > 3")]),
        ("'got ' ~ benchmark_trials ~ ' trials'", []),
        ("none if benchmark_trials is none else benchmark_trials | int", []),
    ],
)
def test_the_rule(expression, found):
    assert unconverted(expression, {"power_manage": "bool", "benchmark_trials": "int"}) == found


def test_a_condition_on_the_setting_alone_is_a_use():
    assert unconverted("power_manage", {"power_manage": "bool"}, condition=True) == [("power_manage", "power_manage")]
    assert list(expressions({"when": ["power_manage", "x"], "msg": "{{ a }}"})) == [
        ("power_manage", True),
        ("x", True),
        (" a ", False),
    ]


def test_every_use_of_a_bool_or_numeric_setting_converts_it():
    settings = typed_settings()
    found = []
    for path in files():
        text = path.read_text()
        if path.suffix in (".yml", ".yaml"):
            parts = list(expressions(yaml.safe_load(text)))
        else:  # a template: Jinja throughout
            parts = [(m.group(1) if m.group(1) is not None else m.group(2), False) for m in JINJA.finditer(text)]
        found += [
            (str(path.relative_to(ROOT)), *use)
            for part, condition in parts
            for use in unconverted(part, settings, condition)
        ]
    assert found == []
