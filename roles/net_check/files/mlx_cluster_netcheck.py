#!/usr/bin/env python3
"""mlx-cluster network check: all_sum latency and bandwidth across the cluster, verified.

Deployed to every Mac with mlx_cluster_startup.py beside it (stdlib + mlx) and started on
all of them by `mlx.launch`:

    mlx_cluster_netcheck.py [--expect-world N] [--init-timeout SECONDS] [--backend NAME]
        [--min-bytes 4096] [--max-bytes 67108864] [--iters 5] [--warmup 2] [--json-out PATH]

Sizes go from --min-bytes to --max-bytes in powers of 4 (4 KB ... 64 MB by default). For each
size every rank all_sums a float32 array filled with rank+1, --warmup times untimed, then
--iters times timed, and checks every result equals n(n+1)/2 everywhere. Rank 0 prints ONE JSON
line on stdout:

    {"world_size", "backend",
     "results": [{"bytes", "latency_us_median", "bus_bandwidth_gbps", "ok"}]}

latency_us_median: median wall time of one all_sum, in microseconds. bus_bandwidth_gbps: the
NCCL-tests bus bandwidth of an all-reduce, bytes * 2(n-1)/n / median time, in gigabits per
second (comparable with a link's rated Gb/s; 0 for a single rank). ok: every rank got the
right sum for every iteration. Other ranks print nothing on stdout; logs go to stderr as
"[rank R/N host] ...".

Exit codes: 0 all sums right; 2 bad arguments; 3 distributed init failed or gave a world size
other than --expect-world (a process killed by the init watchdog exits by SIGTERM); 4 a wrong
sum (stderr names the ranks that got it); 8 RDMA could not be brought up (not retried; the
message names the devices and the fix).
"""

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import socket  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import mlx.core as mx  # noqa: E402
from mlx_cluster_startup import EXIT_RDMA, InitError, backend_name, init_distributed  # noqa: E402  (deployed beside)

EXIT_INIT, EXIT_WRONG_SUM = 3, 4  # 2: bad arguments (argparse)
_PREFIX = [f"[rank {os.environ.get('MLX_RANK', '?')} {socket.gethostname()}]"]


def log(msg):
    print(f"{_PREFIX[0]} {msg}", file=sys.stderr, flush=True)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument(
        "--expect-world", type=int, default=1, help="number of ranks this run must have; anything else fails"
    )
    p.add_argument("--init-timeout", type=float, default=120.0, help="seconds to keep retrying distributed init")
    p.add_argument(
        "--backend",
        choices=("any", "ring", "jaccl", "mpi", "nccl"),
        default="any",
        help="mx.distributed.init backend (any: the first one the launcher set up)",
    )
    p.add_argument("--min-bytes", type=int, default=4 << 10, help="smallest message")
    p.add_argument("--max-bytes", type=int, default=64 << 20, help="largest message")
    p.add_argument("--iters", type=int, default=5, help="timed all_sums per size")
    p.add_argument("--warmup", type=int, default=2, help="untimed all_sums per size")
    p.add_argument("--json-out", help="rank 0 also writes the JSON line to this file")
    p.add_argument(
        "--run-id", default="", help="unique id of this run, so its processes can be found (and only they) for clean-up"
    )
    args = p.parse_args(argv)
    if args.expect_world < 1 or args.init_timeout <= 0 or args.iters < 1 or args.warmup < 0:
        p.error("--expect-world and --iters must be >= 1, --warmup >= 0, --init-timeout > 0")
    if not 4 <= args.min_bytes <= args.max_bytes:
        p.error("need 4 <= --min-bytes <= --max-bytes")
    return args


def sizes(lo, hi):
    out = []
    while lo <= hi:
        out.append(lo)
        lo *= 4
    return out


def measure(nbytes, group, iters, warmup):
    """(median seconds of one all_sum, whether this rank got n(n+1)/2 every time)."""
    n = group.size()
    x = mx.full((nbytes // 4,), group.rank() + 1, dtype=mx.float32)
    mx.eval(x)
    want = n * (n + 1) / 2  # exact in float32 for any real cluster size
    times, ok = [], True
    for i in range(warmup + iters):
        tic = time.perf_counter()
        y = mx.distributed.all_sum(x, group=group, stream=mx.cpu)
        mx.eval(y)
        elapsed = time.perf_counter() - tic
        ok = ok and bool(mx.all(y == want).item())
        if i >= warmup:
            times.append(elapsed)
    return statistics.median(times), ok


def run(args):
    try:
        group = init_distributed(args.backend, args.expect_world, args.init_timeout, log)
    except InitError as err:
        print(err, file=sys.stderr, flush=True)  # names rank and host itself
        return EXIT_RDMA if err.kind == "rdma" else EXIT_INIT
    rank, size = group.rank(), group.size()
    _PREFIX[0] = f"[rank {rank}/{size} {socket.gethostname()}]"

    results, wrong = [], set()
    for nbytes in sizes(args.min_bytes, args.max_bytes):
        median, ok = measure(nbytes, group, args.iters, args.warmup)
        if not ok:
            log(f"all_sum of {nbytes} bytes did not give {size * (size + 1) // 2} everywhere")
        # Which ranks got a wrong sum: each sets its own slot, the all_sum tells every rank.
        mine = (mx.arange(size) == rank).astype(mx.int32) * (0 if ok else 1)
        flags = mx.distributed.all_sum(mine, group=group, stream=mx.cpu).tolist()
        bad = [r for r, f in enumerate(flags) if f]
        wrong.update(bad)
        results.append(
            {
                "bytes": nbytes,
                "latency_us_median": round(median * 1e6, 1),
                # four significant digits: a small message over a slow or busy link is well below
                # 0.001 Gb/s, which three decimals would round to 0
                "bus_bandwidth_gbps": float(f"{nbytes * 8 * 2 * (size - 1) / size / median / 1e9:.4g}"),
                "ok": not bad,
            }
        )
        log(f"{nbytes} bytes: {median * 1e6:.1f} us, ok={not bad}")
    mx.eval(mx.distributed.all_sum(mx.array(1), group=group, stream=mx.cpu))  # final barrier

    if rank == 0:
        line = json.dumps({"world_size": size, "backend": backend_name(args.backend, size), "results": results})
        print(line, flush=True)
        if args.json_out:
            Path(args.json_out).write_text(line + "\n")
    if wrong:
        log(f"wrong all_sum result on rank(s) {sorted(wrong)}")
        return EXIT_WRONG_SUM
    return 0


def main(argv=None):
    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
