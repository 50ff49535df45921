"""What ansible-test's validate-modules checks first, without its network-bound virtualenv:
each module's documented options (its DOCUMENTATION with the doc fragments merged, as
`ansible-doc` shows them) and its argument_spec agree on names, types, defaults, required,
choices, elements and aliases. ansible-test sanity itself downloads pip from a site CI cannot
reach; the compile test runs below through ansible-test (it needs no download)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.module_utils import basic

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
# documentation stubs of action plugins: their options are checked by the action itself
ACTIONS = {p.stem for p in (ROOT / "plugins" / "action").glob("*.py")}
MODULES = sorted(p.stem for p in (ROOT / "library").glob("*.py") if p.stem not in ACTIONS)


class _Spec(Exception):
    pass


def argument_spec(module):
    """The argument_spec the module's main() gives AnsibleModule (captured, nothing runs)."""
    import importlib

    mod = importlib.import_module(f"ansible_collections.mlx.cluster.plugins.modules.{module}")
    seen = {}

    def capture(self, argument_spec, **kwargs):
        seen["spec"] = argument_spec
        raise _Spec

    real = basic.AnsibleModule.__init__
    basic.AnsibleModule.__init__ = capture
    try:
        with pytest.raises(_Spec):
            mod.main()
    finally:
        basic.AnsibleModule.__init__ = real
    return seen["spec"]


@pytest.fixture(scope="module")
def docs():
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), NO_COLOR="1")
    res = subprocess.run(
        [str(BIN / "ansible-doc"), "-t", "module", "--json"] + [f"mlx.cluster.{m}" for m in MODULES],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    return {k.split(".")[-1]: v["doc"] for k, v in json.loads(res.stdout).items()}


def _norm(opt):
    return {
        "type": opt.get("type", "str"),
        "default": opt.get("default"),
        "required": bool(opt.get("required", False)),
        "choices": sorted(map(str, opt["choices"])) if opt.get("choices") else None,
        "elements": opt.get("elements"),
        "aliases": sorted(opt.get("aliases") or []),
        "suboptions": ({k: _norm(v) for k, v in opt["suboptions"].items()} if opt.get("suboptions") else None),
    }


def _spec_norm(spec):
    return {
        k: {**_norm(v), "suboptions": ({s: _norm(o) for s, o in v["options"].items()} if v.get("options") else None)}
        for k, v in spec.items()
    }


@pytest.mark.parametrize("module", MODULES)
def test_documentation_matches_argument_spec(module, docs):
    spec = argument_spec(module)
    doc = docs[module].get("options") or {}
    assert sorted(doc) == sorted(spec), f"{module}: documented {sorted(doc)} but the spec has {sorted(spec)}"
    want = _spec_norm(spec)
    got = {k: _norm(v) for k, v in doc.items()}
    for name in spec:
        if got[name]["suboptions"] is None or want[name]["suboptions"] is None:
            got[name]["suboptions"] = want[name]["suboptions"] = None  # documented loosely: not compared
        assert got[name] == want[name], f"{module}: option {name}: documented {got[name]}, spec {want[name]}"


def test_the_harness_sees_every_module():
    assert len(MODULES) >= 12, MODULES
