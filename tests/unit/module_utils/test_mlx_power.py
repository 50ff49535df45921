"""plugins/module_utils/mlx_power.py: `pmset -g custom`, the AC plan, the SoftwareUpdate keys."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_power import (
    AC,
    BATTERY,
    DEFAULT_SETTINGS,
    SETTINGS,
    ParseError,
    check_settings,
    parse_defaults_domain,
    parse_pmset_custom,
    plan_power,
    pmset_set_argv,
    settings_text,
    updates_facts,
)

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    "fixture, sources, ac, battery",
    [
        pytest.param(
            "pmset_g_custom_mini_never_sleeps.txt",
            [AC],
            {
                "sleep": 0,
                "disksleep": 10,
                "displaysleep": 0,
                "autorestart": 1,
                "Sleep On Power Button": 1,
                "autorestartatconnect": 0,
            },
            None,
            id="mac-mini",
        ),
        pytest.param(
            "pmset_g_custom_macbook_air.txt",
            [BATTERY, AC],
            {"sleep": 1, "displaysleep": 30, "womp": 1, "hibernatefile": "/var/vm/sleepimage"},
            {"sleep": 1, "displaysleep": 2, "womp": 0, "lessbright": 1},
            id="macbook-air",
        ),
        pytest.param(
            "pmset_g_custom_macbook_pro_powermode.txt",
            [BATTERY, AC],
            {"sleep": 0, "powermode": 0, "SleepServices": 0},
            {"powermode": 0, "standby": 1},
            id="macbook-pro-powermode",
        ),
        pytest.param(
            "pmset_g_custom_macbook_pro_intel.txt",
            [BATTERY, AC],
            {"highstandbythreshold": 50, "standbydelayhigh": 86400, "sleep": 1},  # a name of 20 columns
            {"lowpowermode": 1, "acwake": 0},
            id="laptop-20-column-name",
        ),
    ],
)
def test_parse_pmset_custom(read_fixture, fixture, sources, ac, battery):
    parsed = parse_pmset_custom(read_fixture(fixture))
    assert list(parsed) == sources
    assert {k: parsed[AC][k] for k in ac} == ac
    if battery:
        assert {k: parsed[BATTERY][k] for k in battery} == battery
    # a laptop has no autorestart on either source; a desktop has it on AC
    assert ("autorestart" in parsed[AC]) == (BATTERY not in parsed)


def test_parse_pmset_custom_with_a_ups_section():
    parsed = parse_pmset_custom("AC Power:\n displaysleep         10\nUPS Power:\n displaysleep         0\n")
    assert parsed == {"AC Power": {"displaysleep": 10}, "UPS Power": {"displaysleep": 0}}


@pytest.mark.parametrize(
    "text, says",
    [
        ("", "no power source"),
        ("pmset: command not found\n", "not under a power source"),
        (" sleep                1\nAC Power:\n", "not under a power source"),
        ("AC Power:\n 1\n", "no value"),
    ],
)
def test_unreadable_output_names_the_command(text, says):
    with pytest.raises(ParseError) as info:
        parse_pmset_custom(text)
    assert info.value.command == "pmset -g custom"
    assert says in info.value.message


def test_a_desktop_at_macos_defaults_gets_three_changes_in_one_pmset_run(read_fixture):
    text = (
        read_fixture("pmset_g_custom_mini_never_sleeps.txt")
        .replace(" sleep                0", " sleep                1")
        .replace(" autorestart          1", " autorestart          0")
    )
    plan = plan_power(parse_pmset_custom(text), DEFAULT_SETTINGS)
    assert plan["changes"] == {
        "sleep": {"before": 1, "after": 0},
        "disksleep": {"before": 10, "after": 0},
        "autorestart": {"before": 0, "after": 1},
    }
    assert plan["unsupported"] == []
    assert pmset_set_argv(plan["changes"]) == ["pmset", "-c", "sleep", "0", "disksleep", "0", "autorestart", "1"]


def test_a_desktop_already_right_changes_nothing(read_fixture):
    plan = plan_power(
        parse_pmset_custom(read_fixture("pmset_g_custom_mini_never_sleeps.txt")),
        {"sleep": 0, "autorestart": 1, "displaysleep": 0},
    )
    assert plan["changes"] == {} and plan["unsupported"] == []
    assert plan["current"] == {"sleep": 0, "autorestart": 1, "displaysleep": 0}


def test_a_laptop_changes_only_ac_and_has_no_autorestart(read_fixture):
    sources = parse_pmset_custom(read_fixture("pmset_g_custom_macbook_air.txt"))
    plan = plan_power(sources, DEFAULT_SETTINGS)
    assert plan["source"] == AC
    assert plan["changes"] == {"sleep": {"before": 1, "after": 0}, "disksleep": {"before": 10, "after": 0}}
    assert plan["unsupported"] == ["autorestart"]
    assert pmset_set_argv(plan["changes"])[:2] == ["pmset", "-c"]  # never -a: battery settings stay


def test_no_ac_section_is_an_error():
    with pytest.raises(ValueError, match="lists no AC Power settings"):
        plan_power({"UPS Power": {"sleep": 1}}, {"sleep": 0})


@pytest.mark.parametrize(
    "desired, says",
    [
        ({"hibernatemode": 0}, "'hibernatemode' is not a pmset setting"),
        ({"sleep": -1}, "minutes from 0"),
        ({"sleep": "never"}, "minutes from 0"),
        ({"autorestart": -1}, "0 or 1"),
        ([("sleep", 0)], "must be a mapping"),
    ],
)
def test_bad_settings_are_named(desired, says):
    with pytest.raises(ValueError, match=says):
        check_settings(desired)


def test_on_off_settings_are_0_or_1_and_booleans_count():
    assert check_settings({"autorestart": True, "womp": 0, "sleep": "0"}) == {"autorestart": 1, "womp": 0, "sleep": 0}
    with pytest.raises(ValueError, match="powernap: 2 is not 0 or 1"):
        check_settings({"powernap": 2})


def test_settings_text_is_pmset_s_layout(read_fixture):
    text = settings_text({"sleep": 0, "disksleep": 10})
    assert text == "AC Power:\n sleep                0\n disksleep            10\n"
    assert parse_pmset_custom(text) == {AC: {"sleep": 0, "disksleep": 10}}


def test_the_role_default_is_the_module_default():
    defaults = yaml.safe_load((ROOT / "roles/power/defaults/main.yml").read_text())
    assert defaults["power_settings"] == DEFAULT_SETTINGS
    spec = yaml.safe_load((ROOT / "roles/power/meta/argument_specs.yml").read_text())
    assert spec["argument_specs"]["main"]["options"]["power_settings"]["default"] == DEFAULT_SETTINGS
    assert set(DEFAULT_SETTINGS) <= set(SETTINGS)


# `defaults read /Library/Preferences/com.apple.SoftwareUpdate` on a Mac (trimmed capture shape):
# nested values over deeper-indented lines, quoted keys, strings
DOMAIN = (
    0,
    """{
    AutomaticCheckEnabled = 1;
    AutomaticDownload = 0;
    LastAttemptSystemVersion = "26.2 (25C56)";
    LastRecommendedUpdatesAvailable = 0;
    RecommendedUpdates =     (
                {
            "Display Name" = "macOS Tahoe 26.3";
            "Display Version" = "26.3";
            AutomaticCheckEnabled = 0;
        }
    );
    "Odd Key" = 1;
}
""",
    "",
)
NO_DOMAIN = (
    1,
    "",
    "2026-09-23 12:35:20.603 defaults[69266:2988063] \nDomain /Library/Preferences/"
    "com.apple.SoftwareUpdate does not exist\n",
)


def test_updates_facts_reads_the_domain_once_and_a_missing_key_is_unknown():
    facts = updates_facts(DOMAIN)
    assert facts == {
        "automatic_check": True,
        "automatic_download": False,
        "install_macos_updates": None,
        "critical_update_install": None,
    }
    assert parse_defaults_domain(*DOMAIN) == {
        "AutomaticCheckEnabled": 1,
        "AutomaticDownload": 0,
        "LastRecommendedUpdatesAvailable": 0,
        "Odd Key": 1,
    }


@pytest.mark.parametrize(
    "result",
    [NO_DOMAIN, None, (0, "{\n    AutomaticallyInstallMacOSUpdates = maybe;\n}\n", "")],
    ids=["domain-never-written", "not-read", "garbage"],
)
def test_updates_unknown_is_not_off(result):
    facts = updates_facts(result)
    assert facts["install_macos_updates"] is None
