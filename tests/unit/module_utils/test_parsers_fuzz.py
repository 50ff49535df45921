"""Hostile input into every parser: the only outcomes are a result or ParseError.

Truncated captures, bytes that are not UTF-8, wrong types anywhere in the JSON, random JSON
and random text. A result must also be something Ansible can return: JSON-encodable as
UTF-8 (no lone surrogates).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.mlx.cluster.plugins.module_utils import mlx_host, mlx_rdma, mlx_tb
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_parse import ParseError
from tests.budget import examples

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
SP_FIXTURES = sorted(p.name for p in FIXTURES.glob("sp_*.json"))

FUZZ = settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])

PARSERS = {
    "parse_system_profiler": mlx_tb.parse_system_profiler,
    "parse_hardware_ports": mlx_tb.parse_hardware_ports,
    "parse_service_order": mlx_tb.parse_service_order,
    "parse_ifconfig": mlx_tb.parse_ifconfig,
    "parse_ibv_devices": mlx_rdma.parse_ibv_devices,
    "parse_ibv_devinfo": mlx_rdma.parse_ibv_devinfo,
    "parse_rdma_ctl": mlx_rdma.parse_rdma_ctl,
    "parse_sw_vers": mlx_host.parse_sw_vers,
    "parse_sysctl_hw": mlx_host.parse_sysctl_hw,
    "parse_route_default": mlx_host.parse_route_default,
}

# Which captures each text parser is fuzzed from.
TEXT_FIXTURES = {
    "parse_system_profiler": SP_FIXTURES,
    "parse_hardware_ports": [
        "networksetup_hwports_studio_with_bridge.txt",
        "networksetup_hwports_ultra_missing_tb6.txt",
    ],
    "parse_service_order": ["networksetup_order_bridge_enabled.txt", "networksetup_order_bridge_disabled.txt"],
    "parse_ifconfig": ["ifconfig_all_studio.txt", "ifconfig_bridge0_members.txt"],
    "parse_ibv_devices": ["ibv_devices_6.txt", "ibv_devices_header_only.txt"],
    "parse_ibv_devinfo": ["ibv_devinfo_v_ultra_6_mixed.txt", "ibv_devinfo_v_mini_active_ipv4.txt"],
    "parse_rdma_ctl": ["rdma_ctl_status_enabled.txt"],
    "parse_sw_vers": ["sw_vers_26_2.txt"],
    "parse_sysctl_hw": ["sysctl_hw_studio_m4max.txt"],
    "parse_route_default": ["route_get_default_en0.txt"],
}
CASES = [(parser, fixture) for parser, names in TEXT_FIXTURES.items() for fixture in names]


def outcome(parse, *args):
    """Run a parser; return its result, or None for ParseError. Anything else fails the test."""
    try:
        result = parse(*args)
    except ParseError as exc:
        assert isinstance(exc.command, str) and exc.command and isinstance(exc.message, str)
        return None
    json.dumps(result, ensure_ascii=False).encode("utf-8")  # returnable by a module
    return result


def raw(name):
    return (FIXTURES / name).read_bytes()


# ------------------------------------------------------------------------- any text


@pytest.mark.parametrize("name", sorted(PARSERS))
@FUZZ
@given(
    data=st.one_of(st.text(), st.binary(), st.text(alphabet=st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)))
)
def test_random_text_and_bytes(name, data):
    outcome(PARSERS[name], data)


@pytest.mark.parametrize("name", sorted(PARSERS))
@pytest.mark.parametrize(
    "value", [None, 0, 1.5, [], {}, ["a"], object()], ids=lambda v: type(v).__name__ if type(v) is object else repr(v)
)
def test_non_text_input_is_a_parse_error(name, value):
    with pytest.raises(ParseError):
        PARSERS[name](value)


# ---------------------------------------------------------------- mangled captures


@pytest.mark.parametrize("name, fixture", CASES)
@FUZZ
@given(cut=st.floats(min_value=0, max_value=1))
def test_truncated_capture(name, fixture, cut):
    data = raw(fixture)
    outcome(PARSERS[name], data[: int(len(data) * cut)])
    outcome(PARSERS[name], data[: int(len(data) * cut)].decode("utf-8", "surrogateescape"))


@pytest.mark.parametrize("name, fixture", CASES)
@FUZZ
@given(
    junk=st.lists(
        st.tuples(st.floats(min_value=0, max_value=1), st.binary(min_size=1, max_size=4)), min_size=1, max_size=5
    )
)
def test_capture_with_bytes_that_are_not_utf8(name, fixture, junk):
    data = bytearray(raw(fixture))
    for where, blob in junk:
        at = int(len(data) * where)
        data[at:at] = blob + b"\xff"
    outcome(PARSERS[name], bytes(data))
    outcome(PARSERS[name], bytes(data).decode("utf-8", "surrogateescape"))


@pytest.mark.parametrize("name, fixture", CASES)
@FUZZ
@given(
    edits=st.lists(
        st.tuples(st.sampled_from(["drop", "dup", "swap", "indent", "strip"]), st.floats(min_value=0, max_value=1)),
        min_size=1,
        max_size=6,
    )
)
def test_capture_with_lines_moved_about(name, fixture, edits):
    lines = raw(fixture).decode("utf-8").splitlines()
    for op, where in edits:
        if not lines:
            break
        i = min(int(len(lines) * where), len(lines) - 1)
        if op == "drop":
            del lines[i]
        elif op == "dup":
            lines.insert(i, lines[i])
        elif op == "swap":
            lines[i], lines[-1] = lines[-1], lines[i]
        elif op == "indent":
            lines[i] = "\t" + lines[i]
        else:
            lines[i] = lines[i].strip()
    outcome(PARSERS[name], "\n".join(lines))


# ---------------------------------------------------------- wrong types in the JSON

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "_items",
                    "_name",
                    "domain_uuid_key",
                    "receptacle_1_tag",
                    "receptacle_id_key",
                    "receptacle_status_key",
                    "current_speed_key",
                    "device_name_key",
                    "vendor_name_key",
                ]
            )
            | st.text(max_size=8),
            children,
            max_size=5,
        )
    ),
    max_leaves=20,
)


def _paths(node, path=()):
    yield path
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, path + (key,))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _paths(value, path + (i,))


def _replace(node, path, value):
    if not path:
        return value
    node[path[0]] = _replace(node[path[0]], path[1:], value)
    return node


@pytest.mark.parametrize("fixture", SP_FIXTURES)
@FUZZ
@given(data=st.data())
def test_wrong_type_anywhere_in_the_json(fixture, data):
    doc = json.loads(raw(fixture))
    for _ in range(data.draw(st.integers(1, 3))):
        paths = list(_paths(doc))
        path = paths[data.draw(st.integers(0, len(paths) - 1))]
        doc = _replace(doc, path, data.draw(json_values))
    outcome(mlx_tb.parse_system_profiler, json.dumps(doc))


@FUZZ
@given(buses=json_values, wrap=st.booleans())
def test_random_json(buses, wrap):
    doc = {"SPThunderboltDataType": buses} if wrap else buses
    outcome(mlx_tb.parse_system_profiler, json.dumps(doc))


@FUZZ
@given(items=st.lists(json_values, max_size=4), depth=st.integers(0, 60))
def test_deep_hub_chains(items, depth):
    node = {"_name": "Mac Studio", "domain_uuid_key": "AAAAAAAA-0000-4000-8000-000000000001"}
    for level in range(depth):
        node = {"_name": f"hub {level}", "_items": [node] + items}
    bus = {
        "_name": "thunderboltusb4_bus_0",
        "domain_uuid_key": "BBBBBBBB-0000-4000-8000-000000000002",
        "receptacle_1_tag": {
            "receptacle_id_key": "1",
            "receptacle_status_key": "receptacle_connected",
            "current_speed_key": "80 Gb/s",
        },
        "_items": [node],
    }
    result = outcome(mlx_tb.parse_system_profiler, json.dumps({"SPThunderboltDataType": [bus]}))
    assert result is not None


def test_json_nested_beyond_the_recursion_limit():
    with pytest.raises(ParseError):
        mlx_tb.parse_system_profiler("[" * 200000 + "]" * 200000)


# --------------------------------------------------------------- the assemblers


@FUZZ
@given(
    sp=st.sampled_from(SP_FIXTURES),
    cut=st.floats(min_value=0, max_value=1),
    bridge=st.one_of(st.none(), st.text(max_size=200)),
    order=st.one_of(st.none(), st.text(max_size=200)),
)
def test_thunderbolt_facts(sp, cut, bridge, order):
    hw = raw("networksetup_hwports_studio_with_bridge.txt").decode()
    outcome(mlx_tb.thunderbolt_facts, raw(sp).decode(), hw[: int(len(hw) * cut)], bridge, order)


@FUZZ
@given(
    devices=st.one_of(st.none(), st.text(max_size=200)),
    devinfo=st.one_of(st.none(), st.text(max_size=300)),
    ctl=st.one_of(st.none(), st.sampled_from(["enabled", "disabled"]), st.text(max_size=20)),
    cabled=st.lists(st.text(max_size=5), max_size=3),
)
def test_rdma_facts(devices, devinfo, ctl, cabled):
    result = outcome(mlx_rdma.rdma_facts, devices, devinfo, ctl, cabled)
    if result is not None:
        assert result["usable"] == (result["rdma_ctl"] != "disabled" and bool(result["devices"]))


# ------------------------------------------------- edge cases found by thinking, kept


def _sp_one_bus(receptacle_id):
    """system_profiler output: one connected bus whose link speed has 400 digits."""
    return json.dumps(
        {
            "SPThunderboltDataType": [
                {
                    "domain_uuid_key": "X",
                    "receptacle_1_tag": {
                        "receptacle_id_key": receptacle_id,
                        "current_speed_key": "1" * 400 + " Gb/s",
                        "receptacle_status_key": "receptacle_connected",
                    },
                }
            ]
        }
    )


class Refused:
    """The expected outcome of a parse that must raise ParseError naming `command`."""

    def __init__(self, command):
        self.command = command


_NO_MAC = {"model": None, "model_id": None, "name": None}
_DEVICE_ONLY = {
    "name": "rdma_en2",
    "transport": None,
    "link_layer": None,
    "port_state": None,
    "active_mtu": None,
    "gids": [],
}


# Each case and what the parser must make of it: a value, or Refused (ParseError naming the command).
# Numbers beyond small_int's 18 digits are no number: an optional field (mtu, port,
# active_mtu) becomes None, a required one (memsize) fails the parse.
@pytest.mark.parametrize(
    "name, text, expected",
    [
        pytest.param(
            "parse_ifconfig",
            "en0: flags=8863<UP> mtu " + "9" * 5000 + "\n",
            {
                "en0": {
                    "flags": ["UP"],
                    "up": True,
                    "mtu": None,
                    "ipv4": [],
                    "members": [],
                    "status": None,
                    "type": None,
                }
            },
            id="mtu-5000-digits",
        ),
        # "²".isdigit() but not isdecimal(): no number
        pytest.param(
            "parse_sysctl_hw", "\u00b2\nMac16,9\n16\n", Refused(mlx_host.SYSCTL_COMMAND), id="superscript-memsize"
        ),
        pytest.param(
            "parse_sysctl_hw",
            "9" * 5000 + "\nMac16,9\n16\n",
            Refused(mlx_host.SYSCTL_COMMAND),
            id="memsize-5000-digits",
        ),
        pytest.param(
            "parse_ibv_devinfo",
            "hca_id:\trdma_en2\n\t\tport:\t" + "1" * 5000 + "\n",
            [_DEVICE_ONLY],
            id="port-5000-digits",
        ),
        pytest.param(
            "parse_ibv_devinfo",
            "hca_id:\trdma_en2\n\t\t\tactive_mtu:\t" + "4" * 5000 + " (5)\n",
            [_DEVICE_ONLY],
            id="mtu-5000-digits-devinfo",
        ),
        # a receptacle that is no number: the port is skipped, with a warning
        pytest.param(
            "parse_system_profiler",
            _sp_one_bus("\u00b9"),
            {
                "mac": _NO_MAC,
                "ports": [],
                "warnings": [
                    "a Thunderbolt bus (domain X) has no usable receptacle_id_key ('\u00b9'); the port is skipped"
                ],
            },
            id="superscript-receptacle-and-infinite-speed",
        ),
        # a speed that overflows a float: connected, no link speed, with a warning
        pytest.param(
            "parse_system_profiler",
            _sp_one_bus("1"),
            {
                "mac": _NO_MAC,
                "ports": [
                    {
                        "receptacle": 1,
                        "bus": None,
                        "domain_uuid": "X",
                        "hardware_port": "Thunderbolt 1",
                        "status": "connected",
                        "speed_gbps": None,
                        "capability_gbps": None,
                        "link_class": None,
                        "peer": None,
                        "devices": [],
                    }
                ],
                "warnings": [
                    "receptacle 1 (a Thunderbolt bus): connected but no link speed in "
                    "current_speed_key '" + "1" * 56 + "..."
                ],
            },
            id="infinite-speed",
        ),
    ],
)
def test_edge_cases(name, text, expected):
    if isinstance(expected, Refused):
        with pytest.raises(ParseError) as caught:
            PARSERS[name](text)
        assert caught.value.command == expected.command
    else:
        assert outcome(PARSERS[name], text) == expected


def test_natural_sort_with_huge_numbers():
    names = "rdma_en" + "9" * 5000 + "\nrdma_en9\nrdma_en10\n"
    facts = outcome(mlx_rdma.rdma_facts, names, None)
    assert [d["name"][:9] for d in facts["devices"]] == ["rdma_en9", "rdma_en10", "rdma_en99"]
