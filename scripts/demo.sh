#!/usr/bin/env bash
# The main job on the embedded default: a simulated 4-Mac Thunderbolt mesh.
# Sets everything up (apt packages, .venv), brings the simulated cluster up, runs
# site.yml against it, then prints the plan, the hostfile and where the picture is.
# Needs root (network namespaces). Usage: scripts/demo.sh [spec] (default mesh4).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
spec="${1:-mesh4}"
state="${MLXSIM_STATE:-/tmp/mlxsim/$spec}"

bash scripts/bootstrap.sh
export PATH="$here/.venv/bin:$PATH" ANSIBLE_CONFIG="$here/ansible.cfg"

python -m tests.simcluster up "$spec" --state "$state"
# The simulated Macs have no package index: they use this venv's Python, pinned to what it has.
python - "$state/sim_vars.json" <<'PY'
import json, sys
from importlib import metadata
json.dump({"python_env_mode": "existing", "python_env_interpreter": sys.executable,
           "python_env_mlx_version": metadata.version("mlx"),
           "python_env_mlx_lm_version": metadata.version("mlx-lm")}, open(sys.argv[1], "w"))
PY
ansible-playbook site.yml -i "$state/inventory.yml" -e "@$state/sim_vars.json"

python - "$state/artifacts" <<'PY'
import json, os, sys
art = sys.argv[1]
plan = json.load(open(os.path.join(art, "plan.json")))
topo = plan["topology"]
print("\n== plan ==")
print(f"hosts: {', '.join(plan['hosts'])}")
print(f"full mesh: {topo['mesh']}   ring: {' -> '.join(topo['ring'] or []) or 'none'}   backend: {topo['backend']}")
for cid, c in sorted(plan["ip_plan"]["cables"].items()):
    print(f"  {c['a']['host']}:{c['a']['iface']} {c['a']['address']:<15} <-> "
          f"{c['b']['host']}:{c['b']['iface']} {c['b']['address']:<15} ({c['network']})")
print("\n== hostfile ==")
print(open(os.path.join(art, "hostfile.json")).read())
pic = os.path.join(art, "topology.svg")
print("picture:", pic if os.path.exists(pic) else os.path.join(art, "topology.dot"))
PY
echo
echo "The simulated cluster stays up: python -m tests.simcluster status|down $spec --state $state"
