#!/bin/bash
# What the env stage's venv costs on a simulated Mac: the base Python makes the venv, pip installs
# the pins from the simulation's local wheel directory (~/.cache/mlxsim/wheels, filled by the e2e
# tests' package mirror), with pip's default byte-compiling and with --no-compile, interleaved.
# Prints wall and CPU (user+sys) seconds per step: bench/NOTES.md, "The env stage's install".
#   bash bench/venv_install.sh [rounds]
set -euo pipefail
rounds=${1:-2}
wheels=$(ls -d ~/.cache/mlxsim/wheels/*/ | head -1)
py=${PYTHON:-python3}
pins=$(.venv/bin/python - <<'PY'
import yaml
d = yaml.safe_load(open("roles/python_env/defaults/main.yml"))
v, lm = d["python_env_mlx_version"], d["python_env_mlx_lm_version"]
print(f"mlx=={v} mlx-cpu=={v} mlx-lm=={lm}")
PY
)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
run() {  # $1 label, $2 extra pip arguments
  rm -rf "$work/v"
  /usr/bin/time -f "$1 venv: wall %e s, cpu %U+%S s" "$py" -m venv "$work/v"
  # shellcheck disable=SC2086
  /usr/bin/time -f "$1 install: wall %e s, cpu %U+%S s" "$work/v/bin/python" -m pip install -q \
    --disable-pip-version-check --no-index --find-links "$wheels" $2 $pins
}
for _ in $(seq "$rounds"); do
  run compile ""
  run no-compile "--no-compile"
done
