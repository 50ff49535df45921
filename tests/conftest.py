"""Suite-wide pytest set-up.

- the toolkit is imported as the collection it is, `ansible_collections.mlx.cluster.*`, through
  Ansible's own collection loader over collections/ (where ansible_collections/mlx/cluster is
  this tree): the same names, and the same loader, as when Ansible runs it (ansible-test's
  unit tests do the same).
- the simulated Mac cluster fixtures come from tests/simcluster/pytest_plugin.py.
"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("ANSIBLE_CONFIG", os.path.join(ROOT, "ansible.cfg"))


def _install_collection_loader():
    from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder

    if not any(type(f).__name__ == "_AnsibleCollectionFinder" for f in sys.meta_path):
        _AnsibleCollectionFinder(paths=[os.path.join(ROOT, "collections")])._install()


_install_collection_loader()

if os.path.exists(os.path.join(ROOT, "tests", "simcluster", "pytest_plugin.py")):
    pytest_plugins = ["tests.simcluster.pytest_plugin"]


# Seconds each of the longest test files took in a full run (scripts/test.sh on a 2-core
# machine, 2026-11-26): an order hint only. Files not listed count as 0 s.
LONGEST = {
    "tests/e2e/test_faults.py": 480, "tests/e2e/test_server.py": 400, "tests/e2e/test_site.py": 290,
    "tests/e2e/test_models_bench.py": 230, "tests/e2e/test_model_sync_tree.py": 130,
    "tests/e2e/test_launch_recovery.py": 100, "tests/e2e/test_model_sync_openrsync.py": 90,
    "tests/sim/test_harness.py": 75, "tests/e2e/test_faults_hang.py": 70, "tests/e2e/test_faults_runtime.py": 70,
    "tests/e2e/test_parity.py": 70, "tests/e2e/test_net_check.py": 70, "tests/e2e/test_demo.py": 65,
    "tests/e2e/test_bench_overhead.py": 65, "tests/e2e/test_model_sync_pipelined.py": 60,
    "tests/e2e/test_port_check.py": 55, "tests/unit/test_project_lint.py": 50, "tests/e2e/test_progress.py": 50,
}


def pytest_collection_modifyitems(config, items):
    """The longest files first (LONGEST), then the other simulated-cluster tests (seconds to a
    minute each), the unit tests last (milliseconds each): with pytest-xdist's work stealing
    (scripts/test.sh) the short tests fill the workers' idle ends, instead of one worker
    finishing a chain of minute-long tests alone (a file's tests share its cluster fixtures,
    so they run one after the other). Stable: the order within a file is the collection order."""
    items.sort(key=lambda item: (-LONGEST.get(item.nodeid.split("::", 1)[0], 0),
                                 item.get_closest_marker("sim") is None))
