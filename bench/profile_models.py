"""Where the models stage's time goes, task by task, on a simulated cluster (a diagnostic for
issue #27's "the stage's own time"): the network stage once, then `site.yml --tags models` with
the defaults (the tree from the controller, the cables without ssh) twice, every Mac's models
removed before each. Per task: seconds from its start to the next task's start, and how many
hosts ran it (not skipped).

    python bench/profile_models.py [spec] [size_mb]      # default ring8, 20 MB
"""

from __future__ import annotations

import shutil
import sys
import time
from collections import OrderedDict
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.model_sync import MODEL, make_model  # noqa: E402
from tests.e2e.runner import run_site  # noqa: E402
from tests.simcluster import SimCluster  # noqa: E402


def task_times(run):
    """[(task, seconds to the next task's start, hosts that ran it)] in playbook order."""
    tasks = OrderedDict()
    for e in run.events:
        d = e.get("event_data") or {}
        if e.get("event") == "playbook_on_task_start":
            tasks.setdefault(d.get("task"), {"start": datetime.fromisoformat(e["created"]), "end": None, "ran": 0})
        elif e.get("event") in ("runner_on_ok", "runner_on_failed", "runner_on_skipped") and d.get("task") in tasks:
            t = tasks[d["task"]]
            if d.get("end"):
                end = datetime.fromisoformat(d["end"])
                t["end"] = max(t["end"] or end, end)
            t["ran"] += e["event"] != "runner_on_skipped"
    items = list(tasks.items())
    out = []
    for i, (name, t) in enumerate(items):
        until = items[i + 1][1]["start"] if i + 1 < len(items) else (t["end"] or t["start"])
        out.append((name, (until - t["start"]).total_seconds(), t["ran"]))
    return out


def main():
    spec = sys.argv[1] if len(sys.argv) > 1 else "ring8"
    size_mb = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    root = Path("/tmp/mlxsim-prof")
    model = root / "model" / MODEL
    if not model.exists():
        make_model(model, size_mb)
    cluster = SimCluster(spec, state_dir=root / spec)
    cluster.up()
    try:
        setup = run_site(cluster, tags=["network", "hostfile"], extravars={"mlx_cluster_backend": "ring"})
        if setup.rc != 0:
            raise SystemExit(f"the network stage failed: {setup.failures()}")
        for attempt in (1, 2):
            for h in cluster.hosts:
                shutil.rmtree(Path(cluster.home(h)) / "mlx-cluster" / "models", ignore_errors=True)
            t0 = time.perf_counter()
            run = run_site(
                cluster,
                tags=["models"],
                extravars={
                    "model_sync_name": MODEL,
                    "model_sync_source_path": str(model),
                    "mlx_cluster_backend": "ring",
                },
            )
            total = time.perf_counter() - t0
            if run.rc != 0:
                raise SystemExit(f"the models stage failed: {run.failures()}")
            print(f"--- {spec}, run {attempt}: {total:.1f} s")
            for name, seconds, ran in task_times(run):
                print(f"{seconds:6.2f} s  {ran:2d} ran  {name}")
    finally:
        cluster.down()


if __name__ == "__main__":
    main()
