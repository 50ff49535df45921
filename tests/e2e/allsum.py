"""All-reduce across the simulated Macs: every rank adds rank+1; prints one JSON line."""

import json
import socket

import mlx.core as mx

group = mx.distributed.init(strict=True)
n, rank = group.size(), group.rank()
total = mx.distributed.all_sum(mx.ones((1024,)) * (rank + 1))
mx.eval(total)
ok = bool(mx.all(total == n * (n + 1) / 2).item())
if rank == 0:
    print(json.dumps({"world_size": n, "ok": ok, "value": float(total[0].item()), "host": socket.gethostname()}))
raise SystemExit(0 if ok else 1)
