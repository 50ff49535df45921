"""scripts/controller.sh: the controller in one command, on a Mac or on Linux, without root.

The fast tests source the script (sourced, it only defines its functions) and call its parts
with a PATH of stand-ins: the hash with `shasum` and no `sha256sum` (macOS), the search for a
Python past a broken pyenv shim and a too-old python3, the venv's stamp; and they read the
script for constructs macOS's bash 3.2 does not have (there is no bash 3.2 here to run it).

The slow test runs the script as a user who is not root, in a fresh clone of this repository's
HEAD (with the working tree's controller.sh and pyproject.toml copied in, so that what is being
edited is what is tested), and checks the venv has the controller's packages and not the
tests'. Its pip reaches only a directory of wheels that this machine's own pip downloads once
(pip download; kept in /var/tmp per pyproject.toml's hash and Python version), so the run
installs offline and a later run of the suite downloads nothing.
"""

import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
import time
from hashlib import sha256
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "controller.sh"
BASH = shutil.which("bash") or "/bin/bash"
TEST_USER = "mlxc-controller"  # made by scripts/test.sh before the suite (else here) when it runs as root


def _code(path):
    """The script's lines that are not comments (its header names the constructs it avoids)."""
    return "\n".join(line for line in path.read_text().splitlines() if not line.lstrip().startswith("#"))


def _standin(directory, name, body):
    path = directory / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return path


def _call(snippet, path, **env):
    """Runs `snippet` in bash after sourcing controller.sh, with only `path` as PATH."""
    return subprocess.run(
        [BASH, "-c", f'source "$1"; {snippet}', "bash", str(SCRIPT)],
        env=dict(env, PATH=str(path)),
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("script", ["controller.sh", "bootstrap.sh"])
def test_script_parses(script):
    res = subprocess.run([BASH, "-n", str(ROOT / "scripts" / script)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


# What bash 4 and later added, which macOS's /bin/bash (3.2) does not run.
BASH4 = [
    (r"\b(declare|local|typeset)\s+-[a-zA-Z]*[An]", "associative array or nameref"),
    (r"\bmapfile\b|\breadarray\b", "mapfile/readarray"),
    (r"\$\{[^}]*(,,?|\^\^?)\}", "case conversion ${x,,} / ${x^^}"),
    (r"\$\{[^}]*@[QEPAa]\}", "${x@Q} transformations"),
    (r"\|&", "|& (pipe stderr)"),
    (r"&>>", "&>> (append both)"),
    (r"\[\[\s+-v\b", "[[ -v ]]"),
    (r"\bcoproc\b", "coproc"),
    (r"\bwait\s+-n\b", "wait -n"),
    (r"\$\{\w+\[-\d+\]\}", "negative array index"),
    (r"\bEPOCH(SECONDS|REALTIME)\b", "$EPOCHSECONDS"),
]


@pytest.mark.parametrize(("pattern", "what"), BASH4, ids=[w for _, w in BASH4])
def test_controller_script_runs_on_bash_3_2(pattern, what):
    hits = [line for line in _code(SCRIPT).splitlines() if re.search(pattern, line)]
    assert not hits, f"{what} is bash 4+, macOS has bash 3.2: {hits}"


def test_bootstrap_makes_the_venv_only_through_controller_sh():
    code = _code(ROOT / "scripts" / "bootstrap.sh")
    assert "bash scripts/controller.sh --dev" in code
    assert "pip install" not in code and "-m venv" not in code


def test_unknown_argument_is_refused_with_the_usage():
    res = subprocess.run([BASH, str(SCRIPT), "--bogus"], capture_output=True, text=True, timeout=30)
    assert res.returncode == 2 and "usage: bash scripts/controller.sh [--dev]" in res.stderr


# a sha256sum stand-in: prints "<hex> <file>" as sha256sum and shasum do
HASH_PY = 'import hashlib, sys; print(hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest(), sys.argv[1])'
HASHER = f"exec {sys.executable} -c '{HASH_PY}' \"$@\""


@pytest.mark.parametrize("tool", ["sha256sum", "shasum"])
def test_sha256_with_sha256sum_or_shasum(tmp_path, tool):
    """Linux has sha256sum; macOS has only shasum, which must be asked for -a 256."""
    if tool == "shasum":
        _standin(tmp_path, "shasum", f'[ "$1 $2" = "-a 256" ] || exit 9\nshift 2\n{HASHER}')
    else:
        _standin(tmp_path, "sha256sum", HASHER)
    res = _call("sha256_of pyproject.toml", tmp_path, PWD=str(ROOT))
    want = sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    assert (res.returncode, res.stdout) == (0, want + "\n"), res.stderr


def test_sha256_without_either_tool_says_so(tmp_path):
    res = _call("cd / && sha256_of /dev/null", tmp_path)
    assert res.returncode == 1 and "neither sha256sum nor shasum" in res.stderr


def _pythons(directory):
    """A broken pyenv shim (3.13), a Python 3.9 (3.12 and python3), a real one (3.11)."""
    directory.mkdir()
    _standin(directory, "python3.13", 'echo "pyenv: python3.13: command not found" >&2; exit 127')
    old = 'case "$2" in *platform*) echo 3.9.6 ;; *) exit 1 ;; esac'
    _standin(directory, "python3.12", old)
    _standin(directory, "python3", old)
    (directory / "python3.11").symlink_to(sys.executable)
    return directory


def test_find_python_passes_over_a_broken_shim_and_an_old_python(tmp_path):
    bin_ = _pythons(tmp_path / "bin")
    res = _call('python_dirs=""; find_python', bin_)
    assert (res.returncode, res.stdout) == (0, f"{bin_}/python3.11\n"), res.stderr


def test_find_python_looks_where_homebrew_and_python_org_install(tmp_path):
    """Not on PATH, but in /opt/homebrew/bin or python.org's framework (python_dirs)."""
    brew = tmp_path / "opt-homebrew-bin"
    brew.mkdir()
    (brew / "python3.12").symlink_to(sys.executable)
    empty = tmp_path / "empty"
    empty.mkdir()
    res = _call(f'python_dirs="/nonexistent {brew}"; find_python', empty)
    assert (res.returncode, res.stdout) == (0, f"{brew}/python3.12\n"), res.stderr


def test_no_python_found_names_what_was_found_and_the_fixes(tmp_path):
    bin_ = _pythons(tmp_path / "bin")
    (bin_ / "python3.11").unlink()
    res = _call('python_dirs=""; find_python', bin_)
    assert res.returncode == 1 and res.stdout == ""
    for text in (
        f"{bin_}/python3 (3.9.6)",
        "python3.13 (not runnable)",
        "brew install python@3.13",
        "python.org",
        "apt install python3 python3-venv",
        "PYTHON=",
    ):
        assert text in res.stderr


def test_a_python_named_by_PYTHON_must_be_new_enough(tmp_path):
    bin_ = _pythons(tmp_path / "bin")
    res = _call("find_python", bin_, PYTHON=str(bin_ / "python3"))
    assert res.returncode == 1 and f"PYTHON={bin_}/python3 is 3.9.6; 3.11-3.13 is needed" in res.stderr


@pytest.mark.parametrize(
    ("stamp", "hash_", "set_", "covers"),
    [
        pytest.param("h1 controller", "h1", "controller", True, id="controller-venv-for-the-controller"),
        pytest.param("h1 controller", "h1", "dev", False, id="controller-venv-lacks-dev"),
        pytest.param("h1 dev", "h1", "controller", True, id="dev-venv-serves-the-controller"),
        pytest.param("h1 dev", "h1", "dev", True, id="dev-venv-for-dev"),
        pytest.param("h1", "h1", "dev", True, id="old-stamp-was-a-dev-install"),
        pytest.param("h0 dev", "h1", "dev", False, id="pyproject-changed"),
        pytest.param("", "h1", "controller", False, id="no-stamp"),
    ],
)
def test_stamp_covers(tmp_path, stamp, hash_, set_, covers):
    res = _call(f'stamp_covers "{stamp}" {hash_} {set_}', tmp_path)
    assert res.returncode == (0 if covers else 1), res.stderr


# --- the whole script, as a user who is not root, in a fresh clone ---------------------------


def _user():
    """The user to run as: this one when it is not root, else TEST_USER (made if missing: only when
    the suite is run without scripts/test.sh, which makes it before any simulated Mac is up)."""
    if os.geteuid() != 0:
        return pwd.getpwuid(os.geteuid())
    try:
        return pwd.getpwnam(TEST_USER)
    except KeyError:
        pass
    useradd = shutil.which("useradd") or "/usr/sbin/useradd"
    if not os.path.exists(useradd):
        pytest.skip("running as root without useradd: no user who is not root to run controller.sh as")
    res = subprocess.run([useradd, "--create-home", "--shell", "/bin/bash", TEST_USER], capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"running as root and `useradd {TEST_USER}` failed: {res.stderr.strip()}")
    return pwd.getpwnam(TEST_USER)


def _as_user(user, argv, env, cwd=None, timeout=60):
    switch = dict(user=user.pw_uid, group=user.pw_gid, extra_groups=[]) if os.geteuid() == 0 else {}
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, **switch)


def _user_env(user):
    """The user's own environment, not this suite's: no .venv on PATH, no root's pip config."""
    if os.geteuid() == 0:
        path = "/usr/local/bin:/usr/bin:/bin"
    else:
        venv_bin = str(Path(sys.prefix) / "bin")
        path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if p != venv_bin)
    # this machine's pip settings (certificates, timeout), not where it looks for packages
    pip = {
        k: v
        for k, v in os.environ.items()
        if k.startswith("PIP_") and k not in ("PIP_FIND_LINKS", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL")
    }
    return dict(pip, HOME=user.pw_dir, USER=user.pw_name, LOGNAME=user.pw_name, PATH=path, LANG="C.UTF-8")


def _wheelhouse(version):
    """A directory with the wheels of the controller's dependencies for Python `version`,
    downloaded once by this machine's pip (what it reaches: PyPI, local wheel directories)."""
    pyproject = ROOT / "pyproject.toml"
    key = f"{sha256(pyproject.read_bytes()).hexdigest()[:16]}-py{version}-{os.uname().machine}"
    parent = Path("/var/tmp" if os.path.isdir("/var/tmp") else tempfile.gettempdir()) / "mlx-cluster-test-wheels"
    final = parent / key
    if final.is_dir():
        return final
    parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    parent.chmod(0o755)
    deps = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    here = "%d.%d" % sys.version_info[:2]
    other = [] if version == here else ["--python-version", version, "--only-binary=:all:"]
    partial = Path(tempfile.mkdtemp(dir=parent, prefix=f"{key}.partial-"))
    res = subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "-d", str(partial), *other, *deps, "setuptools>=77", "pip"],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert res.returncode == 0, f"pip download of the controller's wheels failed: {res.stderr[-3000:]}"
    partial.chmod(0o755)
    for wheel in partial.iterdir():
        wheel.chmod(0o644)
    try:
        partial.rename(final)
    except OSError:  # another worker made it first
        shutil.rmtree(partial)
    return final


def _chown_tree(top, user):
    if os.geteuid() != 0:
        return
    for base, dirs, files in os.walk(top):
        for name in [base, *(os.path.join(base, n) for n in dirs + files)]:
            os.lchown(name, user.pw_uid, user.pw_gid)


@pytest.mark.slow
def test_controller_sh_as_a_user_in_a_fresh_clone():
    user = _user()
    env = _user_env(user)
    work = Path(tempfile.mkdtemp(prefix="mlxc-controller-"))
    try:
        repo = work / "mlx-cluster"
        subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(ROOT), str(repo)], check=True, timeout=120)
        for name in ("scripts/controller.sh", "pyproject.toml"):
            shutil.copy(ROOT / name, repo / name)
        _chown_tree(work, user)
        work.chmod(0o755)

        which = _as_user(
            user,
            [
                BASH,
                "-c",
                'source scripts/controller.sh; py="$(find_python)" && '
                '"$py" -c \'import sys; print("%d.%d" % sys.version_info[:2])\'',
            ],
            env,
            cwd=repo,
        )
        if which.returncode != 0:
            pytest.skip(f"{user.pw_name} has no Python 3.11-3.13 for controller.sh: {which.stderr.strip()}")
        env.update(PIP_NO_INDEX="1", PIP_FIND_LINKS=str(_wheelhouse(which.stdout.strip())))

        start = time.monotonic()
        first = _as_user(user, [BASH, "scripts/controller.sh"], env, cwd=repo, timeout=1200)
        first_s = time.monotonic() - start
        assert first.returncode == 0, first.stdout + first.stderr
        assert "source .venv/bin/activate" in first.stdout
        assert "ansible-playbook site.yml -i inventory/mac_cluster --tags rdma_check" in first.stdout

        venv = repo / ".venv" / "bin"
        res = _as_user(user, [str(venv / "ansible-playbook"), "--version"], env, cwd=repo)
        assert res.returncode == 0 and "ansible-playbook [core" in res.stdout, res.stderr
        res = _as_user(user, [str(venv / "python"), "-c", "import mlx.core, mlx_lm, ansible_runner"], env, cwd=repo)
        assert res.returncode == 0, res.stderr
        res = _as_user(user, [str(venv / "mlx.launch"), "--help"], env, cwd=repo)
        assert res.returncode == 0 and "usage: mlx.launch" in res.stdout, res.stderr
        # the controller only: none of the tests' packages
        res = _as_user(
            user,
            [
                str(venv / "python"),
                "-c",
                "import importlib.util as u; print([m for m in "
                "('pytest', 'xdist', 'hypothesis', 'ansiblelint', 'matplotlib') if u.find_spec(m)])",
            ],
            env,
            cwd=repo,
        )
        assert res.stdout.strip() == "[]", res.stdout + res.stderr
        assert not (venv / "ansible-lint").exists()
        assert (repo / ".venv" / ".mlx-cluster-deps").read_text().endswith(" controller\n")
        assert os.stat(venv / "python", follow_symlinks=False).st_uid == user.pw_uid

        start = time.monotonic()
        second = _as_user(user, [BASH, "scripts/controller.sh"], env, cwd=repo, timeout=120)
        second_s = time.monotonic() - start
        assert second.returncode == 0, second.stdout + second.stderr
        assert "nothing installed" in second.stdout, second.stdout
        assert second_s < 10, f"a second run took {second_s:.1f} s (the first {first_s:.1f} s)"
        print(f"controller.sh as {user.pw_name}: first run {first_s:.1f} s, second {second_s:.1f} s")
    finally:
        shutil.rmtree(work, ignore_errors=True)
