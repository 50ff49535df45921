"""Suite-wide pytest set-up.

- the toolkit is imported as the collection it is, `ansible_collections.mlx.cluster.*`, through
  Ansible's own collection loader over collections/ (where ansible_collections/mlx/cluster is
  this tree): the same names, and the same loader, as when Ansible runs it (ansible-test's
  unit tests do the same).
- the simulated Mac cluster fixtures come from tests/simcluster/pytest_plugin.py.
- docs/reliability.md is written once, when the session ends, from every worker's fault rows.
"""

import json
import os
import shutil
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("ANSIBLE_CONFIG", os.path.join(ROOT, "ansible.cfg"))


def _install_collection_loader():
    from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder

    if not any(type(f).__name__ == "_AnsibleCollectionFinder" for f in sys.meta_path):
        _AnsibleCollectionFinder(paths=[os.path.join(ROOT, "collections")])._install()


_install_collection_loader()


def _load_the_quick_tiers_hypothesis_profile():
    """The quick tier draws fewer random cases (tests/budget.py): here for the property tests that
    keep hypothesis's default count (100), with tests/budget.examples for those that set their own."""
    from tests.budget import QUICK, examples

    if QUICK:
        from hypothesis import settings

        settings.register_profile("quick", max_examples=examples(100))
        settings.load_profile("quick")


_load_the_quick_tiers_hypothesis_profile()

if os.path.exists(os.path.join(ROOT, "tests", "simcluster", "pytest_plugin.py")):
    pytest_plugins = ["tests.simcluster.pytest_plugin"]


def pytest_collection_modifyitems(config, items):
    """The simulated-cluster tests first (each takes seconds to a minute), then the unit tests
    marked `long` (ansible-lint, most of a minute), the other unit tests last (milliseconds each):
    with pytest-xdist's work stealing (scripts/test.sh) the short tests fill the workers' idle
    ends instead of one worker finishing a minute-long test alone (the quick tier ended 30 s after
    its other workers when ansible-lint started halfway). Stable: the order within each group is
    the collection order."""
    items.sort(key=lambda item: (item.get_closest_marker("sim") is None, item.get_closest_marker("long") is None))


# docs/reliability.md, written once per session by one process: each pytest-xdist worker hands
# the fault rows it recorded (tests/e2e/reliability.py) to the controlling process, which writes
# the table when the session ends (a run without workers writes its own).
_WORKER_ROWS = []


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    rows = getattr(node, "workeroutput", {}).get("reliability_rows")
    if rows:
        _WORKER_ROWS.extend(json.loads(rows))


def pytest_sessionfinish(session, exitstatus):
    reliability = sys.modules.get("tests.e2e.reliability")
    if hasattr(session.config, "workeroutput"):  # a worker: its rows go to the controller
        session.config.workeroutput["reliability_rows"] = json.dumps(reliability.ROWS if reliability else [])
        return
    # the venvs the workers' runs shared, owned by this process
    from tests.e2e.runner import venv_cache

    shutil.rmtree(venv_cache(os.getpid()), ignore_errors=True)
    if reliability is None and not _WORKER_ROWS:
        return
    from tests.e2e import reliability as rel

    rel.ROWS.extend(_WORKER_ROWS)
    rel.write()
