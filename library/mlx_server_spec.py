#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: mlx-cluster contributors
# MIT License

from __future__ import annotations

DOCUMENTATION = r"""
module: mlx_server_spec
short_description: Work out how this Mac's rank of the MLX server starts, and write its files
description:
  - Finds this Mac's rank in the hostfile and computes the environment C(mlx.launch) would give
    that rank (ring, jaccl, jaccl-ring), so the rank can be started without C(mlx.launch), by
    launchd or as a detached process.
  - Writes the backend's data file (ring addresses or RDMA device matrix, as C(mlx.launch)
    writes them) and C(rank<N>.env.json) (the rank's environment) into I(run_dir), only when
    their content differs; C(changed) is measured from the files.
  - Returns the rank's command line, its supervisor's command line (the part before C(--)), and
    the settings hash (model, backend, hostfile, address, port, mode, interpreter, the checksums
    of the server program and of its supervisor, and the other settings); a running server with
    the same hash is left alone.
version_added: "0.1.0"
options:
  hostfile:
    description: The MLX hostfile (the plan's C(mlx_cluster_plan.hostfile)).
    type: dict
    required: true
  host:
    description: This Mac's inventory name (its C(ssh) name in the hostfile).
    type: str
    required: true
  run_dir:
    description: The server's directory on this Mac (must exist, except in check mode).
    type: path
    required: true
  python:
    description: Interpreter on the Macs.
    type: str
    required: true
  script:
    description: The deployed server program on this Mac.
    type: path
    required: true
  imports:
    description:
      - The deployed files the program imports (beside it); their sha256 are part of the
        settings, so a changed helper restarts the server as a changed program does.
    type: list
    elements: path
    default: []
  keeper:
    description: The deployed supervisor (C(mlx_server_daemon.py)) on this Mac.
    type: path
    required: true
  model:
    description: Model directory on every Mac.
    type: str
    required: true
  model_id:
    description: Model name in the API; empty = the model directory's name.
    type: str
    default: ""
  mode:
    description: Sharding across the ranks.
    type: str
    choices: [tensor, pipeline]
    default: tensor
  address:
    description: Address rank 0's HTTP server binds.
    type: str
    default: 127.0.0.1
  port:
    description: Port rank 0's HTTP server binds.
    type: int
    default: 8080
  ring_port:
    description: First port of the ring backend (one per rank and address), or the JACCL coordinator port.
    type: int
    default: 42323
  init_timeout:
    description: Seconds a rank keeps trying to join the group.
    type: int
    default: 120
  max_tokens:
    description: Tokens a request gets when it names none, and the most it may ask for.
    type: int
    default: 2048
  poll_interval:
    description: Seconds between idle turns of the serving loop.
    type: float
    default: 0.5
  request_timeout:
    description: Seconds an HTTP request waits for its generation.
    type: int
    default: 600
  queue_size:
    description: Requests that may wait while one is generated; more get HTTP 503.
    type: int
    default: 8
  allowed_hosts:
    description:
      - Names clients may reach the API by (the HTTP C(Host) header), besides addresses,
        C(localhost) and the Mac's own names (its host name, with and without its domain, and
        C(.local)). A request naming the server by any other name is refused (HTTP 403), as a
        web page that rebound its own name to the server's address would send.
    type: list
    elements: str
    default: []
  stall_timeout:
    description: >-
      Seconds without a token (or an idle turn) after which a ready rank counts as stalled and
      its supervisor restarts it (0 = never).
    type: int
    default: 120
  max_restarts:
    description: Restarts a rank's supervisor makes within an hour before it gives up.
    type: int
    default: 3
  env:
    description:
      - Extra KEY=VALUE environment for every rank (a token may be among them). Written only to the
        rank's 0600 env file, which its supervisor reads; results and diffs show the names, with
        C((set; in the 0600 env file)) for the values.
    type: list
    elements: str
    default: []
  supervisor:
    description: What keeps the rank running (part of the settings).
    type: str
    choices: [launchd, process]
    default: launchd
  api_key:
    description:
      - The key clients must send, as C(Bearer <key>) in an C(Authorization) header; empty asks for none. Written to
        C(api_key) in I(run_dir) (0600, never shown in a diff) and given to the rank with
        C(--api-key-file); its sha256 is part of the settings, so a new key restarts the server. A
        key file left by an earlier start is removed when none is set.
    type: str
    default: ""
  label:
    description: launchd label (part of the settings; dot-separated words of letters, digits, C(_) and C(-)).
    type: str
    default: org.mlx-cluster.server
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
author:
  - mlx-cluster contributors
"""

EXAMPLES = r"""
- name: Work out this Mac's rank
  mlx_server_spec:
    hostfile: "{{ mlx_cluster_plan.hostfile }}"
    host: "{{ inventory_hostname }}"
    run_dir: /Users/admin/mlx-cluster/server
    python: /Users/admin/mlx-cluster/venv/bin/python
    script: /Users/admin/mlx-cluster/server/mlx_cluster_server.py
    keeper: /Users/admin/mlx-cluster/server/mlx_server_daemon.py
    model: /Users/admin/mlx-cluster/models/Qwen3-4B-Instruct-4bit
  register: mlx_server_rank
"""

RETURN = r"""
rank:
  description: This Mac's rank.
  returned: always
  type: int
  sample: 1
world_size:
  description: Number of ranks.
  returned: always
  type: int
  sample: 2
backend:
  description: The hostfile's backend.
  returned: always
  type: str
  sample: ring
settings_hash:
  description: sha256 of the settings (equal on every Mac of one cluster).
  returned: always
  type: str
  sample: 9f2c...
settings:
  description: What the hash covers.
  returned: always
  type: dict
  sample: {"model": "/Users/admin/mlx-cluster/models/qwen", "port": 8080}
argv:
  description: The rank's command line, without C(--run-id) (each start adds its own).
  returned: always
  type: list
  elements: str
  sample: [/Users/admin/mlx-cluster/venv/bin/python, /Users/admin/mlx-cluster/server/mlx_cluster_server.py,
           --model, "..."]
keeper_argv:
  description: >-
    The rank's supervisor's command line, up to the C(--) after which the rank's own follows
    (with C(--detach) for the process supervisor).
  returned: always
  type: list
  elements: str
  sample: [/Users/admin/mlx-cluster/venv/bin/python, /Users/admin/mlx-cluster/server/mlx_server_daemon.py,
           --pidfile, "..."]
env:
  description: The rank's environment (what mlx.launch would set, plus the extras, whose values are not shown).
  returned: always
  type: dict
  sample: {"MLX_RANK": "1", "MLX_HOSTFILE": "/Users/admin/mlx-cluster/server/ring_hosts.json"}
env_file:
  description: Where the environment is written (JSON object, 0600), for the rank's supervisor (launchd or process).
  returned: always
  type: str
  sample: /Users/admin/mlx-cluster/server/rank1.env.json
user:
  description: The user the module ran as (the launchd job's C(UserName)).
  returned: always
  type: str
  sample: admin
home:
  description: That user's home directory (C(HOME) of the launchd job).
  returned: always
  type: str
  sample: /Users/admin
"""

import hashlib
import json
import os
import pwd

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_server import (
    SERVER_SPEC,
    SpecError,
    keeper_argv,
    launch_env,
    rank_files,
    rank_of,
    server_argv,
    setting_problem,
    settings_hash,
    shown_env,
    split_env,
)


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def read_text(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def argument_spec():
    return dict(
        hostfile=dict(type="dict", required=True),
        host=dict(type="str", required=True),
        python=dict(type="str", required=True),
        script=dict(type="path", required=True),
        keeper=dict(type="path", required=True),
        model=dict(type="str", required=True),
        imports=dict(type="list", elements="path", default=[]),
        model_id=dict(type="str", default=""),
        mode=dict(type="str", choices=["tensor", "pipeline"], default="tensor"),
        address=dict(type="str", default="127.0.0.1"),
        port=dict(type="int", default=8080),
        ring_port=dict(type="int", default=42323),
        init_timeout=dict(type="int", default=120),
        max_tokens=dict(type="int", default=2048),
        poll_interval=dict(type="float", default=0.5),
        request_timeout=dict(type="int", default=600),
        queue_size=dict(type="int", default=8),
        allowed_hosts=dict(type="list", elements="str", default=[]),
        stall_timeout=dict(type="int", default=120),
        max_restarts=dict(type="int", default=3),
        env=dict(type="list", elements="str", default=[], no_log=True),
        **SERVER_SPEC,
        api_key=dict(type="str", default="", no_log=True),
    )


def rank_and_env(module, p, run_dir):
    """(rank, its environment, the backend's files) once the settings are fit; fails else."""
    why = setting_problem(
        p["label"],
        {
            "the run directory (mlx_server_run_dir)": run_dir,
            "the interpreter (mlx_server_python, python_env_python)": p["python"],
        },
    )
    if why:
        module.fail_json(msg=why)
    try:
        rank = rank_of(p["hostfile"], p["host"])
        env, files = launch_env(p["hostfile"], rank, run_dir, p["ring_port"], p["env"])
    except SpecError as exc:
        module.fail_json(msg=f"{p['host']}: {exc}")
    if not os.path.isdir(run_dir) and not module.check_mode:
        module.fail_json(msg=f"{run_dir} does not exist: create the server directory first")
    if p["queue_size"] < 0 or p["max_restarts"] < 0 or p["stall_timeout"] < 0:
        module.fail_json(
            msg=f"queue_size ({p['queue_size']}), max_restarts ({p['max_restarts']}) and "
            f"stall_timeout ({p['stall_timeout']}) cannot be negative"
        )
    return rank, env, files


def program_sums(module, p):
    """({what: sha256 or None} of the program and its supervisor, {import: sha256 or None});
    fails on a missing one, except in check mode."""
    sums = {}
    for what, path in (("server program", p["script"]), ("server's supervisor", p["keeper"])):
        sums[what] = sha256_of(path) if os.path.isfile(path) else None
        if sums[what] is None and not module.check_mode:
            module.fail_json(msg=f"the {what} {path} is missing: deploy it first")
    import_sums = {path: sha256_of(path) if os.path.isfile(path) else None for path in p["imports"]}
    missing = [path for path, digest in import_sums.items() if digest is None]
    if missing and not module.check_mode:
        module.fail_json(msg=f"{', '.join(missing)} (imported by {p['script']}) missing: deploy it first")
    return sums, import_sums


def settings_of(p, run_dir, model_id, sums, import_sums):
    """What the settings hash covers (the extra environment's names, not its values)."""
    settings = {
        "model": p["model"],
        "model_id": model_id,
        "mode": p["mode"],
        "backend": p["hostfile"].get("backend"),
        "hostfile": p["hostfile"],
        "address": p["address"],
        "port": p["port"],
        "ring_port": p["ring_port"],
        "python": p["python"],
        "script": p["script"],
        "script_sha256": sums["server program"],
        "imports_sha256": import_sums,
        "keeper": p["keeper"],
        "keeper_sha256": sums["server's supervisor"],
        "run_dir": run_dir,
        "init_timeout": p["init_timeout"],
        "max_tokens": p["max_tokens"],
        "poll_interval": p["poll_interval"],
        "request_timeout": p["request_timeout"],
        "queue_size": p["queue_size"],
        "allowed_hosts": p["allowed_hosts"],
        "stall_timeout": p["stall_timeout"],
        "max_restarts": p["max_restarts"],
        "env": sorted(split_env(p["env"])),  # the names: the values are in the hash, not shown
        "supervisor": p["supervisor"],
        "label": p["label"],
    }
    if p["api_key"]:  # a new key restarts the ranks (rank 0 reads it at start); the key itself is not recorded
        settings["api_key_sha256"] = hashlib.sha256(p["api_key"].encode()).hexdigest()
    return settings


def rank_argv(p, run_dir, world, model_id, digest, own):
    """The rank's command line (without --run-id)."""
    return server_argv(
        p["python"],
        p["script"],
        model=p["model"],
        run_dir=run_dir,
        mode=p["mode"],
        world=world,
        backend=p["hostfile"].get("backend"),
        host=p["address"],
        port=p["port"],
        model_id=model_id,
        max_tokens=p["max_tokens"],
        poll_interval=p["poll_interval"],
        request_timeout=p["request_timeout"],
        init_timeout=p["init_timeout"],
        queue_size=p["queue_size"],
        stall_timeout=p["stall_timeout"],
        settings_hash_value=digest,
        allowed_hosts=p["allowed_hosts"],
        api_key_file=own["api_key"] if p["api_key"] else None,
    )


def write_file(path, content):
    """Write content to path (0600) through a temporary file beside it."""
    tmp = f"{path}.tmp{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(content)
    os.replace(tmp, path)


def write_rank_files(module, p, run_dir, env, files, own):
    """Write the backend's files, the env file and the API key where they differ; remove a key
    file no longer asked for. Returns (the paths written or removed, the diff)."""
    env_file, key_file = own["env"], own["api_key"]
    before, after, written = {}, {}, []
    files = dict(files)
    files[os.path.basename(env_file)] = json.dumps(env, indent=2, sort_keys=True) + "\n"
    if p["api_key"]:
        files[os.path.basename(key_file)] = p["api_key"] + "\n"
    elif os.path.lexists(key_file):  # no key asked for any more: none left behind
        written.append(key_file)
        before[key_file], after[key_file] = "(the API key)\n", ""
        if not module.check_mode:
            os.unlink(key_file)
    for name, content in sorted(files.items()):
        path = f"{run_dir}/{name}"
        old = read_text(path)
        if old == content:
            continue
        secret = path == key_file  # never shown in a diff
        shown = {env_file: lambda text: shown_json(text, p["env"])}.get(path, lambda text: text)
        before[path] = "(the API key)\n" if secret and old else shown(old or "")
        after[path] = "(the API key)\n" if secret else shown(content)
        written.append(path)
        if not module.check_mode:
            write_file(path, content)
    diff = {
        "before": "".join(f"# {k}\n{v}" for k, v in before.items()),
        "after": "".join(f"# {k}\n{v}" for k, v in after.items()),
    }
    return written, diff


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    p = module.params
    run_dir = p["run_dir"].rstrip("/") or "/"
    rank, env, files = rank_and_env(module, p, run_dir)
    sums, import_sums = program_sums(module, p)
    model_id = p["model_id"] or os.path.basename(p["model"].rstrip("/"))
    world = len(p["hostfile"]["hosts"])
    settings = settings_of(p, run_dir, model_id, sums, import_sums)
    # a changed value restarts the ranks too; the values themselves are not shown (shown_env)
    digest = settings_hash({**settings, "env_values": p["env"]})
    own = rank_files(run_dir, rank)
    argv = rank_argv(p, run_dir, world, model_id, digest, own)
    keeper = keeper_argv(
        p["python"], p["keeper"], run_dir=run_dir, rank=rank, supervisor=p["supervisor"], max_restarts=p["max_restarts"]
    )
    written, diff = write_rank_files(module, p, run_dir, env, files, own)
    me = pwd.getpwuid(os.getuid())
    module.exit_json(
        changed=bool(written),
        rank=rank,
        world_size=world,
        backend=p["hostfile"].get("backend"),
        settings_hash=digest,
        settings=settings,
        argv=argv,
        keeper_argv=keeper,
        env=shown_env(env, p["env"]),
        env_file=own["env"],
        files=written,
        user=me.pw_name,
        home=me.pw_dir,
        diff=diff,
    )


def shown_json(text, extra_env):
    """An env file's text as a diff shows it (shown_env); text that is no JSON object: as it is."""
    try:
        env = json.loads(text) if text else None
    except ValueError:
        return text
    if not isinstance(env, dict):
        return text
    return json.dumps(shown_env(env, extra_env), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    main()
