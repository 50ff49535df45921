# -*- coding: utf-8 -*-
"""The port check's verdict (controller side): what each Mac's listener and connects found
(mlx.cluster.mlx_port_probe), in words naming both Macs, the address and port, the cause found
and the fix. Pure; behind the filter mlx.cluster.mlx_port_problems."""

from __future__ import annotations

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_ports import SOCKETFILTERFW, alf_summary

__all__ = ["port_problems", "report"]

RERUN = "then re-run (`--tags port_check` checks the ports alone)"
FIX_NETWORK = "run the network stage (`--tags network`) so every cable has its planned address, " + RERUN
FIX_ELSEWHERE = (
    "on both Macs: disconnect VPNs and turn off network filter extensions (System Settings > "
    "Network > VPN & Filters), look for packet filter rules (`sudo pfctl -s rules`), and allow "
    "Local Network access for the interpreter or the app that runs it (System Settings > "
    "Privacy & Security > Local Network); " + RERUN
)
CAUSE_ELSEWHERE = (
    "the application firewall there is {alf}, so the likely causes are a VPN or network filter "
    "extension on either Mac, a packet filter (pf) rule, or macOS Local Network privacy (MLX "
    "then hangs with errno 60 ETIMEDOUT or 65 EHOSTUNREACH, mlx #3755)"
)

HOW = {
    "timeout": "no answer within {timeout} s (the connection attempts were dropped without a reply)",
    "unreachable": "no route to it ({error})",
    "refused": "the connection was refused (nothing listened there, or a filter rejects it)",
    "reset": "its kernel accepted the connection, then it was reset before the listener answered",
    "no_answer": "its kernel accepted the connection, but the listener never answered",
    "wrong_answer": "something other than the probe's listener answered",
    "error": "the connect failed ({error})",
}


def _problem(host, msg, fix, code, peer=None, address=None, port=None):
    return {
        "severity": "error",
        "check": "ports",
        "code": code,
        "host": host,
        "peer": peer,
        "address": address,
        "port": port,
        "msg": msg,
        "fix": fix,
    }


def _what(endpoint):
    if endpoint["role"] == "coordinator":
        return "the JACCL coordinator, rank 0"
    return "rank %d's ring listener" % endpoint["rank"]


def _alf_fix(host, alf):
    app = alf.get("app_path") or "the interpreter the ranks run"
    allow = (
        "on %s: `sudo %s --add %s`, then `sudo %s --unblockapp %s` (two commands, as every public "
        "example runs them), or System Settings > Network > Firewall > Options: add %s and set it to "
        "Allow incoming connections" % (host, SOCKETFILTERFW, app, SOCKETFILTERFW, app, app)
    )
    if alf.get("block_all"):
        return (
            "on %s: `sudo %s --setblockall off` (System Settings > Network > Firewall > Options: turn "
            "off Block all incoming connections), then allow the interpreter: %s; %s"
            % (host, SOCKETFILTERFW, allow, RERUN)
        )
    return allow + "; " + RERUN


def _alf_cause(host, alf):
    words = ["the application firewall on %s is on" % host]
    if alf.get("block_all"):
        words.append("blocking all incoming connections")
    if alf.get("stealth"):
        words.append("in stealth mode (it drops what it does not allow, without an answer)")
    app, path = alf.get("app"), alf.get("app_path") or "the interpreter"
    if app == "blocked":
        words.append("and blocks %s" % path)
    elif app == "not_listed":
        words.append("and does not list %s" % path)
        if alf.get("allow_signed_downloaded"):
            words.append(
                "(it allows downloaded signed software by itself, which covers an interpreter only "
                "when it is signed with a Developer ID: not a Homebrew, pyenv or self-built one)"
            )
    elif app == "permitted":
        words.append("and says it permits %s (a framework build of Python is judged as its Python.app)" % path)
    return ", ".join(words[:2]) + (" " + " ".join(words[2:]) if len(words) > 2 else "")


def _listen_problem(host, e, err):
    """Why `host` could not listen on endpoint `e` (the listener's error `err`), and the fix."""
    where = "%s:%d (%s)" % (e["address"], e["port"], _what(e))
    if err.get("error") == "EADDRINUSE":
        return _problem(
            host,
            "%s: %s is in use by another program, so MLX's rank cannot listen there alone" % (host, where),
            "on %s: `sudo lsof -nP -iTCP:%d -sTCP:LISTEN` names it; end it (a rank left from an "
            "earlier run, or a server using the same ports), %s" % (host, e["port"], RERUN),
            "in_use",
            address=e["address"],
            port=e["port"],
        )
    elif err.get("error") == "EADDRNOTAVAIL":
        return _problem(
            host,
            "%s does not have the address %s, where %s listens" % (host, e["address"], _what(e)),
            FIX_NETWORK,
            "no_address",
            address=e["address"],
            port=e["port"],
        )
    else:
        return _problem(
            host,
            "%s: cannot listen on %s: %s" % (host, where, err.get("text") or err.get("error")),
            "free the port or the address on %s, %s" % (host, RERUN),
            "listen",
            address=e["address"],
            port=e["port"],
        )


def _connect_problem(peer, r, e, listened, timeout):
    """Why `peer` could not reach endpoint `e` (its connect result `r`): the cause from the
    listening Mac's firewall when it is on, the fix."""
    host = e["host"]
    how = HOW.get(r["result"], HOW["error"]).format(timeout=timeout, error=r.get("error") or r["result"])
    alf = (listened.get(host) or {}).get("alf") or {}
    msg = "%s cannot reach %s %s:%d (%s): %s" % (peer, host, e["address"], e["port"], _what(e), how)
    if alf.get("enabled"):
        msg += "; %s" % _alf_cause(host, alf)
        fix = _alf_fix(host, alf)
        if r["result"] in ("timeout", "unreachable") and not (alf.get("stealth") or alf.get("block_all")):
            fix += "; if it still fails, " + FIX_ELSEWHERE
    elif r["result"] == "unreachable":
        msg += "; the cable's addresses may not be in place, or a VPN captures the route"
        fix = FIX_NETWORK + "; if the addresses are there, " + FIX_ELSEWHERE
    else:
        msg += "; " + CAUSE_ELSEWHERE.format(alf=alf_summary(alf) if alf else "unknown")
        fix = FIX_ELSEWHERE
    return _problem(peer, msg, fix, r["result"], peer=host, address=e["address"], port=e["port"])


def _interpreter(launchd):
    python, exe = launchd.get("python") or "the ranks' interpreter", launchd.get("executable")
    return python if not exe or exe == python else "%s (%s)" % (python, exe)


def _local_network_problem(peer, r, e, launchd, timeout):
    """`peer` reached endpoint `e` over ssh, but its launchd job (run as the server's ranks
    run) did not (its result `r`): macOS Local Network privacy, as reported for macOS 26/27."""
    host = e["host"]
    if r.get("errno"):
        how = "failed with %s (errno %d)" % (r.get("error") or r["errno"], r["errno"])
    else:
        how = "failed: " + HOW.get(r["result"], HOW["error"]).format(
            timeout=timeout, error=r.get("error") or r["result"]
        )
    interpreter = _interpreter(launchd)
    msg = (
        "%s: macOS Local Network privacy refuses the launchd-started interpreter on %s: connecting as a "
        "launchd job, as the server's ranks run (%s, as %s), to %s %s:%d (%s) %s, while the same connect "
        "over ssh got the listener's answer (Apple's TN3179 exempts processes started over ssh, and says "
        "launchd daemons are exempt too; this refusal of a launchd-started interpreter without an app "
        "bundle is reported for macOS 26/27 and not verified on a Mac by this project)"
        % (
            peer,
            peer,
            interpreter,
            launchd.get("user") or "the server's user",
            host,
            e["address"],
            e["port"],
            _what(e),
            how,
        )
    )
    fix = (
        "on %s: allow %s in System Settings > Privacy & Security > Local Network if it is listed there; "
        "otherwise run the server with `mlx_server_supervisor: process` (its ranks are then started over "
        "ssh, which TN3179 exempts); %s" % (peer, interpreter, RERUN)
    )
    return _problem(peer, msg, fix, "local_network", peer=host, address=e["address"], port=e["port"])


def _launchd_problems(launched, connected, by_key, broken, timeout):
    """What each Mac's launchd job found (mlx_port_probe launchd_user) that its connects over
    ssh did not: a connect refused only as a launchd job, or a job that could not run."""
    out = []
    for peer in sorted(launched):
        launchd = launched[peer]
        if not launchd:
            continue
        if launchd.get("error"):
            out.append(
                _problem(
                    peer,
                    "%s: the port probe could not run as a launchd job, as the server's ranks will: %s"
                    % (peer, launchd["error"]),
                    "on %s: the server's launchd supervisor needs the same (sudo without a password, "
                    "the interpreter %s, the user %s): put that right, or run the server with "
                    "`mlx_server_supervisor: process`; %s"
                    % (peer, launchd.get("python") or "", launchd.get("user") or "", RERUN),
                    "launchd_probe",
                )
            )
            continue
        over_ssh = {(r.get("host"), r.get("address"), r.get("port")): r for r in connected.get(peer) or []}
        for r in launchd.get("results") or []:
            key = (r.get("host"), r.get("address"), r.get("port"))
            e = by_key.get(key)
            if e is None or key in broken or r.get("result") == "ok":
                continue
            if (over_ssh.get(key) or {}).get("result") != "ok":
                continue  # refused over ssh too: that problem is named as such, once
            out.append(_local_network_problem(peer, r, e, launchd, timeout))
    return out


def port_problems(endpoints, listened, connected, timeout=5, launched=None):
    """-> {problems: [...], alf: {host: summary}, checked: [endpoint ids], message}.

    `endpoints`: mlx_ports.endpoints(); `listened`: {host: mlx_port_probe listen result};
    `connected`: {host: [mlx_port_probe connect results]}; `launched`: {host: mlx_port_probe
    connect's `launchd`, what its launchd job found, or None}. A Mac absent from `listened` (its
    listener task did not run) is named; its endpoints' connects are not judged again. A connect
    that failed over ssh keeps its wording whatever the launchd job saw; one that failed only as
    a launchd job is named as Local Network privacy refusing the launchd-started interpreter."""
    problems, alf_by_host, broken = [], {}, set()
    for host in sorted({e["host"] for e in endpoints} | set(listened)):
        result = listened.get(host)
        if result is None:
            continue
        alf_by_host[host] = alf_summary(result.get("alf"))
    for e in endpoints:
        host, key = e["host"], (e["host"], e["address"], e["port"])
        result = listened.get(host)
        if result is None:
            broken.add(key)
            problems.append(
                _problem(
                    host,
                    "%s did not start the probe's listener for %s:%d" % (host, e["address"], e["port"]),
                    "see the listener task's error for %s above; %s" % (host, RERUN),
                    "no_listener",
                    address=e["address"],
                    port=e["port"],
                )
            )
            continue
        listener = result.get("listener") or {}
        if listener.get("error"):
            broken.add(key)
            continue
        for err in listener.get("errors") or []:
            if (err.get("address"), err.get("port")) != (e["address"], e["port"]):
                continue
            broken.add(key)
            problems.append(_listen_problem(host, e, err))
    # listeners that did not start at all: once per Mac
    for host in sorted(listened):
        err = (listened[host].get("listener") or {}).get("error")
        if err:
            problems.append(
                _problem(
                    host,
                    "%s: the probe's listener did not start: %s" % (host, err),
                    "run the env stage (`--tags env`) so the interpreter exists on %s, %s" % (host, RERUN)
                    if "does not exist" in err
                    else "run the interpreter by hand on %s to see why, %s" % (host, RERUN),
                    "no_listener",
                )
            )
    by_key = {(e["host"], e["address"], e["port"]): e for e in endpoints}
    for peer in sorted(connected):
        for r in connected[peer] or []:
            key = (r.get("host"), r.get("address"), r.get("port"))
            e = by_key.get(key)
            if e is None or key in broken or r.get("result") == "ok":
                continue
            problems.append(_connect_problem(peer, r, e, listened, timeout))
    problems += _launchd_problems(launched or {}, connected, by_key, broken, timeout)
    return {
        "problems": problems,
        "alf": alf_by_host,
        "checked": ["%s %s:%d" % (e["host"], e["address"], e["port"]) for e in endpoints],
        "message": report(problems, alf_by_host, len(endpoints)),
    }


def report(problems, alf_by_host, checked):
    """One text: the verdict, each problem with its fix, and every Mac's firewall state."""
    firewall = "application firewall: " + ", ".join("%s %s" % (h, s) for h, s in sorted(alf_by_host.items()))
    if not problems:
        return "port check: %d port(s) reachable from every Mac that connects to them; %s" % (checked, firewall)
    lines = ["port check: %d problem(s) with the ports MLX uses; %s" % (len(problems), firewall)]
    lines += ["- %s -> fix: %s" % (p["msg"], p["fix"]) for p in problems]
    return "\n".join(lines)
