#!/usr/bin/env python3
"""Benchmark: our ring/mesh planner against MLX's own extract_rings.

    .venv/bin/python bench/planner.py [--runs N] [--cap SECONDS]

For each wiring it prints the hosts, the cables, our `topology()` time (median of N runs),
MLX's `extract_rings` time on the connectivity matrix MLX itself builds from the same
wiring (its `extract_connectivity` fed synthetic system_profiler output), and the ring each
one finds (its width: cables on the weakest hop). MLX runs in a child process that is killed
after --cap seconds, so a capped time is a real cap, not an estimate.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "collections")]  # tests.*, and the toolkit as its collection

from ansible_collections.mlx.cluster.plugins.plugin_utils import plan_cables, plan_topology  # noqa: E402
from tests.unit.filter.planner_synth import make_facts, mesh_cables, mlx_connectivity, ring_cables, torus_cables  # noqa: E402

CASES = [
    ("mesh 4", lambda: mesh_cables(4)),
    ("mesh 8", lambda: mesh_cables(8)),
    ("mesh 9", lambda: mesh_cables(9)),
    ("ring 16", lambda: ring_cables(16)),
    ("ring 64", lambda: ring_cables(64)),
    ("torus 4x4", lambda: torus_cables(4, 4)),
    ("torus 4x5", lambda: torus_cables(4, 5)),
    ("torus 8x8", lambda: torus_cables(8, 8)),
]


def _mlx_child(matrix, runs, budget_s, queue):
    from mlx._distributed_utils.config import extract_rings

    times, rings = [], None
    start = time.perf_counter()
    for _ in range(runs):
        t = time.perf_counter()
        rings = extract_rings(matrix)
        times.append((time.perf_counter() - t) * 1000)
        if time.perf_counter() - start > budget_s:
            break
    n = len(matrix)
    full = bool(rings) and len(rings[0][0]) == n
    queue.put((statistics.median(times), len(times), rings[0][1] if full else None))


def mlx_rings(matrix, runs, cap_s):
    """(median ms | None when capped, runs, width of MLX's ring | None)."""
    # fork is cheap on Linux; macOS frameworks do not survive a fork, so spawn there.
    ctx = multiprocessing.get_context("fork" if sys.platform.startswith("linux") else "spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_mlx_child, args=(matrix, runs, cap_s / 4, queue), daemon=True)
    proc.start()
    proc.join(cap_s)
    if proc.is_alive():
        proc.terminate()
        proc.join()
        return None, 0, None
    return queue.get(timeout=5)


def ours(links, hosts, runs):
    times, topo = [], None
    for _ in range(runs):
        t = time.perf_counter()
        topo = plan_topology.topology(links, hosts)
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times), topo


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=21, help="runs per measurement (median)")
    parser.add_argument("--cap", type=float, default=10.0, help="seconds before MLX is killed")
    args = parser.parse_args(argv)

    from mlx._distributed_utils.config import make_connectivity_matrix

    header = ("case", "hosts", "cables", "ours ms", "MLX extract_rings ms", "ours ring", "MLX ring")
    rows = []
    for name, build in CASES:
        hosts, cables = build()
        facts = make_facts(hosts, cables)
        links = plan_cables.links(facts)
        our_ms, topo = ours(links, hosts, args.runs)
        tb_hosts, rev = mlx_connectivity(facts, hosts)
        mlx_ms, _mlx_runs, mlx_width = mlx_rings(make_connectivity_matrix(tb_hosts, rev), args.runs, args.cap)
        our_ring = "yes (width %d)" % topo["ring_width"] if topo["ring"] else "no"
        if mlx_ms is None:
            mlx_time, mlx_ring = ">%g s (capped)" % args.cap, "unknown (capped)"
        else:
            mlx_time = "%.2f" % mlx_ms
            mlx_ring = "yes (width %d)" % mlx_width if mlx_width else "no"
        rows.append((name, str(len(hosts)), str(len(links["cables"])), "%.2f" % our_ms, mlx_time, our_ring, mlx_ring))
        print("  done: %s" % name, file=sys.stderr, flush=True)

    widths = [max(len(r[i]) for r in rows + [header]) for i in range(len(header))]

    def line(r):
        return "  ".join(c.rjust(w) if 0 < i < 5 else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))

    print(
        "ours: plan_topology.topology(), median of %d runs; MLX: extract_rings in a child process "
        "killed after %g s" % (args.runs, args.cap)
    )
    print(line(header))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print(line(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
