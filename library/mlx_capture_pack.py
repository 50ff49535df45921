#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: mlx-cluster contributors
# MIT License

from __future__ import annotations

DOCUMENTATION = r"""
module: mlx_capture_pack
short_description: Redact the Macs' captures and pack them into one file to send
description:
  - >-
    On the controller (C(delegate_to: localhost)), from what M(mlx.cluster.mlx_capture) read on
    every Mac. Every string of the capture (outputs, argv words, files) goes through one
    redaction (C(plugins/module_utils/mlx_capture.py) C(redact)): MAC addresses, UUIDs, serial
    numbers, host names (the inventory's, and the names the Macs give themselves) and user names
    become placeholders of the same shape, the same value the same placeholder everywhere in the
    capture.
  - >-
    Writes I(dest)C(/capture-<UTC time>.tar.gz) (mode 0600) holding C(capture/manifest.json)
    (the format, the toolkit's version, each Mac's macOS, build, model and mlx versions, how many
    values of each kind were redacted: counts, never the values) and C(capture/<mac>.json) per
    Mac. In check mode nothing is written; the path it would have is returned.
version_added: "0.3.0"
extends_documentation_fragment:
  - mlx.cluster.attributes
options:
  captures:
    description: "C({inventory name: mlx_capture's result}); a Mac that could not be read has a failed or empty result."
    type: dict
    required: true
  users:
    description: User names to redact besides those in home directories (the inventory's C(ansible_user)).
    type: list
    elements: str
    default: []
  dest:
    description: The directory to write the capture to (C(mlx_cluster_artifacts_dir)).
    type: path
    required: true
  toolkit:
    description: The toolkit's version, for the manifest.
    type: str
    default: unknown
  versions:
    description: "C({inventory name: {python, mlx, mlx_lm}}) as the env stage saved them (versions.json), when known."
    type: dict
    default: {}
"""

EXAMPLES = r"""
- name: Redact and pack the capture
  mlx.cluster.mlx_capture_pack:
    captures: "{{ dict(ansible_play_hosts | zip(ansible_play_hosts | map('extract', hostvars, 'capture_read'))) }}"
    users: [admin]
    dest: "{{ mlx_cluster_artifacts_dir }}"
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
path:
  description: The capture file written (or, in check mode, that would be).
  returned: always
  type: str
  sample: /home/me/mlx-cluster/inventory/mac_cluster/artifacts/capture-20261128-181500.tar.gz
names:
  description: Each inventory name's placeholder in the capture (for you; not in the file).
  returned: always
  type: dict
  sample: {"studio-a": "mac1", "studio-b": "mac2"}
redacted:
  description: How many distinct values of each kind were replaced.
  returned: always
  type: dict
  sample: {"mac_addresses": 14, "uuids": 8, "serial_numbers": 0, "host_names": 4, "user_names": 1}
unread:
  description: The Macs whose capture could not be read (unreachable, or the module failed).
  returned: always
  type: list
  elements: str
"""

import io
import json
import os
import tarfile
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_capture import FORMAT, redact
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_host import parse_sw_vers, parse_sysctl_hw
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_parse import ParseError


def _output(capture, argv):
    return next((c.get("stdout") for c in capture["commands"] if c.get("argv") == argv and c.get("rc") == 0), None)


def describe(capture, versions):
    """A Mac's line of the manifest, from its (redacted) capture."""
    out = {"macos": None, "build": None, "model": None}
    try:
        os_ = parse_sw_vers(_output(capture, ["sw_vers"]) or "")
        out.update(macos=os_.get("product_version"), build=os_.get("build_version"))
    except (ParseError, AttributeError, TypeError):
        pass
    try:
        out["model"] = parse_sysctl_hw(
            _output(capture, ["sysctl", "-n", "hw.memsize", "hw.model", "hw.ncpu"]) or ""
        ).get("model")
    except (ParseError, AttributeError, TypeError):
        pass
    out.update({k: (versions or {}).get(k) for k in ("python", "mlx", "mlx_lm")})
    return out


def pack(files):
    """{name in the archive: bytes} -> the .tar.gz's bytes (fixed times and owners)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name in sorted(files):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(files[name]), 0o600, 0
            tar.addfile(info, io.BytesIO(files[name]))
    return buf.getvalue()


def main():
    module = AnsibleModule(
        argument_spec=dict(
            captures=dict(type="dict", required=True),
            users=dict(type="list", elements="str", default=[]),
            dest=dict(type="path", required=True),
            toolkit=dict(type="str", default="unknown"),
            versions=dict(type="dict", default={}),
        ),
        supports_check_mode=True,
    )
    p = module.params
    read = {h: c for h, c in p["captures"].items() if isinstance(c, dict) and isinstance(c.get("commands"), list)}
    unread = sorted(set(p["captures"]) - set(read))
    if not read:
        module.fail_json(msg=f"no Mac could be read for the capture ({', '.join(unread) or 'none given'}): see above")
    users = set(p["users"]) | {c["user"] for c in read.values() if isinstance(c.get("user"), str)}
    macs, names, counts = redact(read, users=sorted(users))
    manifest = {
        "format": FORMAT,
        "toolkit": p["toolkit"],
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "macs": {names[h]: describe(macs[names[h]], p["versions"].get(h)) for h in sorted(read)},
        "unread": len(unread),
        "redacted": counts,
    }
    files = {"capture/manifest.json": json.dumps(manifest, indent=2, sort_keys=True).encode() + b"\n"}
    for mac, capture in macs.items():
        files[f"capture/{mac}.json"] = json.dumps(capture, indent=2, sort_keys=True).encode() + b"\n"
    path = os.path.join(p["dest"], time.strftime("capture-%Y%m%d-%H%M%S.tar.gz", time.gmtime()))
    if not module.check_mode:
        os.makedirs(p["dest"], mode=0o700, exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(pack(files))
        os.replace(tmp, path)
    module.exit_json(changed=not module.check_mode, path=path, names=names, redacted=counts, unread=unread)


if __name__ == "__main__":
    main()
