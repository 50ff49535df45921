"""CLI of the simulated Mac cluster.

    python -m tests.simcluster up      mesh4 [--state DIR] [--var KEY=VALUE ...]
    python -m tests.simcluster status  mesh4 [--state DIR] [--json]
    python -m tests.simcluster reboot  mesh4 HOST [--state DIR]
    python -m tests.simcluster down    mesh4 [--state DIR]
    python -m tests.simcluster cleanup [--dry-run]
    python -m tests.simcluster from-capture FILE [--name NAME] [--out DIR]

SPEC is a name from tests/simcluster/specs/ or a path; the state dir defaults to
/tmp/mlxsim/<spec name>. `cleanup` removes the namespaces (and processes) of clusters
whose state dir is gone (a harness that crashed and whose files were deleted).

`from-capture` starts nothing: from a capture (`ansible-playbook site.yml --tags capture`:
artifacts/capture-<time>.tar.gz) it writes DIR/NAME.yml, the spec of the cluster the capture
shows (a host per Mac, named by its placeholder mac1, mac2, ...; the cables the toolkit's own
planner finds in the Macs' replayed outputs), and the outputs as parser fixtures:
DIR/<mac>/<command words joined by _>.txt, DIR/<mac>/commands.json, DIR/<mac>/files/,
DIR/manifest.json. NAME defaults to the file's name without .tar.gz, DIR to
artifacts/from-capture/NAME. What a spec cannot say as the Macs are is listed at the top of the
spec and printed (tests/simcluster/capture.py).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

import yaml

from .cluster import SimCluster, SimError, cleanup
from .spec import SpecError


def _vars(pairs):
    out = {}
    for p in pairs or []:
        key, sep, value = p.partition("=")
        if not sep or not key:
            raise SystemExit(f"--var {p!r}: expected KEY=VALUE")
        out[key] = yaml.safe_load(value) if value else ""
    return out


def _print_status(st):
    print(f"cluster {st['name']}: {st['status']} (state {st['state_dir']}, namespaces {st['prefix']}-*)")
    for name, h in st["hosts"].items():
        sshd = f"sshd {h['sshd_pid']}" if h["sshd_alive"] else "sshd DOWN"
        proc = f"pid {h['pid']}" if h["alive"] else "NOT RUNNING"
        print(f"  {name:<6} {h['mgmt_address']:<15} {proc:<12} {sshd}")
        for ifname, i in h["interfaces"].items():
            if ifname == "lo" or (not i["ipv4"] and not i["master"] and ifname != "en0" and not i["carrier"]):
                continue
            extra = f" master {i['master']}" if i["master"] else ""
            link = "up" if i["up"] else "down"
            carrier = "carrier" if i["carrier"] else "no-carrier"
            print(f"         {ifname:<8} {link:<4} {carrier:<10} {' '.join(i['ipv4']) or '-'}{extra}")
    if st["cables"]:
        print("  cables:")
    for cid, c in st["cables"].items():
        state = "plugged" if c["plugged"] else "UNPLUGGED"
        dock = f" via {c['dock']}" if c["dock"] else ""
        ends = " / ".join(f"{c[s]['host']}:{c[s]['iface']} {'up' if c[s]['carrier'] else 'down'}" for s in ("a", "b"))
        print(f"    {cid:<22} {c['speed']} Gb/s {state}{dock}: {ends}")


def _from_capture(args):
    """`from-capture`: the spec and the fixtures of a capture, written; 0, or 2 with the reason."""
    # the toolkit is imported as its collection (ansible_collections.mlx.cluster), as bench/ does
    collections = str(Path(__file__).resolve().parents[2] / "collections")
    if collections not in sys.path:
        sys.path.insert(0, collections)
    from .capture import CaptureError, derive, read_capture, spec_yaml, write_fixtures
    from .spec import parse_spec

    try:
        capture = read_capture(args.file)
        spec, notes = derive(capture, args.name)
        parsed = parse_spec(spec, source=f"the spec of {args.file}")
    except (CaptureError, SpecError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else Path("artifacts") / "from-capture" / spec["name"]
    written = write_fixtures(capture, out)
    spec_path = out / f"{spec['name']}.yml"
    spec_path.write_text(spec_yaml(spec, notes), encoding="utf-8")
    print(
        f"spec {spec_path}: {len(parsed.hosts)} Macs ({', '.join(h.name for h in parsed.hosts)}), "
        f"{len(parsed.cables)} cables"
    )
    print(f"fixtures: {len(written)} files under {out} (<mac>/*.txt: each command's stdout)")
    for note in notes:
        print(f"  note: {note}")
    print(f"bring it up with:  python -m tests.simcluster up {shlex.quote(str(spec_path))}")
    return 0


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m tests.simcluster", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("up", "down", "status", "reboot"):
        s = sub.add_parser(name)
        s.add_argument(
            "spec",
            nargs=None if name in ("up", "reboot") else "?",
            help="spec name (tests/simcluster/specs/NAME.yml) or path; down and status "
            "can leave it out when --state names a state dir",
        )
        if name == "reboot":
            s.add_argument("host")
        s.add_argument("--state", help="state directory (default /tmp/mlxsim/<spec name>)")
        if name == "up":
            s.add_argument(
                "--var",
                action="append",
                metavar="KEY=VALUE",
                help="extra group var for the generated inventory (YAML value)",
            )
            s.add_argument("--timeout", type=float, default=60.0)
        if name == "status":
            s.add_argument("--json", action="store_true")
    c = sub.add_parser("cleanup")
    c.add_argument("--dry-run", action="store_true")
    f = sub.add_parser("from-capture", help="a spec and parser fixtures from a capture (--tags capture)")
    f.add_argument("file", help="the capture: artifacts/capture-<time>.tar.gz")
    f.add_argument("--name", help="the spec's name (default: the file's name without .tar.gz)")
    f.add_argument("--out", help="where to write them (default: artifacts/from-capture/<name>)")
    args = p.parse_args(argv)
    if args.cmd == "from-capture":
        return _from_capture(args)

    try:
        if args.cmd == "cleanup":
            removed = cleanup(dry_run=args.dry_run)
            verb = "would remove" if args.dry_run else "removed"
            print(f"{verb} {len(removed)} namespace(s)" + (": " + " ".join(removed) if removed else ""))
            return 0
        if args.spec is None:
            if not args.state:
                raise SimError("name the spec or the state dir (--state)")
            cluster = SimCluster.from_state(args.state)
        else:
            cluster = SimCluster(args.spec, args.state)
        if args.cmd == "up":
            cluster.up(extra_vars=_vars(args.var), timeout=args.timeout)
            print(
                f"cluster {cluster.spec.name} is up in {cluster.up_seconds:.1f}s "
                f"({len(cluster.hosts)} Macs, {len(cluster.spec.cables)} cables)"
            )
            print(f"inventory:  {cluster.inventory_path}")
            print("run the playbooks with:")
            print(f"  ansible-playbook -i {shlex.quote(str(cluster.inventory_path))} site.yml")
            print(f"reach a Mac with:  ssh -F {shlex.quote(str(cluster.harness_ssh_config_path))} {cluster.hosts[0]}")
            print(
                f"tear down with:    python -m tests.simcluster down {args.spec}"
                + (f" --state {shlex.quote(args.state)}" if args.state else "")
            )
            return 0
        if args.cmd == "down":
            left = cluster.down()
            if left:
                print(f"down, but these processes would not end: {left}", file=sys.stderr)
                return 1
            print(f"cluster {cluster.spec.name} is down (files kept in {cluster.state_dir})")
            return 0
        if args.cmd == "reboot":
            cluster.reboot(args.host)
            print(f"{args.host} rebooted")
            return 0
        if args.cmd == "status":
            st = cluster.status()
            if args.json:
                print(json.dumps(st, indent=2))
            else:
                _print_status(st)
            return 0 if st["status"] == "up" else 3
    except (SimError, SpecError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
