"""What `bailing-admin --help` tells an operator: the hub's own options only, `run` said as what it
is (a development server to try the hub; gunicorn in production), and no reference to a document
the repository does not hold."""
from __future__ import annotations

import click
from click.testing import CliRunner

from admin_app import first_run
from admin_app.cli import main


def _help(*path: str) -> str:
    result = CliRunner().invoke(main, [*path, "--help"])
    assert result.exit_code == 0, (path, result.output)
    return result.output


def test_the_top_level_help_offers_the_hubs_options_only():
    text = _help()
    for generic in ("--env-file", "python-dotenv", "--app", "IMPORT", "--debug"):
        assert generic not in text
    assert "--version" in text and "BAILING_*" in text
    run_line = next(line for line in text.splitlines() if line.strip().startswith("run "))
    assert "try it" in run_line and "gunicorn" in run_line and "development server" not in run_line


def test_flasks_env_file_option_is_refused_and_no_dotenv_file_is_looked_for(tmp_path, monkeypatch):
    runner = CliRunner()
    refused = runner.invoke(main, ["--env-file", "hub.env", "--help"])
    assert refused.exit_code == 2 and "No such option '--env-file'" in refused.output
    (tmp_path / ".env").write_text("BAILING_DATABASE_URL=postgresql://elsewhere/other\n")
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(main, ["--help"])
    assert result.exit_code == 0
    # Flask would look for .env and, without python-dotenv, advise installing it on every command.
    assert "python-dotenv" not in result.output and "Tip" not in result.output


def test_run_says_it_is_for_trying_the_hub_and_names_the_production_command():
    text = _help("run")
    assert "development purposes only" not in text  # Flask's generic wording is replaced
    assert "to try it" in text and "never expose it" in text
    assert first_run.GUNICORN in text  # the command `init` prints and the README's Production uses
    assert "--port" in text and "--host" in text  # Flask's options stay


def _all_help_paths(group: click.Group, path: tuple[str, ...] = ()):
    for name, command in sorted(group.commands.items()):
        yield (*path, name)
        if isinstance(command, click.Group):
            yield from _all_help_paths(command, (*path, name))


def test_no_command_help_cites_a_document_outside_the_repository():
    paths = list(_all_help_paths(main))
    assert ("tasks", "control") in paths and ("run",) in paths  # the walk reaches every level
    cited = {" ".join(path) for path in paths if "TASK_CONTROL.md" in _help(*path)}
    assert cited == set()
    assert "docs/operations.md" in _help("tasks")
