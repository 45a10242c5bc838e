"""The request limit kept in the database (admin_app/identity/rate_limit.py, sql/071): exact under
concurrency, a sliding window, refusals that write nothing, old rows swept a few at a time, and a
database without the table still limited (per process) instead of failing. The same limit
across two real hub processes is in test_several_hosts.py."""
from __future__ import annotations

import logging
import threading
import time

import pytest
from sqlalchemy.exc import IntegrityError

from admin_app.identity import rate_limit
from admin_app.identity.rate_limit import SharedWindowLimit
from tests.conftest import SQL_DIR
from tests.helpers import assert_error, row_count
from tests.test_several_hosts import authorization_body

AUTHORIZATIONS = "/agent-auth/v1/authorizations"


@pytest.fixture
def database(app):
    return app.extensions["bailing"].db


def hits_of(sql, limit: SharedWindowLimit, *parts: str) -> list:
    return sql("SELECT hits, xmin::text FROM bz_rate_limits WHERE key = %s", (limit.key(parts),))


def test_threads_on_one_key_never_pass_the_limit(database, sql):
    limit = SharedWindowLimit("test.threads", 5, 60)
    start = threading.Barrier(24)
    answers: list[bool] = []

    def hit(key: str) -> None:
        start.wait()
        answers.append(limit.allow(database, key))

    threads = [threading.Thread(target=hit, args=("shared" if i % 3 else "other",)) for i in range(24)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # 16 threads on "shared", 8 on "other": five admitted on each, not one more.
    assert answers.count(True) == 10
    assert [len(hits_of(sql, limit, key)[0][0]) for key in ("shared", "other")] == [5, 5]


def hit_into(answers: list[bool], limit: SharedWindowLimit, database) -> None:
    answers.append(limit.allow(database, "k"))


def test_several_rounds_of_threads_add_up_to_the_limit(database):
    limit = SharedWindowLimit("test.rounds", 7, 60)
    admitted = []
    for _ in range(3):
        round_answers: list[bool] = []
        threads = [threading.Thread(target=hit_into, args=(round_answers, limit, database)) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        admitted.append(round_answers.count(True))
    assert admitted == [4, 3, 0]


def test_the_window_slides(database):
    limit = SharedWindowLimit("test.window", 2, 3.0)
    assert limit.allow(database, "k")
    first = time.monotonic()  # after the first hit's transaction: its time is no later than this
    time.sleep(1.5)
    assert limit.allow(database, "k")
    assert not limit.allow(database, "k")
    time.sleep(max(0.0, first + 3.3 - time.monotonic()))
    # The first hit has left the window; the second has not (a fixed window would admit two).
    assert limit.allow(database, "k")
    assert not limit.allow(database, "k")


def test_a_refusal_writes_nothing(database, sql):
    limit = SharedWindowLimit("test.refusal", 2, 60)
    assert limit.allow(database, "client", "192.0.2.7") and limit.allow(database, "client", "192.0.2.7")
    before = hits_of(sql, limit, "client", "192.0.2.7")
    assert not limit.allow(database, "client", "192.0.2.7")
    assert hits_of(sql, limit, "client", "192.0.2.7") == before  # same hits, same row version
    assert limit.allow(database, "client", "192.0.2.8")  # another address has its own budget


def test_keys_are_bounded_and_hold_no_address(database, sql):
    limit = SharedWindowLimit("test.keys", 3, 60)
    assert limit.allow(database, "crm-demo", "2001:db8::1" + "f" * 500)
    (key,), = sql("SELECT key FROM bz_rate_limits")
    assert key.startswith("test.keys:") and len(key) < 60 and "2001" not in key
    assert limit.key(("a", "b")) != limit.key(("ab", None))  # parts are not simply joined


def test_expired_rows_are_swept_a_few_at_a_time(database, sql):
    sql("INSERT INTO bz_rate_limits (key, hits, expires_at) "
        "SELECT 'old:' || n, ARRAY[now() - interval '2 hours'], now() - interval '1 hour' "
        "FROM generate_series(1, %s) AS n", (rate_limit.SWEEP_ROWS + 10,))
    sql("INSERT INTO bz_rate_limits (key, hits, expires_at) VALUES ('live', ARRAY[now()], now() + interval '1 hour')")
    limit = SharedWindowLimit("test.sweep", 3, 60)
    assert limit.allow(database, "k")
    assert row_count(sql, "bz_rate_limits") == 10 + 2  # 50 swept; the live row and the new one stay
    assert limit.allow(database, "k")
    assert {k for (k,) in sql("SELECT key FROM bz_rate_limits")} == {"live", limit.key(("k",))}


def test_a_key_whose_window_passed_starts_again(database, sql):
    limit = SharedWindowLimit("test.restart", 1, 60)
    assert limit.allow(database, "k")
    assert not limit.allow(database, "k")
    sql("UPDATE bz_rate_limits SET hits = ARRAY[now() - interval '2 minutes'], "
        "expires_at = now() - interval '1 minute'")
    assert limit.allow(database, "k")  # swept, then counted afresh
    assert [len(hits) for hits, _ in hits_of(sql, limit, "k")] == [1]


def test_without_the_table_each_process_counts_on_its_own(database, sql, caplog):
    sql("DROP TABLE bz_rate_limits")
    limit = SharedWindowLimit("test.missing", 3, 60)
    with caplog.at_level(logging.WARNING, logger=rate_limit.__name__):
        answers = [limit.allow(database, "k") for _ in range(5)]
    assert answers == [True, True, True, False, False]
    warnings = [r.getMessage() for r in caplog.records if r.name == rate_limit.__name__]
    assert len(warnings) == 1 and "db upgrade" in warnings[0]  # said once, not on every hit
    # Once the migration has run, the database counts again (from nothing: the process's
    # counts were its own).
    sql((SQL_DIR / "071_shared_rate_limits.sql").read_text())
    assert limit.allow(database, "other") and len(hits_of(sql, limit, "other")) == 1


def test_other_database_errors_are_not_taken_for_a_missing_table(database, sql):
    sql("ALTER TABLE bz_rate_limits ADD CONSTRAINT no_rows CHECK (false) NOT VALID")
    limit = SharedWindowLimit("test.broken", 3, 60)
    with pytest.raises(IntegrityError, match="no_rows"):
        limit.allow(database, "k")


# ---------------------------------------------------------------- over HTTP

def test_an_unmigrated_table_still_limits_authorizations_without_a_500(server, configured, sql):
    sql("DROP TABLE bz_rate_limits")
    for _ in range(10):
        assert server.post(AUTHORIZATIONS, json=authorization_body()).status_code == 201
    before = row_count(sql, "bz_agent_authorizations")
    response = server.post(AUTHORIZATIONS, json=authorization_body())
    body = assert_error(response, 429, "rate_limited")
    assert response.headers["Retry-After"] == "60"
    assert set(body) == {"error", "message"} and "bz_rate_limits" not in response.text
    assert row_count(sql, "bz_agent_authorizations") == before
