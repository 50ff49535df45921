"""Unit-test helpers: captured outputs, module runs.

- The toolkit is imported as the collection it is: `ansible_collections.mlx.cluster.plugins.
  module_utils.<name>` (what runs on the Macs), `...plugin_utils.<name>` (the controller's
  rules), `...plugins.modules.<name>` (library/, as Ansible sees it), by name, never by path.
- `fixture_text(name)` reads tests/fixtures/<name>.
- `run_module(...)` runs a library module's main() with get_bin_path and mlx_run.spawn (the
  one place the modules start a command) mocked, and returns its JSON result and every argv
  it ran.
"""

from __future__ import annotations

import contextlib
import importlib
import json
from pathlib import Path
from unittest import mock

import pytest

from ansible_collections.mlx.cluster.plugins.module_utils import mlx_run

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
MODULES = "ansible_collections.mlx.cluster.plugins.modules"


def fixture_text(name):
    """The text of tests/fixtures/<name>."""
    return (FIXTURES / name).read_text(encoding="utf-8")


def load_library(name):
    """The module library/<name>.py, imported as Ansible names it (mlx.cluster.<name>)."""
    return importlib.import_module(f"{MODULES}.{name}")


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
              OSError for one that cannot be started}; or a function argv -> such an answer
              (a stand-in for a command whose argv holds a path made at run time)
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
    attrs = dict(module_attrs or {})
    if hasattr(module, "SC_PREFERENCES"):
        # the machine's own network preferences file never answers for a test's Mac
        attrs.setdefault("SC_PREFERENCES", "/nonexistent/mlx-cluster-test/preferences.plist")
    for attr in attrs:
        assert hasattr(module, attr), attr
    outcome = ModuleRun()
    commands = commands or {}
    bins = bins or {}

    def get_bin_path(self, arg, required=False, opt_dirs=None):
        path = bins.get(arg, f"/usr/bin/{arg}")
        if path is None and required:
            self.fail_json(msg=f'Failed to find required executable "{arg}" in paths')
        return path

    def spawn(argv, timeout, env_update=None, data=None, on_output=None):
        outcome.calls.append(list(argv))
        outcome.inputs.append(data)
        outcome.envs.append(dict(mlx_run.C_LOCALE, **(env_update or {})))
        outcome.timeouts.append(timeout)
        key = tuple(argv)
        if callable(commands):
            answer = commands(list(argv))
        elif key not in commands:
            raise AssertionError(f"unexpected command {argv!r}")
        else:
            answer = commands[key]
        if answer == HANG:
            raise mlx_run.CommandTimeout(argv, timeout)
        if isinstance(answer, OSError):
            raise answer
        if on_output is not None and answer[1]:
            on_output(answer[1])  # the whole standard output as one piece, as it "arrives"
        return answer

    def run_command(self, argv, **kwargs):
        raise AssertionError(
            f"{argv!r} run by AnsibleModule.run_command, which has no time bound: modules run commands through mlx_run"
        )

    try:  # importing controller code (ansible.errors, filters) flips this process-wide
        from ansible.module_utils import _internal as ansible_internal

        controller_flag = mock.patch.object(ansible_internal, "is_controller", False)
    except (ImportError, AttributeError):
        controller_flag = contextlib.nullcontext()
    with (
        controller_flag,
        patch_module_args(args or {}),
        mock.patch.object(basic.AnsibleModule, "get_bin_path", get_bin_path),
        mock.patch.object(basic.AnsibleModule, "run_command", run_command),
        mock.patch.object(mlx_run, "spawn", spawn),
        # a suite run under sudo is not a Mac's module run through sudo (mlx_host.become_problem)
        mock.patch.dict("os.environ", {"SUDO_USER": "", **(env or {})}),
        contextlib.ExitStack() as patched,
    ):
        for attr, value in attrs.items():  # undone after the run: the module object is shared
            patched.enter_context(mock.patch.object(module, attr, value))
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


def random_files(root, sizes, mtime=1764130000):
    """Files of random bytes under `root` ({relpath: size}); -> the manifest a copy's receiver
    gets ({relpath: {"size", "sha256", "mtime"}}, as model_manifest sha256_all lists them)."""
    import hashlib
    import os

    files = {}
    for rel, size in sizes.items():
        path = Path(root) / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        data = os.urandom(size)
        path.write_bytes(data)
        files[rel] = {"size": size, "sha256": hashlib.sha256(data).hexdigest(), "mtime": mtime}
    return files
