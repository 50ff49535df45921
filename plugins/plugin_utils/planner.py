# -*- coding: utf-8 -*-
"""The plan step: every Mac's facts + the settings -> the cluster plan (``make_plan()``, the
action mlx.cluster.mlx_cluster_plan), and what the run around it needs: which facts discovery
reads for this run's stages (``discovery_request()``), the toolkit's directory on every Mac
(``remote_dir()``), the hostfile written on the controller and on every Mac
(``hostfile_text()``, ``hostfile_writes()``), each Mac's coordinator address
(``coordinator()``) and the ring to fall back on (``fallback()``).

The steps it runs, one module each (``plugins/filter/plan_filters.py`` is their thin Ansible
face, one filter per step; see ``docs/design.md``)::

    facts_by_host | mlx_links          -> cables (plan_cables: every cable, both sightings checked)
    links | mlx_topology(hosts, rdma)  -> full mesh? best ring? which MLX backend? (plan_topology)
    links | mlx_ip_plan(pool)          -> one /30 per cable, stable across runs (plan_addresses)
    topology | mlx_hostfile(plan, ...) -> the JSON that ``mlx.launch --hostfile`` reads (plan_hostfile)
    links | mlx_dot(topology, plan)    -> Graphviz picture of the wiring (plan_picture)

Pure functions with no Ansible import; every planning failure raises
:class:`plan_common.PlanError` with a message that says what is wrong and how to fix it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_files import unsafe_path
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_launch import BACKENDS, RDMA_BACKENDS
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_wired import PLIST_PATH as WIRED_PLIST_PATH
from ansible_collections.mlx.cluster.plugins.plugin_utils.plan_addresses import DEFAULT_POOL, ip_plan
from ansible_collections.mlx.cluster.plugins.plugin_utils.plan_cables import links
from ansible_collections.mlx.cluster.plugins.plugin_utils.plan_common import PlanError, join_limited
from ansible_collections.mlx.cluster.plugins.plugin_utils.plan_hostfile import hostfile, lan_ring
from ansible_collections.mlx.cluster.plugins.plugin_utils.plan_topology import topology

# MLX's distributed backends the plan can choose (module_utils/mlx_launch.BACKENDS, best
# first); `auto` lets the plan choose.
BACKEND_CHOICES = ("auto",) + BACKENDS


# --------------------------------------------------------------------------------------------
# the plan step: facts of every Mac + settings -> the cluster plan (mlx.cluster.mlx_cluster_plan)
# --------------------------------------------------------------------------------------------

# Where the toolkit keeps its files on a Mac when mlx_cluster_remote_dir is empty, and the
# hostfile's name there and in the artifacts directory (roles/hostfile's hostfile_name default).
DEFAULT_REMOTE_DIR = "~/mlx-cluster"
HOSTFILE_NAME = "hostfile.json"
# mlx_cluster_fallback_backend: what a launch runs on when RDMA cannot be brought up ("": none,
# the launch fails naming the cables and Macs to replug or reboot).
FALLBACK_CHOICES = ("", "ring")

# What discovery must read for a stage that runs later in the same run, by the stage's play
# tags (as in playbooks/*.yml): the network stage leaves alone a Mac whose links are in place
# and answer (probe_links), the hostfile stage one whose hostfile is right (read_hostfile); the
# power stage plans from the power settings (read_power, `pmset -g custom`); the preflight
# checks read the automatic-update settings (read_updates) and run no sudo check of their own
# on a Mac where `sudo -n` worked (probe_sudo). A run that selects none of these stages reads
# none of it.
STAGE_NEEDS = {
    ("network",): ("probe_links",),
    ("hostfile",): ("read_hostfile",),
    ("power",): ("read_wired_daemon", "read_power"),
    ("preflight", "rdma_check"): ("probe_sudo", "read_updates"),
}


# The tags a run may name with --tags / --skip-tags: each play's own (playbooks/*.yml; a unit
# test holds the two lists equal), `validate` (no stage: validate, discovery and the report,
# which every run does) and Ansible's own.
STAGE_TAGS = (
    "validate",
    "capture",
    "preflight",
    "rdma_check",
    "power",
    "network",
    "hostfile",
    "env",
    "port_check",
    "models",
    "benchmark",
    "net_check",
    "server",
    "server_stop",
    "server_status",
    "ssh_trust_remove",
)
ANSIBLE_TAGS = ("all", "tagged", "untagged", "always", "never")


def unknown_tags(run_tags=("all",), skip_tags=()):
    """Messages for the tags of --tags / --skip-tags (ansible_run_tags, ansible_skip_tags) that
    no play has: a misspelt --tags runs no stage, a misspelt --skip-tags skips nothing."""
    known = set(STAGE_TAGS) | set(ANSIBLE_TAGS)
    out = []
    for option, tags, what in (
        ("--tags", run_tags, "so it selects no stage"),
        ("--skip-tags", skip_tags, "so it skips nothing"),
    ):
        unknown = [t for t in (tags or ()) if isinstance(t, str) and t not in known]
        if unknown:
            out.append(
                "%s %s: no stage has %s, %s (check the spelling; the stages' tags: %s)"
                % (
                    option,
                    ",".join(unknown),
                    "that tag" if len(unknown) == 1 else "these tags",
                    what,
                    ", ".join(STAGE_TAGS),
                )
            )
    return out


def stage_runs(play_tags, run_tags=("all",), skip_tags=()):
    """Whether this run's tag selection (ansible_run_tags, ansible_skip_tags) runs the tasks of
    a play tagged `play_tags`, by Ansible's own rule (`never` only when named, `always` always,
    `all`/`tagged` select every play not tagged `never`)."""
    if isinstance(play_tags, str) or not isinstance(play_tags, (list, tuple)):
        raise PlanError("play_tags must be the play's list of tags, got %r" % (play_tags,))
    tags = set(play_tags)
    only = set(run_tags or ("all",))
    skip = set(skip_tags or ())
    if "all" in skip or "tagged" in skip or tags & skip:
        return False
    if "always" in tags and "always" not in skip:
        return True
    return bool(tags & only) or ("never" not in tags and bool({"all", "tagged"} & only))


def _remote_dir_setting(setting):
    setting = setting or DEFAULT_REMOTE_DIR
    if not isinstance(setting, str):
        raise PlanError("mlx_cluster_remote_dir must be a path, got %r" % (setting,))
    setting = setting.rstrip("/") or "/"
    if not (setting.startswith("/") or setting == "~" or setting.startswith("~/")):
        raise PlanError(
            "mlx_cluster_remote_dir %r is relative: give an absolute path (the same on "
            "every Mac, e.g. /opt/mlx-cluster) or one under ~ (each Mac's home, "
            "when every Mac has the same home directory)" % setting
        )
    why = unsafe_path(setting, "mlx_cluster_remote_dir", home=True)
    if why:
        raise PlanError(why)
    return setting


def discovery_request(
    run_tags=("all",), skip_tags=(), remote_dir_setting="", hostfile_name=HOSTFILE_NAME, wired_limit=""
):
    """What the discovery module reads besides the facts, for the stages this run runs:
    ``{probe_links, probe_sudo, read_power, read_updates: bool, read_files: [paths],
    cluster_dir: the toolkit's directory, checked on every run}``. The
    hostfile is read where the plan will put it (`~` is the Mac's home, expanded by the module,
    as :func:`remote_dir` expands it); the
    wired limit's LaunchDaemon when the power stage runs and `wired_limit`
    (mlx_cluster_wired_limit) is set."""
    needs = set()
    for play_tags, what in STAGE_NEEDS.items():
        if stage_runs(list(play_tags), run_tags, skip_tags):
            needs.update(what)
    base = _remote_dir_setting(remote_dir_setting)
    files = ["%s/%s" % (base.rstrip("/"), hostfile_name)] if "read_hostfile" in needs else []
    if "read_wired_daemon" in needs and str(wired_limit or "").strip():
        files.append(WIRED_PLIST_PATH)
    return {
        "probe_links": "probe_links" in needs,
        "probe_sudo": "probe_sudo" in needs,
        "read_power": "read_power" in needs,
        "read_updates": "read_updates" in needs,
        "read_files": files,
        "cluster_dir": base,
    }


HOSTFILE_MODE = "0600"


def hostfile_text(hostfile):
    """The hostfile as written on the controller and on every Mac: JSON as Ansible's
    to_nice_json(indent=2) prints it, one newline at the end."""
    return json.dumps(hostfile, indent=2, sort_keys=True, separators=(",", ": ")) + "\n"


def hostfile_writes(plan, files=None):
    """What a Mac needs written for its hostfile, as mlx_files takes it: ``[{path, content,
    mode}]``, or ``[]`` when no backend fits (no hostfile) or when `files` (discovery's
    ``files`` fact: ``{path: {sha256, mode}}``) shows the right one already there."""
    if plan.get("hostfile") is None:
        return []
    content = hostfile_text(plan["hostfile"])
    path = plan["hostfile_path"]
    if (files or {}).get(path) == {
        "sha256": hashlib.sha256(content.encode("utf-8")).hexdigest(),
        "mode": HOSTFILE_MODE,
    }:
        return []
    return [{"path": path, "content": content, "mode": HOSTFILE_MODE}]


def remote_dir(setting, homes):
    """The one absolute directory the toolkit uses on every Mac, from mlx_cluster_remote_dir
    (empty: ``~/mlx-cluster``) and each Mac's home directory (``{host: home}``).

    mlx.launch runs one command line on every Mac (interpreter, script and model paths are the
    same words everywhere), so the directory must be the same absolute path on all of them:
    ``~`` is expanded with each Mac's home, and Macs whose homes differ need an absolute
    mlx_cluster_remote_dir that is each Mac's user's own (``/opt/mlx-cluster``, made once per
    Mac; not below a folder every user can write, such as /Users/Shared, where another user
    could make it first)."""
    setting = _remote_dir_setting(setting)
    if not setting.startswith("~"):
        return setting
    resolved = {}
    for host in sorted(homes):
        home = homes[host]
        if not isinstance(home, str) or not home.startswith("/"):
            raise PlanError(
                "%s: its home directory is unknown (discovery returned %r), so %s "
                "cannot be resolved: set mlx_cluster_remote_dir to an absolute path" % (host, home, setting)
            )
        resolved[host] = home.rstrip("/") + setting[1:] if home != "/" else setting[1:] or "/"
    paths = sorted(set(resolved.values()))
    if len(paths) > 1:
        raise PlanError(
            "%s is a different directory on each Mac (%s): their home directories differ, and "
            "mlx.launch runs the same interpreter, script and model paths on every Mac. Set "
            "mlx_cluster_remote_dir to one absolute path that is each Mac's user's own, e.g. "
            "/opt/mlx-cluster, made once on each Mac with `sudo mkdir -p /opt/mlx-cluster && sudo "
            "chown <the login user> /opt/mlx-cluster` (not below /Users/Shared: every user can write "
            "there, and another could make the directory first)"
            % (setting, join_limited("%s %s" % (h, p) for h, p in resolved.items()))
        )
    if not paths:
        raise PlanError("no hosts to resolve %s on" % setting)
    why = unsafe_path(paths[0], "mlx_cluster_remote_dir (%s in each Mac's home)" % setting)
    if why:
        raise PlanError(why)
    return paths[0]


def coordinator(host_vars):
    """The address a host is reached on for coordination: the inventory override
    (mlx_cluster_coordinator_address), else the address of the interface Ansible connects over
    (its mlx_cluster facts' mgmt.address)."""
    override = host_vars.get("mlx_cluster_coordinator_address") or ""
    return override or ((host_vars.get("mlx_cluster") or {}).get("mgmt") or {}).get("address")


def _home(host, facts):
    home = facts.get("home")
    if home is None:  # facts of an older discovery module: the home is where it measured disk
        home = (facts.get("disk") or {}).get("path")
    return home


def fallback(topo, addresses, backend, hostfile_name, envs=()):
    """What a launch runs on when the plan's RDMA backend cannot be brought up: None (no
    fallback set, or the plan is not RDMA), else ``{backend: "ring", from, hostfile,
    hostfile_name}``: the TCP ring over the same Thunderbolt cables and addresses (all the
    cables of the ring, not only those that carry RDMA), in ``<hostfile stem>-ring.json``."""
    if backend not in FALLBACK_CHOICES:
        raise PlanError(
            "fallback_backend must be one of %s, got %r" % (", ".join(repr(c) for c in FALLBACK_CHOICES), backend)
        )
    planned = topo.get("backend")
    if not backend or planned not in RDMA_BACKENDS:
        return None
    try:
        ring = hostfile(topo, addresses, envs=envs, backend=backend)
    except PlanError as exc:
        raise PlanError(
            "mlx_cluster_fallback_backend %s: no %s hostfile fits this wiring: %s" % (backend, backend, exc.message)
        ) from None
    return {
        "backend": backend,
        "from": planned,
        "hostfile": ring,
        "hostfile_name": _sibling_name(hostfile_name, backend),
    }


def _sibling_name(hostfile_name, backend):
    """The name of another backend's hostfile beside the plan's: ``<hostfile stem>-<backend>.json``
    (hostfile-ring.json, hostfile-ring-lan.json)."""
    stem = hostfile_name[: -len(".json")] if hostfile_name.endswith(".json") else hostfile_name
    return "%s-%s.json" % (stem, backend)


# benchmark_backends: a backend over the Thunderbolt cables (as the plan would write it), or
# the TCP ring over the management LAN, to measure what the cables and RDMA buy.
LAN_RING = "ring-lan"
SIDE_BY_SIDE_CHOICES = BACKENDS + (LAN_RING,)


def side_by_side(plan, names):
    """The hostfiles to run the same job on, one after the other, to compare backends.

    `names`: entries of SIDE_BY_SIDE_CHOICES in the order asked (the first is what the others
    are compared with); empty: the plan's backend alone. Returns ``[{name, backend, over,
    hostfile, hostfile_name, content}]``: ``over`` is ``thunderbolt`` or ``lan``; the plan's backend
    gets the plan's own hostfile and name, the ring over the cables the fallback's when the
    plan has one, any other backend over the cables the hostfile the plan would write for it
    (a PlanError when the wiring cannot carry it, naming why), ``ring-lan`` a ring in rank
    order over each Mac's coordinator address (its address on the management LAN). Each entry
    also carries ``content``, the hostfile as written (hostfile_text)."""
    if isinstance(names, str) or not isinstance(names, (list, tuple)):
        raise PlanError("benchmark_backends must be a list, got %r" % (names,))
    planned = (plan.get("hostfile") or {}).get("backend")
    names = list(names) or ([planned] if planned else [])
    unknown = [n for n in names if n not in SIDE_BY_SIDE_CHOICES]
    if unknown:
        raise PlanError(
            "benchmark_backends: %s not one of %s" % (join_limited(map(repr, unknown)), ", ".join(SIDE_BY_SIDE_CHOICES))
        )
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise PlanError("benchmark_backends lists %s more than once" % join_limited(twice))
    if not names:
        raise PlanError("no MLX backend fits this wiring: %s" % plan["topology"].get("message", "no mesh and no ring"))
    envs = list((plan.get("hostfile") or {}).get("envs") or [])
    name = plan["hostfile_name"]
    fall = plan.get("fallback") or {}
    out = []
    for n in names:
        entry = {"name": n, "backend": "ring" if n == LAN_RING else n, "over": "thunderbolt"}
        if n == planned:
            entry.update(hostfile=plan["hostfile"], hostfile_name=name)
        elif n == fall.get("backend"):
            entry.update(hostfile=fall["hostfile"], hostfile_name=fall["hostfile_name"])
        elif n == LAN_RING:
            try:
                made = lan_ring(plan["hosts"], plan["ip_plan"], plan.get("coordinators"), envs)
            except PlanError as exc:
                raise PlanError("benchmark_backends ring-lan: %s" % exc.message) from None
            entry.update(over="lan", hostfile=made, hostfile_name=_sibling_name(name, n))
        else:
            try:
                made = hostfile(
                    plan["topology"], plan["ip_plan"], coordinators=plan.get("coordinators"), envs=envs, backend=n
                )
            except PlanError as exc:
                raise PlanError("benchmark_backends %s: %s" % (n, exc.message)) from None
            entry.update(hostfile=made, hostfile_name=_sibling_name(name, n))
        out.append(dict(entry, content=hostfile_text(entry["hostfile"])))
    return out


def _stop_on_one_mac_twice(problems):
    """Two inventory hosts whose ports report the same Thunderbolt domain UUIDs are one Mac
    reached by two names (an alias and an address, say): every later step (cables, ring, the
    ranks) would be wrong, and its message would hide the cause. Stop here, naming them."""
    same = sorted({tuple(p["hosts"]) for p in problems if p["code"] == "duplicate_uuid" and len(p["hosts"]) > 1})
    if same:
        raise PlanError(
            "%s report the same Thunderbolt ports (domain UUIDs): two inventory names for one Mac "
            "(or facts copied between hosts). Keep one inventory host for each Mac, with the "
            "address Ansible reaches it at" % "; ".join(" and ".join(hosts) for hosts in same)
        )


def make_plan(facts_by_host, settings):
    """The cluster plan, the one thing every later stage reads (as ``mlx_cluster_plan``).

    `facts_by_host`: ``{host: mlx_cluster facts}`` in inventory order (rank order).
    `settings`: ``hosts`` (the play's hosts, rank order), ``coordinators`` ({host: address}),
    ``ssh`` ({host: ssh target}), ``backend``, ``rdma_wanted``, ``rdma_required``,
    ``rdma_through_docks``, ``ip_pool``, ``exclude_networks``, ``envs``, ``remote_dir``,
    ``hostfile_name``, ``fallback_backend``.

    Returns ``{hosts, links, topology, ip_plan, coordinators, hostfile, ssh, remote_dir,
    hostfile_name, hostfile_path, fallback}``: hostfile is None when no backend fits the wiring
    (the topology says why); remote_dir and hostfile_path are the same absolute paths on every
    Mac; fallback is what `fallback()` gives.
    """
    hosts = list(settings.get("hosts") or facts_by_host)
    missing = [h for h in hosts if not isinstance(facts_by_host.get(h), Mapping)]
    if missing:
        raise PlanError(
            "no discovery facts for %s: run the discover stage on every Mac of the "
            "play (it always runs with site.yml)" % join_limited(missing)
        )
    facts = {h: facts_by_host[h] for h in hosts}
    for h in hosts:
        for key in ("thunderbolt", "interfaces"):
            if key not in facts[h]:
                raise PlanError(
                    "%s: discovery facts lack %r (an older mlx_cluster_facts?): re-run the discover stage" % (h, key)
                )
    rdma_wanted = bool(settings.get("rdma_wanted", True))
    coordinators = dict(settings.get("coordinators") or {})
    found = links({h: facts[h]["thunderbolt"] for h in hosts})
    _stop_on_one_mac_twice(found["problems"])
    topo = topology(
        found,
        hosts,
        rdma={h: facts[h].get("rdma") for h in hosts} if rdma_wanted else False,
        backend=settings.get("backend") or "auto",
        rdma_through_docks=bool(settings.get("rdma_through_docks", False)),
        rdma_required=rdma_wanted and bool(settings.get("rdma_required", False)),
    )
    addresses = ip_plan(
        found,
        pool=settings.get("ip_pool") or DEFAULT_POOL,
        interfaces={h: facts[h]["interfaces"] for h in hosts},
        exclude=list(settings.get("exclude_networks") or []),
    )
    directory = remote_dir(settings.get("remote_dir"), {h: _home(h, facts[h]) for h in hosts})
    name = settings.get("hostfile_name") or HOSTFILE_NAME
    if "/" in name or name in (".", ".."):
        raise PlanError("hostfile_name %r must be a file name, not a path" % name)
    envs = list(settings.get("envs") or [])
    return {
        "hosts": hosts,
        "links": found,
        "topology": topo,
        "ip_plan": addresses,
        "coordinators": coordinators,
        "hostfile": (hostfile(topo, addresses, coordinators=coordinators, envs=envs) if topo.get("backend") else None),
        "ssh": dict(settings.get("ssh") or {}),
        "remote_dir": directory,
        "hostfile_name": name,
        "hostfile_path": "%s/%s" % (directory.rstrip("/"), name),
        "fallback": fallback(topo, addresses, settings.get("fallback_backend") or "", name, envs),
    }
