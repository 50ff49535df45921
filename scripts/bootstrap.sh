#!/usr/bin/env bash
# The sandbox's set-up on a fresh Debian/Ubuntu machine (run as root; scripts/demo.sh and
# scripts/test.sh run it): the apt packages the simulated cluster and the tests use, then the
# controller's virtualenv (.venv) with the tests' packages added, made by scripts/controller.sh
# --dev (the one place that knows how .venv is made; on a real controller, Mac or Linux, run
# scripts/controller.sh alone, without root).
# Idempotent: a second run installs nothing when nothing changed.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"

# prometheus: its promtool checks the metrics the runs write (tests/unit/plugin_utils/test_metrics.py);
# zsh: the simulated Macs' login shell, as on a Mac (tests/simcluster/README.md, "login")
apt_pkgs=(openssh-server openssh-client rsync graphviz iproute2 iputils-ping util-linux procps chromium prometheus zsh)
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

bash scripts/controller.sh --dev
