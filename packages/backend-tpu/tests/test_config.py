"""Settings of the PJRT client, determinism and the disk cache, read from the
environment (no plugin loaded)."""

from __future__ import annotations

from pathlib import Path

import pytest

import riftco.tensor as rt
from riftco.backends.tpu import config


def test_options_are_a_json_object_of_typed_values():
    parsed = config.parse_options(
        '{"preallocate": false, "memory_fraction": 0.5, "visible_devices": [0, 2], '
        '"allocator": "platform", "node_id": 1}'
    )
    assert parsed == (
        ("preallocate", False),
        ("memory_fraction", 0.5),
        ("visible_devices", [0, 2]),
        ("allocator", "platform"),
        ("node_id", 1),
    )
    assert config.parse_options("  ") == ()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("preallocate=false", "expected a JSON object"),
        ("[1, 2]", "expected a JSON object of option names and values, found list"),
        ('{"visible_devices": [0, "1"]}', "list of integers, found [0, '1']"),
        ('{"visible_devices": [true]}', "list of integers"),
        ('{"x": {"a": 1}}', "x must be a boolean, integer"),
        ('{"x": null}', "found None"),
        ('{"memory_fraction": NaN}', "must be finite"),
    ],
)
def test_malformed_options_say_what_was_expected(text, message):
    with pytest.raises(rt.BackendUnavailable, match=config.OPTIONS_VAR) as caught:
        config.parse_options(text)
    assert message in str(caught.value)


def test_defaults_deterministic_and_cached_under_the_home():
    found = config.from_env({"HOME": "/home/u"})
    assert found == config.PjrtConfig(
        (), True, Path("/home/u/.cache/riftco/pjrt"), config.DEFAULT_CACHE_MAX_MB << 20
    )


def test_cache_location_and_switches():
    env = {"HOME": "/home/u", "XDG_CACHE_HOME": "/xdg"}
    assert config.from_env(env).cache_dir == Path("/xdg/riftco/pjrt")
    env["RIFTCO_CACHE_DIR"] = "/riftco"
    assert config.from_env(env).cache_dir == Path("/riftco/pjrt")
    env[config.CACHE_VAR] = "/elsewhere"
    assert config.from_env(env).cache_dir == Path("/elsewhere")
    for off in ("0", "off", "OFF", "none"):
        env[config.CACHE_VAR] = off
        assert config.from_env(env).cache_dir is None
    assert config.from_env({}).cache_dir is None  # no home, nothing named: no disk cache
    assert config.from_env({config.CACHE_MAX_VAR: "8"}).cache_max_bytes == 8 << 20
    for bad in ("0", "-1", "lots"):
        with pytest.raises(rt.BackendUnavailable, match="positive number of megabytes"):
            config.from_env({config.CACHE_MAX_VAR: bad})


def test_determinism_can_be_turned_off_and_nothing_else():
    assert not config.from_env({config.DETERMINISTIC_VAR: "0"}).deterministic
    assert config.from_env({config.DETERMINISTIC_VAR: "true"}).deterministic
    with pytest.raises(rt.BackendUnavailable, match="expected 1 or 0, found 'maybe'"):
        config.from_env({config.DETERMINISTIC_VAR: "maybe"})
