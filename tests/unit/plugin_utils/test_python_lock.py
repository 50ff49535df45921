"""The env stage's lock (python_env_require_hashes): the role's own lock pins the role's default
pins, for each Python it may use, every package with hashes (roles/python_env/files/
requirements.lock, made by scripts/lock_requirements.py); lock_problem() names what a lock does
not pin and the command that makes one."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

from ansible_collections.mlx.cluster.plugins.plugin_utils.pythons import lock_pins, lock_problem

ROOT = Path(__file__).resolve().parents[3]
ROLE = ROOT / "roles" / "python_env"
LOCK = (ROLE / "files" / "requirements.lock").read_text()
DEFAULTS = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
PINS = [
    f"mlx=={DEFAULTS['python_env_mlx_version']}",
    f"mlx-lm=={DEFAULTS['python_env_mlx_lm_version']}",
    f"prometheus-client=={DEFAULTS['python_env_prometheus_client_version']}",
]


def entries(text):
    """[(requirement line, [sha256])] of a lock, continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", text)
    out = []
    for line in joined.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        req, *hashes = line.split(" --hash=sha256:")
        out.append((req.strip(), [h.strip() for h in hashes]))
    return out


def test_the_roles_lock_pins_the_roles_defaults_for_every_python_it_may_use():
    assert lock_problem(LOCK, PINS, "requirements.lock") == ""
    header = dict(line[2:].split(": ", 1) for line in LOCK.splitlines()[1:3])
    assert header["pins"] == " ".join(PINS)
    assert header["resolved for"] == "macosx_14_0_arm64, Python " + " ".join(DEFAULTS["python_env_python_versions"])


def test_every_line_of_the_roles_lock_is_a_pinned_requirement_with_hashes_and_a_valid_marker():
    minors = DEFAULTS["python_env_python_versions"]
    covered = {}
    for line, hashes in entries(LOCK):
        req = Requirement(line)
        [spec] = req.specifier
        assert spec.operator == "==" and hashes and all(re.fullmatch(r"[0-9a-f]{64}", h) for h in hashes), line
        for minor in minors:  # one version of each package for each Python
            if req.marker is None or req.marker.evaluate({"python_version": minor, "sys_platform": "darwin"}):
                assert (req.name, minor) not in covered, (line, covered[(req.name, minor)])
                covered[(req.name, minor)] = line
    for name in ("mlx", "mlx-lm", "numpy", "transformers"):
        assert all((name, m) in covered for m in minors), name


@pytest.mark.parametrize(
    "requirements, fragments",
    [
        (
            ["mlx==0.33.0", "mlx-lm==0.32.2"],
            [
                "does not pin mlx==0.33.0:",
                "`scripts/lock_requirements.py --mlx 0.33.0 --mlx-lm 0.32.2 -o my.lock`",
                "set python_env_lock_file to it",
                "python_env_require_hashes: false",
            ],
        ),
        (PINS + ["mlx-cpu==0.32.4"], ["does not pin mlx-cpu==0.32.4:", "--extra mlx-cpu==0.32.4 -o my.lock"]),
        (PINS + ["rich>=13"], ["does not pin rich>=13: rich>=13 is not name==version, which a lock needs"]),
    ],
)
def test_a_lock_that_does_not_pin_the_venvs_requirements_is_named_with_the_command(requirements, fragments):
    why = lock_problem(LOCK, requirements, "/x/requirements.lock")
    assert why.startswith("the lock /x/requirements.lock does not pin"), why
    for fragment in fragments:
        assert fragment in why, why


def test_names_are_compared_as_pip_compares_them():
    assert lock_problem(LOCK, ["MLX==0.32.4", "mlx_lm==0.32.2", "PyYAML==6.0.4"], "l") == ""
    lock = 'Foo_Bar.baz==1.0 ; python_version == "3.11" \\\n    --hash=sha256:' + "a" * 64 + "\nfoo-bar-baz==2.0\n"
    assert lock_pins(lock) == {"foo-bar-baz": {"1.0", "2.0"}}
    assert lock_problem(lock, ["foo_bar_baz==2.0"], "l") == ""


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("", "cannot be read or is empty"),
        ("   \n", "cannot be read or is empty"),
        ("mlx==0.32.4\nmlx-lm==0.32.2\n", "holds no --hash=sha256: lines"),
    ],
)
def test_an_unreadable_or_hashless_lock_is_named(text, fragment):
    why = lock_problem(text, PINS, "/x/l.lock")
    assert fragment in why and "/x/l.lock" in why and "python_env_require_hashes: false" in why
