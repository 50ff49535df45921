"""Unit-test helpers: module_utils importable both ways, captured outputs, module runs.

- `plugins/module_utils` goes on sys.path, so tests `import mlx_tb`.
- `ansible.module_utils.<name>` resolves to the very same module object as `<name>` for
  every file in plugins/module_utils (a lazy finder), so `library/*.py` import as they do
  under Ansible and a ParseError raised in a module is the ParseError a test catches.
- `fixture_text(name)` reads tests/fixtures/<name>.
- `run_module(...)` runs a library module's main() with get_bin_path and mlx_run.spawn (the
  one place the modules start a command) mocked, and returns its JSON result and every argv
  it ran.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.util
import json
import sys
from pathlib import Path
from unittest import mock

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODULE_UTILS = ROOT / "plugins" / "module_utils"
LIBRARY = ROOT / "library"
FIXTURES = ROOT / "tests" / "fixtures"
_PREFIX = "ansible.module_utils."

for _path in (MODULE_UTILS, ROOT / "tests" / "unit" / "modules"):  # the latter for mac_commands.py
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))


class _AliasLoader(importlib.abc.Loader):
    """Hands out the plain module (`mlx_tb`) for `ansible.module_utils.mlx_tb`."""

    def __init__(self, plain):
        self.plain = plain

    def create_module(self, spec):
        return importlib.import_module(self.plain)

    def exec_module(self, module):
        pass  # already executed by the plain import


class _ModuleUtilsFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        name = fullname[len(_PREFIX):] if fullname.startswith(_PREFIX) else ""
        if not name or "." in name or not (MODULE_UTILS / f"{name}.py").is_file():
            return None
        return importlib.util.spec_from_loader(fullname, _AliasLoader(name))


if not any(isinstance(f, _ModuleUtilsFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, _ModuleUtilsFinder())


def fixture_text(name):
    """The text of tests/fixtures/<name>."""
    return (FIXTURES / name).read_text(encoding="utf-8")


def load_library(name):
    """Import library/<name>.py as a fresh module object."""
    spec = importlib.util.spec_from_file_location(f"mlx_library_{name}", LIBRARY / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# A command that does not answer within its bound (a `commands` answer of run_module).
HANG = "hang: does not answer"


class ModuleRun:
    """Outcome of one main(): `result` (the module's JSON), `calls` (argv lists), `envs`."""

    def __init__(self):
        self.result = None
        self.calls = []
        self.envs = []
        self.inputs = []
        self.timeouts = []
        self.failed = False

    @property
    def warnings(self):
        """The module's warnings as text (ansible-core 2.19 wraps each one in an event dict)."""
        found = []
        for w in (self.result or {}).get("warnings", []):
            if isinstance(w, dict):
                w = (w.get("event") or {}).get("msg", w.get("msg"))
            found.append(w)
        return found


def run_module(capsys, name, args=None, commands=None, bins=None, env=None, module_attrs=None):
    """Run library/<name>.py's main() as Ansible would, with commands answered from `commands`.

    commands: {tuple(argv as run, with the resolved path): (rc, stdout, stderr), or HANG for a
              command that does not answer within its bound (CommandTimeout), or an
              OSError for one that cannot be started}
    bins:     {tool name: resolved path or None (not installed)}; unknown tools -> /usr/bin/<tool>
    env:      extra os.environ entries for the run (e.g. SSH_CONNECTION)
    module_attrs: names of the loaded module to set first (e.g. a file path it reads)
    An argv not in `commands` fails the test.
    """
    from ansible.module_utils import basic
    from ansible.module_utils.common import warnings as ansible_warnings
    from ansible.module_utils.testing import patch_module_args

    # Warnings are process-global (and de-duplicated) in ansible-core: start every run clean,
    # as a real module process does.
    ansible_warnings.get_warnings()  # the accessor exists in every supported version
    for store in ("_global_warnings", "_global_deprecations"):
        getattr(ansible_warnings, store, {}).clear()

    module = load_library(name)
    if hasattr(module, "SC_PREFERENCES"):
        # the machine's own network preferences file never answers for a test's Mac
        module.SC_PREFERENCES = "/nonexistent/mlx-cluster-test/preferences.plist"
    for attr, value in (module_attrs or {}).items():
        assert hasattr(module, attr), attr
        setattr(module, attr, value)
    outcome = ModuleRun()
    commands = commands or {}
    bins = bins or {}

    def get_bin_path(self, arg, required=False, opt_dirs=None):
        path = bins.get(arg, f"/usr/bin/{arg}")
        if path is None and required:
            self.fail_json(msg=f"Failed to find required executable \"{arg}\" in paths")
        return path

    import mlx_run

    def spawn(argv, timeout, env_update=None, data=None):
        outcome.calls.append(list(argv))
        outcome.inputs.append(data)
        outcome.envs.append(dict(mlx_run.C_LOCALE, **(env_update or {})))
        outcome.timeouts.append(timeout)
        key = tuple(argv)
        if key not in commands:
            raise AssertionError(f"unexpected command {argv!r}")
        answer = commands[key]
        if answer == HANG:
            raise mlx_run.CommandTimeout(argv, timeout)
        if isinstance(answer, OSError):
            raise answer
        return answer

    def run_command(self, argv, **kwargs):
        raise AssertionError(f"{argv!r} run by AnsibleModule.run_command, which has no time bound: "
                             f"modules run commands through mlx_run")

    try:  # importing controller code (ansible.errors, filters) flips this process-wide
        from ansible.module_utils import _internal as ansible_internal
        controller_flag = mock.patch.object(ansible_internal, "is_controller", False)
    except (ImportError, AttributeError):
        controller_flag = contextlib.nullcontext()
    with controller_flag, patch_module_args(args or {}), \
            mock.patch.object(basic.AnsibleModule, "get_bin_path", get_bin_path), \
            mock.patch.object(basic.AnsibleModule, "run_command", run_command), \
            mock.patch.object(mlx_run, "spawn", spawn), \
            mock.patch.dict("os.environ", env or {}):
        capsys.readouterr()
        with pytest.raises(SystemExit) as exit_info:
            module.main()
    outcome.result = json.loads(capsys.readouterr().out)
    outcome.failed = bool(outcome.result.get("failed")) or exit_info.value.code not in (0, None)
    return outcome


@pytest.fixture
def module_runner(capsys):
    """`module_runner(name, args=..., commands=..., bins=..., env=...)` -> ModuleRun."""
    return lambda name, **kw: run_module(capsys, name, **kw)


@pytest.fixture
def hang():
    """The `commands` answer of a command that does not answer within its bound."""
    return HANG


@pytest.fixture
def read_fixture():
    """`read_fixture(name)` -> the text of tests/fixtures/<name>."""
    return fixture_text
