"""The configuration-change log as a producer of the tamper-evident log (issue 33's first slice):
each bz_config_audit row is a leaf appended in the transaction that writes the row, and
`bailing-admin evidence check` names the first row changed or removed behind the log's back."""
from __future__ import annotations

import json

from admin_app.config_audit.changes import leaf_data
from admin_app.evidence import merkle
from tests.conftest import governed_config
from tests.helpers import apply_config, cli_ok, cli_refused


def _rows_and_leaves(sql) -> tuple[list[dict], list[tuple]]:
    columns = ("id", "ts", "event", "actor", "method", "path", "detail", "object_kind", "object_key",
               "before_hash", "after_hash", "diff")
    stored = sql(f"SELECT {', '.join(columns)} FROM bz_config_audit ORDER BY id")
    rows = [dict(zip(columns, r, strict=True)) for r in stored]
    leaves = sql("SELECT idx, ref, leaf_hash FROM bz_evidence_leaves WHERE kind = 'config_change' ORDER BY idx")
    return rows, leaves


def _check(cli) -> tuple[int, dict]:
    code, out, _ = cli("evidence", "check")
    return code, out


def test_every_change_row_is_a_leaf_of_its_own_transaction(cli, business, sql, tmp_path):
    apply_config(cli, tmp_path, governed_config(business.url))
    apply_config(cli, tmp_path, governed_config(business.url, description="Renamed desk"))
    rows, leaves = _rows_and_leaves(sql)
    assert len(rows) >= 4 and len(leaves) == len(rows)
    assert [ref for _, ref, _ in leaves] == [f"bz_config_audit:{r['id']}" for r in rows]
    assert [bytes(h) for _, _, h in leaves] == [merkle.leaf_hash(leaf_data(r)) for r in rows]
    # Refused: no row, no leaf (the config apply's transaction holds both).
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"routes": [{"route_key": "Bad Key", "name": "x"}]}))
    cli_refused(cli("config", "apply", str(bad)), "invalid_request")
    assert _rows_and_leaves(sql) == (rows, leaves)


def test_evidence_check_names_a_change_row_edited_or_deleted_in_sql(cli, business, sql, tmp_path):
    apply_config(cli, tmp_path, governed_config(business.url))
    cli_ok(cli("evidence", "head"))
    assert _check(cli)[0] == 0
    rows, leaves = _rows_and_leaves(sql)
    second = rows[1]
    sql(f"UPDATE bz_config_audit SET actor = 'someone else' WHERE id = {second['id']}")
    code, report = _check(cli)
    assert (code, report["ok"], report["first_bad_leaf"]) == (1, False, leaves[1][0])
    assert f"bz_config_audit:{second['id']}: the row no longer matches its leaf" == report["problem"]
    sql(f"UPDATE bz_config_audit SET actor = '{second['actor']}' WHERE id = {second['id']}")
    assert _check(cli)[0] == 0
    first = rows[0]
    sql(f"DELETE FROM bz_config_audit WHERE id = {first['id']}")
    code, report = _check(cli)
    assert (code, report["first_bad_leaf"]) == (1, leaves[0][0])
    assert report["problem"] == f"bz_config_audit:{first['id']}: the row is gone"
