"""The project's own quality gates: ansible-lint (production profile) and module docs."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
MODULES = sorted(p.stem for p in (ROOT / "library").glob("*.py"))


def _env():
    return dict(
        os.environ,
        PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        NO_COLOR="1",
    )


@pytest.mark.skipif(
    not (BIN / "ansible-lint").exists() and not shutil.which("ansible-lint"),
    reason="ansible-lint is not installed (pip install '.[dev]')",
)
@pytest.mark.long
def test_ansible_lint_production_profile_is_clean():
    res = subprocess.run(
        [str(BIN / "ansible-lint") if (BIN / "ansible-lint").exists() else "ansible-lint", "--profile", "production"],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]


@pytest.mark.parametrize("argv", [["check", "."], ["format", "--check", "."]], ids=["check", "format"])
def test_ruff_is_clean_on_all_python(argv):
    """All Python of the repository (the rules: pyproject.toml's [tool.ruff])."""
    ruff = BIN / "ruff" if (BIN / "ruff").exists() else shutil.which("ruff")
    assert ruff, "ruff is not installed: bash scripts/controller.sh --dev (pyproject's dev extras)"
    res = subprocess.run([str(ruff), *argv], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]


@pytest.fixture(scope="module")
def rendered():
    """ansible-doc's text for every module, by module: one ansible-doc for all of them."""
    res = subprocess.run(
        [str(BIN / "ansible-doc")] + [f"mlx.cluster.{m}" for m in MODULES],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    pages = res.stdout.split("> MODULE mlx.cluster.")[1:]
    return {page.split(None, 1)[0]: page for page in pages}


@pytest.mark.parametrize("module", MODULES)
def test_every_module_documents_itself(module, rendered):
    assert module in rendered, f"ansible-doc shows no page for {module}"
    for section in ("OPTIONS", "EXAMPLES", "RETURN VALUES"):
        if section == "OPTIONS" and "options: {}" in (ROOT / "library" / f"{module}.py").read_text():
            continue  # a module without options shows no OPTIONS section
        assert section in rendered[module], f"{module}: ansible-doc shows no {section}"


def _filters():
    """Every filter the collection exports: the names each filter file's FilterModule returns."""
    import ast

    names = []
    for path in sorted((ROOT / "plugins" / "filter").glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name == "filters":
                ret = [n for n in ast.walk(node) if isinstance(n, ast.Return)][0]
                names += [k.value for k in ret.value.keys]
    return sorted(names)


FILTERS = _filters()


def test_every_filter_has_its_own_documentation():
    """`ansible-doc -t filter` shows each filter's own text, from its own file (one
    DOCUMENTATION shared by several filters showed one filter's text for all of them)."""
    assert len(FILTERS) >= 15, FILTERS
    import json

    res = subprocess.run(
        [str(BIN / "ansible-doc"), "-t", "filter", "--json"] + [f"mlx.cluster.{f}" for f in FILTERS],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    docs = json.loads(res.stdout)
    for f in FILTERS:
        doc = docs[f"mlx.cluster.{f}"]["doc"]
        assert doc["name"] == f, (f, doc["name"])
        assert Path(doc["filename"]).name == f"{f}.yml", (f, doc["filename"])
        assert doc.get("short_description") and doc.get("options", {}).get("_input"), f
        assert docs[f"mlx.cluster.{f}"].get("examples") and docs[f"mlx.cluster.{f}"].get("return"), f
    shorts = [docs[f"mlx.cluster.{f}"]["doc"]["short_description"] for f in FILTERS]
    assert len(set(shorts)) == len(shorts)


def test_command_timeout_is_documented_once_and_specified_once():
    """Every module that bounds its commands takes the option from one doc fragment and one
    argument_spec entry (module_utils/mlx_run.py), with the same default."""
    import re

    import yaml

    from ansible_collections.mlx.cluster.plugins.doc_fragments.command_timeout import ModuleDocFragment
    from ansible_collections.mlx.cluster.plugins.module_utils import mlx_run

    frag = yaml.safe_load(ModuleDocFragment.DOCUMENTATION)["options"]["command_timeout"]
    assert frag["default"] == mlx_run.DEFAULT_TIMEOUT == mlx_run.COMMAND_TIMEOUT_SPEC["command_timeout"]["default"]
    users = [m for m in MODULES if "command_timeout" in (ROOT / "library" / f"{m}.py").read_text()]
    assert len(users) >= 9, users
    for m in users:
        text = (ROOT / "library" / f"{m}.py").read_text()
        doc = yaml.safe_load(re.search(r'DOCUMENTATION = r"""(.*?)"""', text, re.S).group(1))
        assert "mlx.cluster.command_timeout" in doc.get("extends_documentation_fragment", []), m
        assert "command_timeout" not in (doc.get("options") or {}), f"{m} documents command_timeout again"
        # the spec is in the module, or in the module_utils it shares with its action plugin
        shared = re.search(r"module_utils\.(\w+) import ARGUMENT_SPEC", text)
        spec = (ROOT / "plugins" / "module_utils" / f"{shared.group(1)}.py").read_text() if shared else text
        assert "**COMMAND_TIMEOUT_SPEC" in spec and "command_timeout=dict(" not in spec, m


def test_the_design_picture_names_every_plugin_file():
    """docs/design.md's picture of the rooms is drawn from the code: every module_utils,
    plugin_utils, action, filter, callback and inventory file is named in it (a file added
    without a place in the picture fails here)."""
    text = (ROOT / "docs" / "design.md").read_text()
    start = text.index(" controller (runs where ansible-playbook runs)")
    picture = text[start : text.index("```", start)]
    missing = [
        f"{folder}/{p.name}"
        for folder in ("module_utils", "plugin_utils", "action", "filter", "callback", "inventory")
        for p in sorted((ROOT / "plugins" / folder).glob("*.py"))
        if p.stem != "__init__" and not re.search(rf"\b{re.escape(p.stem)}\b", picture)
    ]
    assert missing == [], missing
