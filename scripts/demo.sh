#!/usr/bin/env bash
# The main job on the embedded default: a simulated 4-Mac Thunderbolt mesh, end to end.
# Sets everything up (apt packages, .venv), brings the simulated cluster up, makes a small model
# here (nothing is downloaded), then one site.yml run does it all: validate, discover, plan,
# preflight, Thunderbolt network, hostfile, Python environment, model sync, the benchmark
# (tensor and pipeline, on a model cut to the wiring's number of Macs; the pipeline alone over
# more than 8) and the collective check
# (net_check). It prints the plan, the benchmark table and where the results and the cluster
# report (report.html) are.
# Needs root (network namespaces). Usage: scripts/demo.sh [spec [ansible-playbook options]]
# (default mesh4), e.g. `scripts/demo.sh mesh4 --check --diff`: the dry run of the same job,
# which changes nothing (on a cluster not configured yet, no plan or results to print).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
spec="${1:-mesh4}"
shift || true  # the rest: options for ansible-playbook
state="${MLXSIM_STATE:-/tmp/mlxsim/$spec}"
start=$SECONDS

bash scripts/bootstrap.sh
export PATH="$here/.venv/bin:$PATH" ANSIBLE_CONFIG="$here/ansible.cfg"
# Every simulated cluster has the same management addresses (10.99.0.x): Ansible's SSH masters
# (kept 120 s, keyed by address, port and user) must not carry one cluster's run into another.
# (a short path: a Unix socket's path is limited to about 100 bytes)
ANSIBLE_SSH_CONTROL_PATH_DIR="$(mktemp -d /tmp/mlxc-cp.XXXXXX)"
export ANSIBLE_SSH_CONTROL_PATH_DIR
trap 'rm -rf "$ANSIBLE_SSH_CONTROL_PATH_DIR"' EXIT

python -m tests.simcluster up "$spec" --state "$state"
# The model: a small qwen2 checkpoint made here (shards and an index, like a converted one), cut
# to the wiring's number of Macs (tests/tinymodel.py demo_plan): a layer for each Mac of the
# pipeline (mlx-lm gives each rank whole layers) and heads, key/value heads and MLP width that
# split evenly over that many tensor ranks. No more layers than Macs: in tensor mode every layer
# sums across the Macs twice per token, and the simulated Macs share this machine's cores with
# MLX's ring backend, whose socket threads poll while they wait (tensor mode generated 7.3
# tokens/s over 3 Macs here, 0.5 over 8, on 2 cores; on Macs each rank has its own cores). A mode
# the wiring cannot run is left out, with the reason printed.
# What the simulated Macs need besides the inventory (tests/e2e/runner.py lab_vars, shared):
# the env stage takes its default path, a venv on every Mac from the Python found there, and
# like a lab's Macs they reach no package index but the lab's mirror (the simulation serves the
# pinned wheels on the LAN); they run Linux, whose mlx wheel needs its CPU back end (mlx-cpu)
# beside it and has no RDMA: MLX's JACCL cannot run there, so the demo picks the ring backend
# over the same Thunderbolt cables (on Macs, leave mlx_cluster_backend at auto).
model="$state/models/tiny"
python - "$spec" "$model" "$state/sim_vars.json" "$state" <<'PY'
import json, sys
from pathlib import Path
sys.path.insert(0, ".")
from tests.e2e.runner import lab_vars
from tests.simcluster import SimCluster
from tests.simcluster.spec import load_spec
from tests.tinymodel import demo_plan, make_tiny_model
spec, model, out = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
REMOTE_DIR = "/opt/mlx-cluster"
hosts = load_spec(spec).hosts
macs = len(hosts)
plan = demo_plan(macs)
d = plan["dims"]
want = {"num_hidden_layers": d["layers"], "num_attention_heads": d["heads"], "num_key_value_heads": d["kv_heads"],
        "hidden_size": d["hidden_size"], "intermediate_size": d["intermediate_size"]}
try:
    have = json.loads((model / "config.json").read_text())
except (OSError, ValueError):
    have = {}
if not (model / "model.safetensors.index.json").is_file() or any(have.get(k) != v for k, v in want.items()):
    make_tiny_model(model, dtype="float32", **d)
print(f"demo model for {macs} Macs: {d['layers']} layers, {d['heads']} attention heads, {d['kv_heads']} key/value "
      f"heads, hidden size {d['hidden_size']}, MLP width {d['intermediate_size']}; modes: {', '.join(plan['modes'])}")
for mode, why in plan["left_out"].items():
    print(f"demo: {mode} mode left out on {spec}: {why}")
settings = dict(lab_vars(SimCluster(spec, state_dir=sys.argv[4])), mlx_cluster_backend="ring",
                model_sync_name="tiny", model_sync_source_path=str(model),
                benchmark_modes=plan["modes"], benchmark_prompt_tokens=128,
                benchmark_generation_tokens=16, benchmark_trials=3,
                net_check_max_bytes=1 << 20, net_check_cable_bytes=4 << 20, net_check_iters=3,
                # a simulated cable is a veth: its speed is whatever CPU the machine has free at
                # that moment (here up to 8x apart between cables), not a link class (on Macs the
                # default 0.5 singles out a TB4 cable or a dock leg among TB5 cables); a cable
                # that looks slow is measured again before it is called slow, on Macs as here
                net_check_slow_ratio=0.2)
if len({h.home for h in hosts}) > 1:
    # Macs whose users' home directories differ (pair_homes): ~/mlx-cluster is another path on
    # each, and the plan stops, saying to make one directory that is each user's own, e.g.
    # /opt/mlx-cluster, once with sudo. Done here as its message says, then used.
    cluster = SimCluster(spec, state_dir=sys.argv[4])
    for h in cluster.hosts:
        cluster.exec(h, ["mkdir", "-p", REMOTE_DIR], sudo=True, check=True)
        cluster.exec(h, ["chown", cluster.user, REMOTE_DIR], sudo=True, check=True)
    settings["mlx_cluster_remote_dir"] = REMOTE_DIR
    print(f"demo: the Macs' home directories differ: {REMOTE_DIR} made on each (sudo mkdir, chown), "
          "as the plan asks on such Macs, and mlx_cluster_remote_dir set to it")
json.dump(settings, open(out, "w"), indent=2)
PY
# all: every stage; net_check: the collective check, which is opt-in (tagged never)
ansible-playbook site.yml -i "$state/inventory.yml" -e "@$state/sim_vars.json" --tags all,net_check "$@"

# a dry run writes no artifacts: what is in the state directory is an earlier run's, not this one's
dry=0
for arg in "$@"; do case "$arg" in --check | -C*) dry=1 ;; esac; done
python - "$state/artifacts" "$dry" <<'PY'
import json, os, sys
art, dry = sys.argv[1], sys.argv[2] == "1"
if dry or not os.path.exists(os.path.join(art, "plan.json")):
    print("\n== plan ==\nnone written (a dry run changes nothing: the plan is in its output above)")
    if dry and os.path.exists(os.path.join(art, "plan.json")):
        print(f"(the results of an earlier run, not this one, are in {art})")
    sys.exit(0)
plan = json.load(open(os.path.join(art, "plan.json")))
topo = plan["topology"]
print("\n== plan ==")
print(f"hosts: {', '.join(plan['hosts'])}")
print(f"full mesh: {topo['mesh']}   ring: {' -> '.join(topo['ring'] or []) or 'none'}   backend: {topo['backend']}")
for cid, c in sorted(plan["ip_plan"]["cables"].items()):
    print(f"  {c['a']['host']}:{c['a']['iface']} {c['a']['address']:<15} <-> "
          f"{c['b']['host']}:{c['b']['iface']} {c['b']['address']:<15} ({c['network']})")
print("\n== benchmark ==")
table = os.path.join(art, "bench", "results.md")
print(open(table).read() if os.path.exists(table) else "no benchmark results")
nc = os.path.join(art, "net_check", "results.json")
if os.path.exists(nc):
    res = json.load(open(nc))
    print("== collective check ==")
    print(f"all_sum sweep over {res['sweep']['world_size']} ranks: "
          f"{'every sum right' if all(r['ok'] for r in res['sweep']['results']) else 'WRONG SUMS'}")
    for c in res.get("cables", []):
        print(f"  {c.get('name')}: {c.get('gbps')} Gb/s")
print("\nresults:", art)
for name in ("topology.svg", "topology.dot"):
    if os.path.exists(os.path.join(art, name)):
        print("picture:", os.path.join(art, name))
        break
if os.path.exists(os.path.join(art, "report.html")):
    print("report: ", os.path.join(art, "report.html"), "(open it in a browser: one self-contained page)")
PY
echo
echo "demo: $((SECONDS - start)) s. The simulated cluster stays up: python -m tests.simcluster status|down $spec --state $state"
