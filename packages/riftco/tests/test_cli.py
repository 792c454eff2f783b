from importlib.metadata import EntryPoint

import pytest

import riftco.cli as cli


def fake_entry_points(extra):
    original = cli.entry_points

    def patched(*, group):
        return list(original(group=group)) + [ep for ep in extra if ep.group == group]

    return patched


def good(argv):
    """Say hello and echo the arguments."""
    print("hello", *argv)
    return 3


def test_help_lists_installed_commands(capsys):
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "backends" in out and "List every backend" in out
    assert "demo" in out and "main job" in out


def test_no_arguments_prints_usage_and_fails(capsys):
    assert cli.main([]) == 2
    assert "usage: riftco COMMAND" in capsys.readouterr().out


def test_dispatch_passes_arguments_and_exit_status(monkeypatch, capsys):
    ep = EntryPoint("hello", "test_cli:good", "riftco.commands")
    monkeypatch.setattr(cli, "entry_points", fake_entry_points([ep]))
    monkeypatch.syspath_prepend(__file__.rsplit("/", 1)[0])
    assert cli.main(["hello", "a", "b"]) == 3
    assert "hello a b" in capsys.readouterr().out


def test_broken_contribution_is_reported_not_fatal(monkeypatch, capsys):
    broken = EntryPoint("broken", "riftco_missing_module:main", "riftco.commands")
    monkeypatch.setattr(cli, "entry_points", fake_entry_points([broken]))
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "broken" in out and "unavailable" in out and "ModuleNotFoundError" in out
    assert "backends" in out
    assert cli.main(["broken"]) == 1
    assert "failed to load" in capsys.readouterr().err


def test_unknown_command(capsys):
    assert cli.main(["nope"]) == 2
    assert "unknown command 'nope'" in capsys.readouterr().err


def test_demo_runs_the_main_job(tmp_path, capsys):
    assert cli.main(["demo", "--quick", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "unigram baseline validation loss" in out and "model validation loss" in out
    assert "[3/3] riftco generate" in out and "done in" in out
    assert (tmp_path / "base.rift").exists() and (tmp_path / "chat.rift").exists()
    samples = (tmp_path / "samples.txt").read_text(encoding="utf-8")
    assert samples.startswith('base.rift continues a text:\nThe "for" statement')
    assert "chat.rift answers 'Explain the while statement.':" in samples
    reply = samples.split("statement.':\n", 1)[1].rstrip("\n")
    assert reply in out  # the reply printed is the one saved
    for stage in ("pretraining", "post_training"):  # the umbrella installs matplotlib
        assert (tmp_path / f"{stage}-loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_demo_precision_reaches_both_stages():
    from riftco.cli.demo import _options

    for precision in ("f32", "bf16"):
        pretraining, post_training = _options(0, True, precision)
        assert pretraining.training.precision == post_training.training.precision == precision
    assert _options(0, False)[0].training.precision == "f32"


@pytest.mark.parametrize("command", ["backends", "demo"])
def test_subcommand_help(command, capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main([command, "--help"])
    assert stop.value.code == 0
    assert f"riftco {command}" in capsys.readouterr().out
