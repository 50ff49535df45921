"""module_utils/mlx_trust.py: the marked authorized_keys block as blockinfile writes it, and
host key lines."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_trust import (
    MARKER as DEFAULT_MARKER,
)
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_trust import (
    block_keys,
    host_key_lines,
    marker_lines,
    split_block,
    with_block,
)

MARKER = "# {mark} mlx-cluster: keys of the Macs that copy to this one (ssh_trust_state=absent removes it)"
BEGIN, END = marker_lines(MARKER)

# what ansible.builtin.blockinfile (create: true, the role's marker) wrote into a user's file
WRITTEN_BY_BLOCKINFILE = (
    "ssh-ed25519 AAAAuser laptop\n"
    f"{BEGIN}\n"
    "ssh-ed25519 AAAAm1 mlx-cluster m1\n"
    "ssh-ed25519 AAAAm2 mlx-cluster m2\n"
    f"{END}\n"
    "ssh-rsa AAAAother backup\n"
)


def test_the_block_blockinfile_wrote_is_found_and_replaced_in_place():
    before, block, after = split_block(WRITTEN_BY_BLOCKINFILE, MARKER)
    assert before == ["ssh-ed25519 AAAAuser laptop"] and after == ["ssh-rsa AAAAother backup"]
    assert block == ["ssh-ed25519 AAAAm1 mlx-cluster m1", "ssh-ed25519 AAAAm2 mlx-cluster m2"]
    new = with_block(WRITTEN_BY_BLOCKINFILE, MARKER, ["ssh-ed25519 AAAAm3 mlx-cluster m3"])
    assert new == (
        f"ssh-ed25519 AAAAuser laptop\n{BEGIN}\nssh-ed25519 AAAAm3 mlx-cluster m3\n{END}\nssh-rsa AAAAother backup\n"
    )


@pytest.mark.parametrize(
    "text",
    [
        None,
        "",
        "ssh-ed25519 AAAAuser laptop",
        "ssh-ed25519 AAAAuser laptop\n",
        f"{BEGIN}\nssh-ed25519 AAAAx\n",
    ],  # a BEGIN with no END is no block
    ids=["no file", "empty", "no final newline", "one key", "begin only"],
)
def test_without_a_block_it_is_appended_and_the_rest_kept(text):
    assert split_block(text, MARKER)[1] is None
    new = with_block(text, MARKER, ["ssh-ed25519 AAAAm1 mlx-cluster m1"])
    assert new.endswith(f"{BEGIN}\nssh-ed25519 AAAAm1 mlx-cluster m1\n{END}\n")
    assert new.startswith(text.rstrip("\n") + "\n" if text else BEGIN)


@given(
    st.lists(
        st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp")), max_size=30).filter(
            lambda s: s not in (BEGIN, END)
        ),
        max_size=5,
    ),
    st.lists(st.from_regex(r"ssh-ed25519 [A-Za-z0-9+/]{4,20}", fullmatch=True), max_size=4),
)
def test_writing_then_reading_gives_the_keys_and_keeps_every_other_line(others, keys):
    text = "".join(line + "\n" for line in others)
    new = with_block(text, MARKER, keys)
    before, block, after = split_block(new, MARKER)
    assert block == keys and before + after == [ln for ln in text.splitlines()]
    assert with_block(new, MARKER, keys) == new  # written again: the same file


def test_a_marker_without_its_place_for_begin_and_end_is_refused():
    with pytest.raises(ValueError, match="mark"):
        marker_lines("# mlx-cluster")


def test_host_key_lines_drop_the_comment_and_empty_files():
    assert host_key_lines(["ssh-ed25519 AAAAC3Nz root@m1\n", "", "garbage\n", "ecdsa-sha2-nistp256 AAAAE2Vj\n"]) == [
        "ssh-ed25519 AAAAC3Nz",
        "ecdsa-sha2-nistp256 AAAAE2Vj",
    ]


def test_the_default_marker_is_the_one_written_here():
    assert DEFAULT_MARKER == MARKER


def test_block_keys_counts_the_keys_of_the_block_alone():
    assert block_keys(WRITTEN_BY_BLOCKINFILE) == 2
    assert block_keys("ssh-ed25519 AAAAuser laptop\n") == 0  # no block: the user's own keys do not count
    assert block_keys(f"{BEGIN}\n# a comment\n\n{END}\n") == 0
    assert block_keys(None) == 0
