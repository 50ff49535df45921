#!/usr/bin/env bash
# Installs everything mlx-cluster needs on a fresh Debian/Ubuntu machine (run as root):
# the apt packages the simulated cluster uses and a virtualenv (.venv) with the Python deps.
# Idempotent: a second run installs nothing when nothing changed.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"

apt_pkgs=(openssh-server openssh-client rsync graphviz iproute2 iputils-ping util-linux procps chromium)
missing=()
for p in "${apt_pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "bootstrap: missing packages ${missing[*]}; run as root or install them" >&2
    exit 1
  fi
  echo "bootstrap: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

py="${PYTHON:-}"
if [[ -z "$py" ]]; then
  for c in python3.12 python3.11 python3; do
    if command -v "$c" >/dev/null && "$c" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
      py="$c"; break
    fi
  done
fi
[[ -n "$py" ]] || { echo "bootstrap: Python >= 3.11 is required" >&2; exit 1; }

stamp=".venv/.mlx-cluster-deps"
want="$(sha256sum pyproject.toml | cut -d' ' -f1)"
if [[ ! -x .venv/bin/python || "$(cat "$stamp" 2>/dev/null)" != "$want" ]]; then
  echo "bootstrap: creating .venv with $py"
  "$py" -m venv .venv
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q ".[dev]"
  echo "$want" > "$stamp"
fi
