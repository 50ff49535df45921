#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: mlx-cluster contributors
# MIT License

from __future__ import annotations

DOCUMENTATION = r"""
module: model_manifest
short_description: List a model directory (sizes, sha256 of the weight files) and compare it with the source
description:
  - Walks O(path) and returns every file with its size and modification time (whole seconds),
    relative to O(path); with O(sha256=true) also the sha256 of the weight files (C(*.safetensors), C(*.gguf),
    C(*.npz), C(*.bin)).
  - The files the copy keeps for itself (the record C(.mlx-cluster-sha256.json), files still
    arriving as C(.<name>.mlxpart)) are not listed.
  - Symbolic links are followed, as the sync copies them (a Hugging Face cache snapshot is links
    to blobs); a link to nothing is skipped with a warning.
  - With O(expected) (the source's RV(files)), compares this copy with it and returns every
    missing file, wrong size, different sha256 and extra weight file in RV(problems), naming
    this host and the file (the modification time is not compared; M(model_rsync)'s O(wait_for)
    reads it). Finding problems is not a failure of the module; the caller decides.
  - Read-only (but for O(make_parent)); a missing directory is RV(exists=false), not a failure.
    Runs the same in check mode.
version_added: "0.1.0"
extends_documentation_fragment:
  - mlx.cluster.attributes
options:
  path:
    description: The model directory.
    type: path
    required: true
  sha256:
    description: Also hash the weight files (reads them whole, about a minute per 100 GB on an SSD).
    type: bool
    default: false
  sha256_all:
    description:
      - Hash every file, not only the weight files (what model_sync's own transport needs to
        verify each file as it arrives). Hashes come from the directory's record of verified files
        (C(.mlx-cluster-sha256.json)) when a file's size and modification time match it, so a
        re-run reads no weights; the others are read and, with O(record=true), recorded.
    type: bool
    default: false
  record:
    description: With O(sha256_all), write the hashes read into the directory's record (not in a dry run).
    type: bool
    default: false
  record_file:
    description:
      - Where the record of verified files is kept. Empty = in O(path) (C(.mlx-cluster-sha256.json)).
      - The model_sync role keeps the source's record out of the source directory (under the
        artifacts directory on the controller, under the toolkit's directory on rank 0), so a
        model the user owns, such as a Hugging Face cache snapshot, is never written to. A
        record that does not exist there yet starts from one left in O(path) by an earlier
        version (read, not written); a record naming another directory is not taken.
    type: path
    default: ""
  rehash:
    description: With O(sha256_all), read every file whatever its record says (and, with O(record), record it anew).
    type: bool
    default: false
  expected:
    description: The source's RV(files), to compare this copy with.
    type: dict
  label:
    description: Name of this host in RV(problems) and messages. Empty = its host name.
    type: str
    default: ""
  weights:
    description:
      - Also read the header of every top-level C(*.safetensors) file (a few KB each) and return
        how the weights divide into layers (RV(weights)), which the memory check needs to know
        how many bytes each rank will hold.
    type: bool
    default: false
  safe_dest:
    description:
      - Fail unless O(path) is a safe directory to sync into (the rules of M(model_rsync), with this
        user's home), that is not C(/), not the home directory or above it, at least two levels below it.
    type: bool
    default: false
  make_parent:
    description:
      - "Create the directory that holds O(path), and its missing parents, when it does not exist (the
        mode this user's umask gives, with C(u+rwx)), so the copy has somewhere to go; reported as a
        change. In check mode nothing is made and RV(changed) says it would be. O(path) is checked by
        the rules of O(safe_dest) first."
    type: bool
    default: false
author:
  - mlx-cluster contributors
"""

EXAMPLES = r"""
- name: Measure the source on the controller
  model_manifest:
    path: /data/models/Qwen3-4B-4bit
    sha256: true
  delegate_to: localhost
  run_once: true
  register: source

- name: Compare every Mac's copy with it
  model_manifest:
    path: /Users/admin/mlx-cluster/models/Qwen3-4B-4bit
    sha256: true
    expected: "{{ source.files }}"
    label: "{{ inventory_hostname }}"
"""

RETURN = r"""
exists:
  description: Whether O(path) is a directory.
  returned: always
  type: bool
  sample: true
files:
  description:
    - Every file, by path relative to O(path), with its size and modification time (C(mtime), whole
      seconds since the epoch); C(sha256) only for weight files with O(sha256).
  returned: always
  type: dict
  sample: {"config.json": {"size": 912, "mtime": 1764130000},
           "model.safetensors": {"size": 2264924160, "mtime": 1764130000, "sha256": "9f2c..."}}
total_bytes:
  description: Sum of the file sizes.
  returned: always
  type: int
  sample: 2264925072
home:
  description: Home directory of the user the module runs as (for the destination safety rules of M(model_rsync)).
  returned: always
  type: str
  sample: /Users/admin
weights:
  description:
    - With O(weights), the model's tensors by layer, from the safetensors headers (tensors named
      C(layers.<i>.) belong to layer i, the rest is shared by every pipeline stage, as mlx-lm
      shards them); C(index) tells whether C(model.safetensors.index.json) exists (mlx-lm's
      pipeline mode needs it). Null without O(weights) or when the directory does not exist.
    - C(dims) holds the numbers of C(config.json) that decide how mlx-lm can split the model
      (layers, attention and key/value heads, head width, MLP widths, quantization group size),
      which the benchmark's split check needs; null when C(config.json) is missing or is not JSON
      (with a warning).
  returned: always
  type: dict
  sample: {"total_bytes": 2264924160, "shared_bytes": 311164928, "layer_bytes": [54263808, 54263808],
           "files": 1, "index": false,
           "dims": {"model_type": "qwen3", "layers": 36, "heads": 32, "kv_heads": 8, "head_dim": 128,
                    "intermediate_size": 9728, "moe_intermediate_size": null, "group_size": 64,
                    "latent_attention": false}}
problems:
  description: Differences from O(expected) (empty without it), each naming the host and the file.
  returned: always
  type: list
  elements: dict
  sample: [{"host": "m2", "file": "model.safetensors", "kind": "size", "expected": 2264924160,
            "got": 1048576, "msg": "m2: model.safetensors is 1048576 bytes, expected 2264924160 (as on the source)"}]
"""

import json
import os
import socket

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_copy import Hashes
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_parse import ParseError
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_rsync import check_dest, compare_manifests
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_rsync import walk as listing
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_weights import (
    CONFIG_FILE,
    INDEX_FILE,
    config_dims,
    header_length,
    layout,
    tensor_bytes,
)


def walk(module, root, with_sha, hashes=None):
    """mlx_rsync.walk, its warnings as the module's and a file it cannot read a failure."""
    try:
        files, warnings = listing(root, with_sha, hashes)
    except OSError as exc:
        module.fail_json(msg=f"cannot read {exc.filename or root}: {exc.strerror or exc}")
    for warning in warnings:
        module.warn(warning)
    return files


def read_weights(module, root, files, label):
    """The layout of the top-level *.safetensors files' tensors (mlx_weights.layout)."""
    tensors, count = {}, 0
    for rel in sorted(files):
        if "/" in rel or not rel.endswith(".safetensors"):
            continue
        full = os.path.join(root, rel)
        try:
            with open(full, "rb") as fh:
                header = fh.read(header_length(fh.read(8), rel))
            tensors.update(tensor_bytes(header, rel))
        except OSError as exc:
            module.fail_json(msg=f"cannot read {full} on {label}: {exc.strerror}")
        except ParseError as exc:
            module.fail_json(
                msg=f"{full} on {label}: {exc.message}. Fix: copy the model again "
                "(the file is damaged or not a safetensors file)"
            )
        count += 1
    return dict(layout(tensors), files=count, index=INDEX_FILE in files, dims=read_dims(module, root, files, label))


def read_dims(module, root, files, label):
    """config_dims of the model's config.json, or None (with a warning) when it cannot be read."""
    if CONFIG_FILE not in files:
        module.warn(f"{root} on {label} has no {CONFIG_FILE}: how the model splits is not checked")
        return None
    try:
        with open(os.path.join(root, CONFIG_FILE), encoding="utf-8") as fh:
            return config_dims(json.load(fh))
    except (OSError, ValueError) as exc:
        module.warn(
            f"{os.path.join(root, CONFIG_FILE)} on {label} cannot be read as JSON ({exc}): "
            "how the model splits is not checked"
        )
        return None


def make_parent(module, path, label):
    """Create the directory holding path unless it is one (the umask's mode, with u+rwx, as
    ansible.builtin.file `mode: u+rwx` made it); -> whether it was (would be) made."""
    parent = os.path.dirname(path.rstrip("/")) or "/"
    if os.path.isdir(parent):
        return False
    if module.check_mode:
        return True
    try:
        os.makedirs(parent)
        os.chmod(parent, os.stat(parent).st_mode | 0o700)
    except OSError as exc:
        module.fail_json(
            msg=f"cannot create {parent} on {label}: {exc.strerror or exc}. "
            "Fix: make it writable for this user, or set model_sync_dest elsewhere"
        )
    return True


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            sha256=dict(type="bool", default=False),
            expected=dict(type="dict"),
            label=dict(type="str", default=""),
            safe_dest=dict(type="bool", default=False),
            weights=dict(type="bool", default=False),
            sha256_all=dict(type="bool", default=False),
            record=dict(type="bool", default=False),
            record_file=dict(type="path", default=""),
            rehash=dict(type="bool", default=False),
            make_parent=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    path = module.params["path"]
    label = module.params["label"] or socket.gethostname()
    home = os.path.expanduser("~")
    if module.params["safe_dest"] or module.params["make_parent"]:
        problem = check_dest(path, home)
        if problem:
            module.fail_json(
                msg=f"refusing to sync the model into {path} on {label}: {problem}. "
                "Fix: set model_sync_dest to a dedicated directory"
            )
    if os.path.exists(path) and not os.path.isdir(path):
        module.fail_json(msg=f"{path} on {label} is not a directory: move it away, the model goes there")
    made = make_parent(module, path, label) if module.params["make_parent"] else False
    exists = os.path.isdir(path)
    record_file = module.params["record_file"] or None
    hashes = (
        Hashes(path, fresh=module.params["rehash"], path=record_file)
        if exists and module.params["sha256_all"]
        else None
    )
    files = walk(module, path, module.params["sha256"], hashes) if exists else {}
    if hashes is not None and module.params["record"] and not module.check_mode:
        try:
            hashes.save()
        except OSError as exc:  # a source the user cannot write to (a shared cache): read again next time
            module.warn(
                f"the hashes of {path} cannot be recorded in {hashes.path} ({exc.strerror}): "
                "the next run reads its files again"
            )
    expected = module.params["expected"]
    problems = compare_manifests(expected, {label: files if exists else None}) if expected is not None else []
    weights = read_weights(module, path, files, label) if exists and module.params["weights"] else None
    module.exit_json(
        changed=made,
        exists=exists,
        files=files,
        total_bytes=sum(e["size"] for e in files.values()),
        home=home,
        problems=problems,
        weights=weights,
    )


if __name__ == "__main__":
    main()
