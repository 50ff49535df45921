#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: mlx-cluster contributors
# MIT License

from __future__ import annotations

DOCUMENTATION = r"""
module: mlx_ssh_trust
short_description: One Mac's part of the SSH trust between the Macs, read and written in one run
description:
  - The role C(ssh_trust) runs it twice per Mac at most. First to read (and, on a Mac that copies to
    others, make the cluster key when it is missing) the public half of the cluster key, the Mac's
    public host keys and what the trust already holds there. Then, only where that differs from
    what the trust must be, to write the marked block of C(~/.ssh/authorized_keys) and the
    toolkit's known_hosts file.
  - The block is marked as M(ansible.builtin.blockinfile) marks it (C(# BEGIN ...) and C(# END ...)
    lines from O(marker)), so a block written by either is found and replaced, and
    C(blockinfile state=absent) removes it. The other lines of C(authorized_keys) are kept as
    they are.
  - Nothing is written outside the key's directory; the user's own C(known_hosts) is never read
    or written.
version_added: "0.3.0"
extends_documentation_fragment:
  - mlx.cluster.command_timeout
options:
  key:
    description: The cluster's private key (its public half is C(<key>.pub)); C(~) is this Mac's home.
    type: str
    default: "~/.ssh/mlx_cluster_ed25519"
  make_key:
    description: Make the key (ed25519, no passphrase, with C(ssh-keygen)) when it is missing.
    type: bool
    default: false
  comment:
    description: The new key's comment.
    type: str
    default: mlx-cluster
  host_key_dir:
    description: Where this Mac keeps its public host keys (C(ssh_host_*_key.pub)). None there fails the run.
    type: path
    default: /etc/ssh
  authorized_keys:
    description:
      - The public keys the marked block of C(~/.ssh/authorized_keys) must hold, one a line.
        Omitted (null) leaves the file alone.
    type: list
    elements: str
  marker:
    description: The marker lines of the block; C({mark}) becomes C(BEGIN) and C(END).
    type: str
    default: "# {mark} mlx-cluster: keys of the Macs that copy to this one (ssh_trust_state=absent removes it)"
  known_hosts:
    description: The whole content of the toolkit's known_hosts file. Omitted (null) leaves the file alone.
    type: str
  known_hosts_path:
    description: The toolkit's known_hosts file; C(~) is this Mac's home.
    type: str
    default: "~/.ssh/mlx_cluster_known_hosts"
  command_file:
    description:
      - Where the forced command of the cluster keys lives on this Mac (the script that lets a
        cluster key run rsync's receiving end into the model's directory and nothing else; see
        the C(command=) of the lines the role C(ssh_trust) writes). C(~) is this Mac's home.
      - Written when O(authorized_keys) holds a line that runs it and it differs; removed when
        O(authorized_keys) is empty. RV(command_file_ok) says whether it is in place.
    type: str
    default: "~/.ssh/mlx_cluster_receive_only"
attributes:
  check_mode:
    support: full
    description: Reports the key it would make and what it would write; makes and writes nothing.
  diff_mode:
    support: full
    description: Before and after of each file it writes.
author:
  - mlx-cluster contributors
"""

EXAMPLES = r"""
- name: Make (on the Macs that copy) or read the cluster key, and read the host keys
  mlx.cluster.mlx_ssh_trust:
    make_key: "{{ inventory_hostname in ssh_trust_sources }}"
    comment: "mlx-cluster {{ inventory_hostname }}"
  register: trust

- name: Let m1's cluster key log in here, and record the peers' host keys
  mlx.cluster.mlx_ssh_trust:
    authorized_keys: ["{{ hostvars['m1'].trust.public_key }}"]
    known_hosts: "m2,10.208.0.2 ssh-ed25519 AAAAC3Nza...\n"
"""

RETURN = r"""
public_key:
  description: >-
    The cluster key's public half (C(type base64 comment)), or null when there is none (or, in check mode, not yet).
  returned: always
  type: str
  sample: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE... mlx-cluster m1"
key_created:
  description: Whether the key was (in check mode, would be) made in this run.
  returned: always
  type: bool
  sample: false
host_keys:
  description: This Mac's public host keys, C(type base64), in file name order.
  returned: always
  type: list
  elements: str
  sample: ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIO..."]
authorized_keys:
  description: The keys the marked block holds after this run (in check mode, would hold); null when there is no block.
  returned: always
  type: list
  elements: str
  sample: ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE... mlx-cluster m1"]
known_hosts:
  description: >-
    The toolkit's known_hosts file's content after this run (in check mode, would be); null when it does not exist.
  returned: always
  type: str
  sample: "m2,10.208.0.2 ssh-ed25519 AAAAC3Nza...\n"
command_file_ok:
  description: >-
    Whether O(command_file) holds the forced command as this version of the toolkit writes it (after this run).
  returned: always
  type: bool
  sample: true
"""

import glob
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_files import FilesError, current, write
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_run import COMMAND_TIMEOUT_SPEC, Runner, module_run
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_trust import (
    MARKER,
    RECEIVE_ONLY,
    host_key_lines,
    marker_lines,
    split_block,
    with_block,
)


def read_text(module, path):
    """The file's text, None when it does not exist; a failure naming it otherwise."""
    data, _mode = current(path)
    if data is False:
        module.fail_json(msg=f"{path} exists and is not a regular file: move it away")
    return None if data is None else data.decode("utf-8", errors="surrogateescape")


def make_dir(module, path):
    if not os.path.isdir(path) and not module.check_mode:
        try:
            os.makedirs(path, 0o700)
            os.chmod(path, 0o700)
        except OSError as exc:
            module.fail_json(msg=f"cannot create {path}: {exc.strerror}")


def put(module, path, text, mode, diffs):
    """Write `text` to `path` when it differs; True when it did (or would)."""
    old = read_text(module, path)
    if old == text:
        return False
    diffs.append({"before_header": path, "after_header": path, "before": old or "", "after": text})
    if not module.check_mode:
        make_dir(module, os.path.dirname(path))
        try:
            write(path, text.encode("utf-8", errors="surrogateescape"), mode)
        except FilesError as exc:
            module.fail_json(msg=exc.msg)
    return True


def module_args():
    """The options DOCUMENTATION describes, as AnsibleModule takes them."""
    return dict(
        key=dict(type="str", default="~/.ssh/mlx_cluster_ed25519", no_log=False),
        make_key=dict(type="bool", default=False),
        comment=dict(type="str", default="mlx-cluster"),
        host_key_dir=dict(type="path", default="/etc/ssh"),
        authorized_keys=dict(type="list", elements="str", no_log=False),
        marker=dict(type="str", default=MARKER),
        known_hosts=dict(type="str"),
        known_hosts_path=dict(type="str", default="~/.ssh/mlx_cluster_known_hosts"),
        command_file=dict(type="str", default="~/.ssh/mlx_cluster_receive_only"),
        **COMMAND_TIMEOUT_SPEC,
    )


def read_host_keys(module, host_key_dir):
    """This Mac's public host keys in `host_key_dir`, in file name order; fails when there are none."""
    host_key_files = sorted(glob.glob(os.path.join(host_key_dir, "ssh_host_*_key.pub")))
    texts = []
    for path in host_key_files:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                texts.append(f.read())
        except OSError as exc:
            module.fail_json(msg=f"cannot read the host key {path}: {exc.strerror}")
    host_keys = host_key_lines(texts)
    if not host_keys:
        module.fail_json(
            msg=f"no ssh host key (ssh_host_*_key.pub) in {host_key_dir}: the other Macs could not "
            "check whom they reach. Fix: turn Remote Login on (System Settings > General > Sharing), "
            "which makes the host keys, or set ssh_trust_host_key_dir to where they are."
        )
    return host_keys


def ensure_key(module, key):
    """True when the cluster key is (in check mode, would be) made now: asked for and missing."""
    p = module.params
    if not (p["make_key"] and not os.path.exists(key)):
        return False
    if not module.check_mode:
        make_dir(module, os.path.dirname(key))
        argv = [
            module.get_bin_path("ssh-keygen", required=True),
            "-q",
            "-t",
            "ed25519",
            "-N",
            "",
            "-C",
            p["comment"],
            "-f",
            key,
        ]
        rc, out, err = module_run(module, Runner(p["command_timeout"]), argv)
        if rc != 0:
            module.fail_json(
                msg=f"ssh-keygen could not make the cluster key {key}: {(err or out).strip()}",
                rc=rc,
                cmd=argv,
                stderr=err,
            )
    return True


def sync_authorized_keys(module, authorized_path, diffs):
    """(changed, block): the marked block written as `authorized_keys` asks, and the keys it holds
    after (None when there is no block)."""
    p = module.params
    changed = False
    text = read_text(module, authorized_path)
    block = split_block(text, p["marker"])[1] if text is not None else None
    if p["authorized_keys"] is not None:
        wanted = [k.strip() for k in p["authorized_keys"] if k.strip()]
        if block != wanted:
            changed = put(module, authorized_path, with_block(text, p["marker"], wanted), 0o600, diffs)
        block = wanted
    return changed, block


def sync_command_file(module, command_file, block, diffs):
    """(changed, command_file_ok): the forced command written when a key of `block` runs it,
    removed when `authorized_keys` leaves no key."""
    changed = False
    command_file_ok = read_text(module, command_file) == RECEIVE_ONLY
    if block is not None and any("command=" in line for line in block) and not command_file_ok:
        changed = put(module, command_file, RECEIVE_ONLY, 0o600, diffs)
        command_file_ok = True
    elif module.params["authorized_keys"] is not None and not block and os.path.lexists(command_file):
        changed = True  # no key runs it any more
        diffs.append(
            {"before_header": command_file, "after_header": command_file, "before": "(the forced command)", "after": ""}
        )
        if not module.check_mode:
            try:
                os.unlink(command_file)
            except OSError as exc:
                module.fail_json(msg=f"cannot remove {command_file}: {exc.strerror}")
        command_file_ok = False
    return changed, command_file_ok


def main():
    module = AnsibleModule(argument_spec=module_args(), supports_check_mode=True)
    p = module.params
    key = os.path.expanduser(p["key"])
    known_hosts_path = os.path.expanduser(p["known_hosts_path"])
    command_file = os.path.expanduser(p["command_file"])
    authorized_path = os.path.expanduser("~/.ssh/authorized_keys")
    try:
        marker_lines(p["marker"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    host_keys = read_host_keys(module, p["host_key_dir"])

    diffs = []
    key_created = changed = ensure_key(module, key)
    public = read_text(module, key + ".pub")
    public_key = public.strip() if public and public.strip() else None
    block_changed, block = sync_authorized_keys(module, authorized_path, diffs)
    command_changed, command_file_ok = sync_command_file(module, command_file, block, diffs)
    changed |= block_changed | command_changed
    known_hosts = read_text(module, known_hosts_path)
    if p["known_hosts"] is not None:
        changed |= put(module, known_hosts_path, p["known_hosts"], 0o600, diffs)
        known_hosts = p["known_hosts"]

    result = dict(
        changed=changed,
        key_created=key_created,
        public_key=public_key,
        host_keys=host_keys,
        authorized_keys=block,
        known_hosts=known_hosts,
        command_file_ok=command_file_ok,
    )
    if module._diff and diffs:
        result["diff"] = diffs
    module.exit_json(**result)


if __name__ == "__main__":
    main()
