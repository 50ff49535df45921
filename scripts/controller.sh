#!/usr/bin/env bash
# The controller in one command, on a Mac or on Linux, without root: a virtualenv (.venv) in
# the repository with what `ansible-playbook` and `mlx.launch` need there (pyproject.toml's
# dependencies: ansible-core, ansible-runner, mlx, mlx-lm, ...), and nothing of the simulated
# cluster's or the tests'. Installs nothing outside the repository.
#
#   bash scripts/controller.sh          the controller
#   bash scripts/controller.sh --dev    the controller and the tests' packages (".[dev]");
#                                       scripts/bootstrap.sh runs this after its apt packages
#
# Idempotent: .venv/.mlx-cluster-deps records pyproject.toml's sha256 and the set installed
# ("controller" or "dev"); a second run with the same pyproject.toml installs nothing. A dev
# venv also serves the controller; a controller venv gets the dev extras added by --dev.
# Python: $PYTHON, else the first of python3.13, python3.12, python3.11 on PATH, Homebrew's
# (/opt/homebrew/bin, /usr/local/bin), python.org's (/Library/Frameworks/Python.framework),
# then python3, that is 3.11-3.13 (pyproject's requires-python).
#
# macOS's differences, handled here:
# - /bin/bash is bash 3.2: no associative arrays, mapfile/readarray, ${x,,}, ${x^^}, |&, &>>,
#   namerefs or [[ -v ]] (tests/unit/test_controller_script.py checks for them).
# - no sha256sum: `shasum -a 256` (macOS's own), whichever of the two exists.
# - no dpkg or apt, no root: nothing is installed system-wide; ssh and rsync are macOS's own
#   (/usr/bin; rsync is openrsync on macOS 15.4+, which the model_rsync module handles).
#   Graphviz's `dot` is optional (`brew install graphviz`): without it the hostfile stage
#   writes the topology as DOT instead of SVG.
# - Python: /usr/bin/python3 (Xcode's command line tools) is 3.9, too old, and is passed over
#   with its version named (and not run at all without the command line tools, where it is a
#   stub that opens their installer); Homebrew's and python.org's are found even when not on
#   PATH.
#   Homebrew's Python refuses `pip install` outside a venv (PEP 668): only the venv is used.
# - Homebrew upgrading its Python leaves venvs made with the old one unable to start: a .venv
#   whose python does not run, is outside 3.11-3.13 or has no pip is made again.
# - mlx has wheels for Apple silicon only: a Python running as x86_64 (a Rosetta terminal, an
#   Intel Mac) is refused before pip starts, with `arch -arm64` for the Rosetta case.
# - no GNU-only tools: no readlink -f, stat, timeout, nproc or sed -i.

py_min=11 # Python 3.11-3.13: pyproject.toml's requires-python
py_max=13
# Where Homebrew (Apple silicon, then Intel/Linuxbrew's /usr/local) and python.org install
# Python, looked at after PATH (tests set this to nothing).
python_dirs="/opt/homebrew/bin /usr/local/bin"
for v in 13 12 11; do
  python_dirs="$python_dirs /Library/Frameworks/Python.framework/Versions/3.$v/bin"
done

say() { echo "controller.sh: $*"; }
die() {
  echo "controller.sh: $*" >&2
  exit 1
}

# sha256_of FILE: the file's sha256 in hex, with sha256sum (Linux) or shasum -a 256 (macOS).
sha256_of() {
  local out
  if command -v sha256sum >/dev/null 2>&1; then
    out="$(sha256sum "$1")" || return 1
  elif command -v shasum >/dev/null 2>&1; then
    out="$(shasum -a 256 "$1")" || return 1
  else
    die "neither sha256sum nor shasum is on PATH (Linux: coreutils; macOS has shasum in /usr/bin)"
  fi
  echo "${out%% *}"
}

# py_ok PY: PY runs and is a Python 3.11-3.13 (a pyenv shim of a version not selected fails).
py_ok() {
  "$1" -c "import sys; sys.exit(not ((3, $py_min) <= sys.version_info[:2] <= (3, $py_max)))" \
    >/dev/null 2>&1
}

# py_version PY: "3.x.y", or "not runnable".
py_version() {
  "$1" -c 'import platform; print(platform.python_version())' 2>/dev/null || echo "not runnable"
}

# find_python: prints the Python to make the venv with, or fails naming what it found and the fix.
find_python() {
  local c d v seen=""
  if [[ -n "${PYTHON:-}" ]]; then
    py_ok "$PYTHON" && { echo "$PYTHON"; return 0; }
    die "PYTHON=$PYTHON is $(py_version "$PYTHON"); 3.$py_min-3.$py_max is needed"
  fi
  for v in 13 12 11; do
    c="$(command -v "python3.$v" 2>/dev/null)" || continue
    py_ok "$c" && { echo "$c"; return 0; }
    seen="$seen $c ($(py_version "$c"))"
  done
  for d in $python_dirs; do
    for v in 13 12 11; do
      c="$d/python3.$v"
      [[ -x "$c" ]] || continue
      py_ok "$c" && { echo "$c"; return 0; }
      seen="$seen $c ($(py_version "$c"))"
    done
  done
  if c="$(command -v python3 2>/dev/null)"; then
    if [[ "$c" == /usr/bin/python3 && "$(uname -s)" == Darwin ]] && ! xcode-select -p >/dev/null 2>&1; then
      # Apple's stub: running it opens the dialog that installs the command line tools
      seen="$seen $c (Apple's stub, no command line tools)"
    else
      py_ok "$c" && { echo "$c"; return 0; }
      seen="$seen $c ($(py_version "$c"))"
    fi
  fi
  echo "controller.sh: no Python 3.$py_min-3.$py_max found${seen:+; found:$seen}" >&2
  echo "  macOS: brew install python@3.13, or the installer from https://www.python.org/downloads/macos/" >&2
  echo "  Debian/Ubuntu: apt install python3 python3-venv (3.11 or newer); Fedora: dnf install python3" >&2
  echo "  or name one: PYTHON=/path/to/python3.12 bash scripts/controller.sh" >&2
  return 1
}

# stamp_covers HAVE HASH SET: whether the stamp text HAVE ("<sha256> <set>") says pyproject.toml
# with HASH was installed with SET or more (dev includes the controller). A stamp of only a
# hash is what scripts/bootstrap.sh wrote before this script: a dev install.
stamp_covers() {
  local have_set
  have_set="$(stamp_set "$1")"
  [[ -n "$2" && "${1%% *}" == "$2" ]] || return 1
  [[ "$have_set" == "$3" || "$have_set" == dev ]]
}

# stamp_set STAMP: the set the stamp text records (dev for a stamp of only a hash).
stamp_set() {
  case "$1" in
    *" "*) echo "${1#* }" ;;
    *) echo dev ;;
  esac
}

# check_tools: ssh and rsync are needed (mlx.launch and Ansible use ssh, model_sync rsync);
# Graphviz's dot is optional.
check_tools() {
  local t missing=""
  for t in ssh rsync; do
    command -v "$t" >/dev/null 2>&1 || missing="$missing $t"
  done
  if [[ -n "$missing" ]]; then
    if [[ "$(uname -s)" == Darwin ]]; then
      die "not on PATH:$missing (macOS has both in /usr/bin: add /usr/bin to PATH)"
    fi
    die "not on PATH:$missing; Debian/Ubuntu: apt install openssh-client rsync; Fedora: dnf install openssh-clients rsync"
  fi
  command -v dot >/dev/null 2>&1 ||
    say "optional: Graphviz's dot is not on PATH, so the topology is written as DOT, not SVG (brew install graphviz / apt install graphviz)"
}

# check_arch PY: on a Mac, PY must run as arm64 (mlx has no x86_64 macOS wheels).
check_arch() {
  local machine
  [[ "$(uname -s)" == Darwin ]] || return 0
  machine="$("$1" -c 'import platform; print(platform.machine())')"
  [[ "$machine" == arm64 ]] && return 0
  if [[ "$(sysctl -n sysctl.proc_translated 2>/dev/null)" == 1 ]]; then
    die "$1 runs as $machine under Rosetta; mlx needs arm64: arch -arm64 bash scripts/controller.sh (or a terminal not opened with Rosetta)"
  fi
  die "$1 runs as $machine: mlx installs only on Apple silicon (arm64); use an Apple-silicon Mac or Linux as the controller"
}

# make_venv PY: a new .venv (replacing one that cannot serve), or fails with the fix.
make_venv() {
  local py="$1"
  say "making .venv with $py ($(py_version "$py"))"
  if ! "$py" -m venv --clear .venv; then
    rm -rf .venv
    if ! "$py" -c 'import ensurepip' >/dev/null 2>&1; then
      die "$py has no ensurepip, so venv cannot install pip; Debian/Ubuntu: apt install python3-venv (or python3.X-venv for $py), then run this again"
    fi
    die "$py -m venv .venv failed (above)"
  fi
}

venv_usable() {
  [[ -x .venv/bin/python ]] && py_ok .venv/bin/python &&
    .venv/bin/python -m pip --version >/dev/null 2>&1
}

usage() {
  echo "usage: bash scripts/controller.sh [--dev]" >&2
  exit 2
}

main() {
  set -euo pipefail
  local set=controller spec=. want have py here
  case "${1:-}" in
    "") ;;
    --dev) set=dev spec=".[dev]" ;;
    *) usage ;;
  esac
  here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  cd "$here"
  check_tools
  want="$(sha256_of pyproject.toml)"
  have="$(cat .venv/.mlx-cluster-deps 2>/dev/null || true)"
  if venv_usable && stamp_covers "$have" "$want" "$set"; then
    say ".venv is up to date (pyproject.toml unchanged, $(stamp_set "$have") set): nothing installed"
  else
    if ! venv_usable; then
      [[ -e .venv ]] && say ".venv cannot serve (its python does not run, is not 3.$py_min-3.$py_max or has no pip): making it again"
      py="$(find_python)" || exit 1
      check_arch "$py"
      make_venv "$py"
    else
      check_arch .venv/bin/python
    fi
    rm -f .venv/.mlx-cluster-deps
    say "installing $spec into .venv (Python $(py_version .venv/bin/python)); a first install downloads about 70 MB"
    .venv/bin/python -m pip install -q --upgrade pip ||
      die "pip could not upgrade itself (above): is the package index reachable? (HTTPS_PROXY, PIP_INDEX_URL)"
    if ! .venv/bin/python -m pip install -q "$spec"; then
      [[ "$(uname -s)" == Darwin ]] && echo "  mlx needs macOS 14 or newer on Apple silicon" >&2
      die "pip install $spec failed (above); run this again once fixed"
    fi
    echo "$want $set" >.venv/.mlx-cluster-deps
  fi
  # the versions, read from the installed metadata: also proves the venv imports them
  say "$(.venv/bin/python -c 'import importlib.metadata as m, platform
print("Python %s, ansible-core %s, mlx %s, mlx-lm %s" % (platform.python_version(),
      *(m.version(p) for p in ("ansible-core", "mlx", "mlx-lm"))))')"
  [[ "$set" == dev ]] && return 0
  cat <<EOF
Use it (in this shell; or put $here/.venv/bin on PATH):
  source .venv/bin/activate
  ansible-playbook site.yml -i inventory/mac_cluster --tags rdma_check
EOF
}

# Sourced (by the tests) it only defines the functions above.
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  main "$@"
fi
