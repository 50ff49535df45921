"""roles/ssh_trust: a cluster key with no directory to copy into is refused before anything is
read or written, naming the variable (the real ansible-playbook, on localhost, no Mac)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PLAY = """
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: mlx.cluster.ssh_trust
      vars:
        ssh_trust_sources: [localhost]
        ssh_trust_receive_dir: "{receive_dir}"
"""


def play(tmp_path, receive_dir):
    book = tmp_path / "play.yml"
    book.write_text(PLAY.format(receive_dir=receive_dir))
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_HOME=str(tmp_path / "ansible-home"),
        ANSIBLE_NOCOLOR="1",
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", str(book)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("receive_dir", ["", "models/tiny"], ids=["empty", "relative"])
def test_a_key_with_no_directory_is_refused_naming_the_variable(tmp_path, receive_dir):
    res = play(tmp_path, receive_dir)
    assert res.returncode != 0
    assert "ssh_trust_receive_dir must be the path" in res.stdout, res.stdout[-2000:]
    assert "Make or read the cluster key" not in res.stdout  # refused before the first module
