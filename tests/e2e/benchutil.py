"""Shared by the benchmark and model sync end-to-end tests (test_models_bench.py,
test_faults_runtime.py, test_model_sync_*.py): Macs with no model or the model on rank 0 only,
the role settings for the tiny model on a simulated cluster, the `mlx_launch` module run on
its own from the controller (blocking or in the background), and the test-side process checks."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

from tests.e2e.runner import ROOT

PROMPT = "Tell me about Thunderbolt cables."
TOKENS = 16
BENCH = ROOT / "roles" / "benchmark" / "files" / "mlx_cluster_bench.py"
REMOTE_SCRIPT = "/srv/admin/mlx-cluster/bench/mlx_cluster_bench.py"  # where the role deploys it
# launch_command's --init-timeout: a rank whose peer never comes ends by itself (its init
# watchdog) this many seconds after it started, whether or not the launcher reached it
INIT_TIMEOUT = 20
REMOTE_MODEL = "/srv/admin/mlx-cluster/models/tiny"  # where model sync puts `tiny`
RUN_ID = "e2etestrunid0123456789"


def fresh_models(cluster, seed=None):
    """Reset the simulated Macs and take every Mac's models away; with `seed` (a model
    directory), put it on rank 0 only, where model_sync_source rank0/tree looks for it, and
    return that path."""
    cluster.reset()
    for h in cluster.hosts:
        shutil.rmtree(cluster.home(h) / "mlx-cluster" / "models", ignore_errors=True)
    if seed is None:
        return None
    seeded = cluster.home(cluster.hosts[0]) / "mlx-cluster" / "models" / Path(seed).name
    shutil.copytree(seed, seeded)
    return seeded


def controller_model(cluster, seed):
    """No model on any Mac, and a fresh copy of `seed` on the controller (in the cluster's state
    directory), where model_sync_source controller or tree from the controller reads it; -> its path."""
    fresh_models(cluster)
    model = cluster.state_dir / "controller-models" / Path(seed).name
    shutil.rmtree(model, ignore_errors=True)
    shutil.copytree(seed, model)
    return model


def model_files(path):
    """{relative path: bytes} of a model directory, without the copy's own files (its record of
    verified files, a part file): what every Mac must have the same as the source."""
    from ansible_collections.mlx.cluster.plugins.module_utils.mlx_copy import rel_problem

    return {
        p.relative_to(path).as_posix(): p.read_bytes()
        for p in sorted(Path(path).rglob("*"))
        if p.is_file() and not rel_problem(p.relative_to(path).as_posix())
    }


def settings(cluster, tiny, **extra):
    return {
        "mlx_cluster_backend": "ring",
        "model_sync_name": "tiny",
        "model_sync_source_path": str(tiny),
        "benchmark_modes": ["tensor", "pipeline"],
        "benchmark_generation_tokens": TOKENS,
        "benchmark_trials": 1,
        "benchmark_prompt": PROMPT,
        "benchmark_init_timeout": 30,
        "benchmark_timeout": 240,
        **extra,
    }


def bench_procs(cluster, host):
    out = cluster.exec(host, ["ps", "-ax", "-ww", "-o", "pid=,args="]).stdout
    return [ln for ln in out.splitlines() if "mlx_cluster_bench.py" in ln]  # test-side check only


def leftovers(cluster, grace=10):
    """{host: bench processes}, polled until none is left or `grace` seconds: the launcher
    ends rank 0 by closing its SSH session, and the SIGHUP that follows is asynchronous.
    What the first look found is printed (for the test's log)."""
    deadline = time.monotonic() + grace
    first = True
    while True:
        left = {h: bench_procs(cluster, h) for h in cluster.hosts}
        if first:
            print("bench processes when the wait began:", left)
            first = False
        if not any(left.values()) or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def launch_command(cluster, tiny_remote=REMOTE_MODEL, timeout=60, max_tokens=4, run_id=RUN_ID):
    """(argv, env) of the benchmark's launch step alone (the module the role uses), run from
    the controller with `ansible localhost -m mlx_launch`, reaching the Macs as the plan says."""
    art = cluster.inventory_path.parent / "artifacts"
    plan = json.loads((art / "plan.json").read_text())
    args = {
        "hostfile": str(art / "hostfile.json"),
        "python": sys.executable,
        "script": REMOTE_SCRIPT,
        "args": [
            "--model",
            tiny_remote,
            "--prompt",
            PROMPT,
            "--max-tokens",
            str(max_tokens),
            "--warmup",
            "0",
            "--num-trials",
            "1",
            "--expect-world",
            "2",
            "--init-timeout",
            str(INIT_TIMEOUT),
            "--run-id",
            run_id,
        ],
        "timeout": timeout,
        "ssh_targets": plan["ssh"],
    }
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        NO_COLOR="1",
        PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
    )
    return [
        str(Path(sys.executable).parent / "ansible"),
        "localhost",
        "-m",
        "mlx.cluster.mlx_launch",
        "-a",
        json.dumps(args),
    ], env


def launch_bench(cluster, tiny_remote=REMOTE_MODEL, timeout=60, **kw):
    argv, env = launch_command(cluster, tiny_remote, timeout=timeout, **kw)
    return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT, timeout=timeout + 60)


def module_result(stdout):
    """The module's result from `ansible localhost -m ...` output ("localhost | FAILED! => "
    then the result in the configured YAML format); {} if it cannot be read."""
    m = re.search(r"^localhost \| [A-Z]+!? =>", stdout or "", re.M)
    if not m:
        return {}
    try:
        res = yaml.safe_load(stdout[m.end() :])
    except yaml.YAMLError:
        return {}
    return res if isinstance(res, dict) else {}
