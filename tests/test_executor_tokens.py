"""Executor tokens on the command line (CLIENT_API_AND_EXECUTOR.md §B.2): issued once in Core's
format, kept only as a SHA-256, refused on a second issue, rotated and revoked at once."""
from __future__ import annotations

import hashlib
import re

from tests.helpers import row_count


def test_issue_prints_the_token_once_and_keeps_only_its_hash(cli, sql):
    code, out, err = cli("executors", "token", "issue", "desk-runner", "--targets", "desk-worker,ops",
                         "--description", "The desk's runner")
    assert code == 0, err
    token = out["token"]
    assert re.fullmatch(r"[0-9a-f]{32}", token)
    assert (out["name"], out["allowed_targets"], out["description"]) == (
        "desk-runner", ["desk-worker", "ops"], "The desk's runner")
    rows = sql("SELECT token_hash, token_last4, allowed_targets, enabled FROM bz_executor_tokens")
    assert rows == [(hashlib.sha256(token.encode()).hexdigest(), token[-4:], ["desk-worker", "ops"], True)]
    code, listed, _ = cli("executors", "token", "list")
    assert listed["tokens"][0]["token"] == "…" + token[-4:]
    assert token not in str(listed)


def test_a_second_issue_of_a_name_is_refused_and_changes_nothing(cli, sql):
    cli("executors", "token", "issue", "desk-runner", "--targets", "desk-worker")
    before = sql("SELECT token_hash, allowed_targets FROM bz_executor_tokens")
    code, _, err = cli("executors", "token", "issue", "desk-runner", "--targets", "*")
    assert code == 1
    assert err["error"] == "invalid_request"
    assert err["message"] == "An executor token named desk-runner exists: rotate it instead."
    assert sql("SELECT token_hash, allowed_targets FROM bz_executor_tokens") == before


def test_bad_names_and_targets_are_refused(cli, sql):
    for args in (["Desk", "--targets", "a1"], ["desk-runner", "--targets", ""],
                 ["desk-runner", "--targets", "a1,a1"], ["desk-runner", "--targets", "*,a1"]):
        code, _, err = cli("executors", "token", "issue", *args)
        assert (code, err["error"]) == (1, "invalid_request"), args
    assert row_count(sql, "bz_executor_tokens") == 0


def test_rotate_replaces_the_token_and_revoke_deletes_it(cli, sql):
    _, first, _ = cli("executors", "token", "issue", "desk-runner", "--targets", "*")
    code, rotated, err = cli("executors", "token", "rotate", "desk-runner")
    assert code == 0, err
    assert rotated["token"] != first["token"] and rotated["rotated"] is True
    assert sql("SELECT token_hash FROM bz_executor_tokens") == [
        (hashlib.sha256(rotated["token"].encode()).hexdigest(),)]
    code, out, err = cli("executors", "token", "revoke", "desk-runner")
    assert (code, out) == (0, {"ok": True, "name": "desk-runner", "revoked": True})
    assert row_count(sql, "bz_executor_tokens") == 0
    for verb in ("rotate", "revoke"):
        code, out, err = cli("executors", "token", verb, "desk-runner")
        assert (code, err["error"]) == (1, "not_found")


def test_executors_list_shows_online_within_two_minutes(cli, sql):
    sql("INSERT INTO bz_executors (executor_id, token_name, targets, capabilities, last_seen_at) VALUES "
        "('fresh', 'desk-runner', '{desk-worker}', '{\"runtime\": \"openclaw\"}', now() - interval '1 minute'),"
        "('stale', 'desk-runner', '{}', NULL, now() - interval '3 minutes')")
    code, out, err = cli("executors", "list")
    assert code == 0, err
    assert [(e["executor_id"], e["online"], e["targets"], e["capabilities"]) for e in out["executors"]] == [
        ("fresh", True, ["desk-worker"], {"runtime": "openclaw"}), ("stale", False, [], None)]


def test_command_line_changes_are_in_the_configuration_change_log_without_the_token(cli, sql):
    _, issued, _ = cli("executors", "token", "issue", "desk-runner", "--targets", "*")
    _, rotated, _ = cli("executors", "token", "rotate", "desk-runner")
    cli("executors", "token", "revoke", "desk-runner")
    cli("executors", "token", "revoke", "desk-runner")  # refused: not recorded
    rows = sql("SELECT actor, method, path FROM bz_config_audit ORDER BY id")
    assert [(method, path) for _, method, path in rows] == [
        ("ISSUE", "executor-tokens/desk-runner"), ("ROTATE", "executor-tokens/desk-runner"),
        ("REVOKE", "executor-tokens/desk-runner")]
    assert all(actor.startswith("cli:") for actor, _, _ in rows)
    everything = str(sql("SELECT * FROM bz_config_audit"))
    assert issued["token"] not in everything and rotated["token"] not in everything
