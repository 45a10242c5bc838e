"""The pure rules of task control (admin_app/tasks/rules.py) against TASK_CONTROL.md §2.4, §3, §4 and
the unit cases of §13.1 (items 1-9; item 10, reservation input, is not this module's).

Covered, table by table: the formats of §3.1 (UUIDs, digests, workspaces, conversation ids, tool
names, task texts counted in UTF-16 code units, integers as JavaScript reads them, deadlines); the
policy (§2.4); member normalisation; the canonical hash and the three test vectors of §3.3-§3.5;
the create and control bodies and their idempotency hashes (§3.6); the dispatchability order,
expiry, the effective state, the transition table (§4) and the write capacity test (§2.5).
No database, no clock: every `now` is passed in.
"""
from __future__ import annotations

import copy
import hashlib
import json
import math
import sys
import tempfile
import unicodedata
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.configuration import set_hypothesis_home_dir

from admin_app.errors import ApiError
from admin_app.tasks import rules

# Hypothesis keeps caches under .hypothesis in the working directory: keep them out of the checkout.
set_hypothesis_home_dir(Path(tempfile.gettempdir()) / "bailing-task-rules-hypothesis")
# Deterministic (the same examples every run) and nothing written into the checkout.
PROPERTY = settings(deadline=None, derandomize=True, database=None, max_examples=200)

SESSION = "11111111-1111-4111-8111-111111111111"
OTHER_SESSION = "22222222-2222-4222-a222-222222222222"
PRINCIPAL = {"id": "user-42", "tenant": "tenant-7", "roles": ["manager", "clerk"]}
CREATED = datetime(2026, 1, 15, 8, 0, tzinfo=UTC)
IDENTITY_VECTOR = "90a1ede988502256b3ef1872daf4c2f64750ff9cb0668daabbc50258f5e5745e"
SCOPE_VECTOR = "268b45614a2df9eb1f583723af1cf7692715a2d9bcde50fac953fb53981c4824"
EMOJI = "\U0001f600"  # one code point outside the BMP: two UTF-16 code units
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
MS = timedelta(milliseconds=1)


def refusal(call: Any, *args: Any, code: str = "TASK_INVALID_INPUT", status: int | None = None) -> ApiError:
    """Calls `call(*args)`, which must raise an ApiError with `code` (and its status)."""
    with pytest.raises(ApiError) as caught:
        call(*args)
    err = caught.value
    assert err.code == code, err.message
    expected_status = status if status is not None else (400 if code == "TASK_INVALID_INPUT" else 409)
    assert err.status == expected_status
    return err


def member(**changes: Any) -> dict[str, Any]:
    """A valid member body, the one of the §3.5 test vector, with `changes` applied."""
    value = {"session_id": SESSION, "client_app_id": "shop-app", "workspace": "shop",
             "client_conversation_id": "conv-1", "allowed_tools": ["product_update", "inventory_read"]}
    value.update(changes)
    return value


def policy_body(**changes: Any) -> dict[str, Any]:
    value = {"max_write_calls": 5, "max_concurrent": 2, "expires_at": "2026-06-01T00:00:00Z"}
    value.update(changes)
    return value


def create_body(**changes: Any) -> dict[str, Any]:
    value = {"request_id": "create-2026-01-15-shop", "members": [member()], "policy": policy_body()}
    value.update(changes)
    return value


def wire(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def js_trimmed(text: str) -> bool:
    """An independent reading of JavaScript's `s === s.trim()`: WhiteSpace (tab, VT, FF, U+FEFF and
    every Zs space) and LineTerminator (LF, CR, U+2028, U+2029)."""
    def space(c: str) -> bool:
        return c in "\t\n\v\f\r\u2028\u2029\ufeff" or unicodedata.category(c) == "Zs"
    return not space(text[0]) and not space(text[-1])


# ============================================================================ §3.3-§3.5 test vectors

def test_task_id_vector() -> None:
    text = json.dumps(["bailing.agent-task-create.v1", "demo-admin", "create-2026-01-15-shop"],
                      separators=(",", ":"))
    d = hashlib.sha256(text.encode()).hexdigest()
    assert d.startswith("9732feb711a42a72")
    assert rules.task_id("demo-admin", "create-2026-01-15-shop") == "9732feb7-11a4-4a72-a6fb-8f39ebf61199"


def test_task_id_depends_on_actor_and_request_id() -> None:
    base = rules.task_id("demo-admin", "r-1")
    assert rules.task_id("demo-admin", "r-1") == base
    assert rules.task_id("other-admin", "r-1") != base
    assert rules.task_id("demo-admin", "r-2") != base
    # A compact JSON array, not a concatenation: moving the boundary changes the id.
    assert rules.task_id("ab", "c") != rules.task_id("a", "bc")


@PROPERTY
@given(actor=st.text(min_size=1, max_size=40), request_id=st.text(min_size=1, max_size=40))
def test_task_id_is_a_version_4_uuid_with_variant_a(actor: str, request_id: str) -> None:
    value = rules.task_id(actor, request_id)
    assert rules.uuid_text(value, "task_id") == value
    assert value[14] == "4" and value[19] == "a"
    d = hashlib.sha256(json.dumps(["bailing.agent-task-create.v1", actor, request_id], ensure_ascii=False,
                                  separators=(",", ":")).encode()).hexdigest()
    assert value.replace("-", "") == d[:12] + "4" + d[13:16] + "a" + d[17:32]


def test_identity_digest_vector() -> None:
    canonical = ('{"clientAppId":"shop-app","createdAt":"2026-01-15T08:00:00.000Z","onBehalfOf":"tenant-7:user-42",'
                 '"principal":{"id":"user-42","roles":["clerk","manager"],"tenant":"tenant-7"},'
                 '"sessionId":"11111111-1111-4111-8111-111111111111"}')
    assert hashlib.sha256(canonical.encode()).hexdigest() == IDENTITY_VECTOR
    principal = copy.deepcopy(PRINCIPAL)
    assert rules.identity_digest(SESSION, "shop-app", principal, "tenant-7:user-42", CREATED) == IDENTITY_VECTOR
    assert principal == PRINCIPAL  # the roles were sorted in a copy, not in the caller's object


@pytest.mark.parametrize("created_at", [
    CREATED,
    CREATED + timedelta(microseconds=999),  # truncated to the millisecond, never rounded (I-04)
    CREATED.astimezone(timezone(timedelta(hours=8))),  # the same instant written in another zone
], ids=["exact", "sub-millisecond", "other-zone"])
def test_identity_digest_takes_the_creation_time_to_the_millisecond(created_at: datetime) -> None:
    assert rules.identity_digest(SESSION, "shop-app", PRINCIPAL, "tenant-7:user-42", created_at) == IDENTITY_VECTOR


def test_identity_digest_ignores_the_order_of_roles() -> None:
    reordered = {"tenant": "tenant-7", "roles": ["clerk", "manager"], "id": "user-42"}
    assert rules.identity_digest(SESSION, "shop-app", reordered, "tenant-7:user-42", CREATED) == IDENTITY_VECTOR


@pytest.mark.parametrize("field,value", [
    ("session_id", OTHER_SESSION),
    ("client_app_id", "other-app"),
    ("principal", {**PRINCIPAL, "id": "user-43"}),
    ("principal", {**PRINCIPAL, "tenant": "tenant-8"}),
    ("principal", {**PRINCIPAL, "roles": ["manager"]}),
    ("principal", {"id": "user-42", "tenant": "tenant-7"}),
    ("on_behalf_of", "tenant-7:user-43"),
    ("on_behalf_of", None),
    ("created_at", CREATED + MS),
])
def test_identity_digest_changes_with_any_part_of_the_identity(field: str, value: Any) -> None:
    parts = {"session_id": SESSION, "client_app_id": "shop-app", "principal": PRINCIPAL,
             "on_behalf_of": "tenant-7:user-42", "created_at": CREATED}
    parts[field] = value
    assert rules.identity_digest(**parts) != IDENTITY_VECTOR


def test_identity_digest_hashes_a_principal_without_roles_as_stored() -> None:
    """I-07: an absent `roles` is not written in as []."""
    principal = {"id": "user-42"}
    expected = rules.digest({"sessionId": SESSION, "clientAppId": "shop-app", "principal": {"id": "user-42"},
                             "onBehalfOf": None, "createdAt": "2026-01-15T08:00:00.000Z"})
    assert rules.identity_digest(SESSION, "shop-app", principal, None, CREATED) == expected
    assert principal == {"id": "user-42"}


def test_identity_digest_sorts_roles_by_utf16_code_units() -> None:
    # U+10000 is D800 DC00 in UTF-16, so it sorts before U+FF61 (code point order says otherwise).
    principal = {"id": "u", "roles": ["\uff61", "\U00010000", "a"]}
    expected = rules.digest({"sessionId": SESSION, "clientAppId": "app", "principal":
                             {"id": "u", "roles": ["a", "\U00010000", "\uff61"]},
                             "onBehalfOf": "u", "createdAt": "2026-01-15T08:00:00.000Z"})
    assert rules.identity_digest(SESSION, "app", principal, "u", CREATED) == expected


def test_scope_hash_vector() -> None:
    members = rules.members([member()])
    identity = rules.identity_digest(SESSION, "shop-app", PRINCIPAL, "tenant-7:user-42", CREATED)
    assert members[0]["allowed_tools"] == ["inventory_read", "product_update"]
    assert rules.scope_hash(members, {rules.member_key_text(members[0]): identity}) == SCOPE_VECTOR


@pytest.mark.parametrize("changes", [
    {"allowed_tools": ["inventory_read", "product_update"]},
    {"session_id": SESSION.upper()},
], ids=["tools-sorted-already", "session-upper-case"])
def test_scope_hash_is_taken_after_normalisation(changes: dict[str, Any]) -> None:
    members = rules.members([member(**changes)])
    identities = {rules.member_key_text(members[0]): IDENTITY_VECTOR}
    assert rules.scope_hash(members, identities) == SCOPE_VECTOR


@pytest.mark.parametrize("changes", [
    {"workspace": "shop2"}, {"client_conversation_id": "conv-2"}, {"client_app_id": "shop-app2"},
    {"allowed_tools": ["inventory_read"]}, {"allowed_tools": ["inventory_read", "product_update", "x"]},
])
def test_scope_hash_changes_with_any_member_field(changes: dict[str, Any]) -> None:
    members = rules.members([member(**changes)])
    assert rules.scope_hash(members, {rules.member_key_text(members[0]): IDENTITY_VECTOR}) != SCOPE_VECTOR


def test_scope_hash_binds_the_identity_digest() -> None:
    members = rules.members([member()])
    other = rules.identity_digest(SESSION, "shop-app", {**PRINCIPAL, "id": "user-43"}, "tenant-7:user-42", CREATED)
    assert rules.scope_hash(members, {rules.member_key_text(members[0]): other}) != SCOPE_VECTOR


def test_scope_hash_of_several_members_ignores_their_input_order() -> None:
    bodies = [member(), member(session_id=OTHER_SESSION, workspace="crm"), member(client_conversation_id="conv-0")]
    identities = {rules.member_key_text(m): rules.digest(rules.member_key_text(m))
                  for m in rules.members(bodies)}
    forward = rules.scope_hash(rules.members(bodies), identities)
    backward = rules.scope_hash(rules.members(bodies[::-1]), identities)
    assert forward == backward
    assert rules.hex64(forward, "scope_hash") == forward


# ============================================================================ §3.1 formats

@pytest.mark.parametrize("value,expected", [
    (SESSION, SESSION),
    ("9732FEB7-11A4-4A72-A6FB-8F39EBF61199", "9732feb7-11a4-4a72-a6fb-8f39ebf61199"),
    ("9732feb7-11a4-1a72-86fb-8f39ebf61199", "9732feb7-11a4-1a72-86fb-8f39ebf61199"),  # version 1, variant 8
    ("9732feb7-11a4-5a72-bFfb-8f39ebf61199", "9732feb7-11a4-5a72-bffb-8f39ebf61199"),  # version 5, variant b
])
def test_uuid_text_accepts_and_lower_cases(value: str, expected: str) -> None:
    assert rules.uuid_text(value, "session_id") == expected


@pytest.mark.parametrize("value", [
    "9732feb7-11a4-0a72-a6fb-8f39ebf61199",  # version 0
    "9732feb7-11a4-6a72-a6fb-8f39ebf61199",  # version 6
    "9732feb7-11a4-4a72-c6fb-8f39ebf61199",  # variant c
    "9732feb7-11a4-4a72-76fb-8f39ebf61199",  # variant 7
    "9732feb711a44a72a6fb8f39ebf61199",  # no dashes
    "{9732feb7-11a4-4a72-a6fb-8f39ebf61199}",
    "9732feb7-11a4-4a72-a6fb-8f39ebf6119",  # short
    "9732feb7-11a4-4a72-a6fb-8f39ebf61199\n",
    " 9732feb7-11a4-4a72-a6fb-8f39ebf61199",
    "9732feb7-11a4-4a72-a6fb-8f39ebf6119g",
    "", None, 42, ["9732feb7-11a4-4a72-a6fb-8f39ebf61199"],
])
def test_uuid_text_refuses(value: Any) -> None:
    refusal(rules.uuid_text, value, "session_id")


def test_hex64() -> None:
    assert rules.hex64("0123456789abcdef" * 4, "scope_hash") == "0123456789abcdef" * 4
    for value in ["0123456789ABCDEF" * 4, "a" * 63, "a" * 65, "g" * 64, "a" * 64 + "\n", "", None, 0]:
        refusal(rules.hex64, value, "scope_hash")


@pytest.mark.parametrize("value", ["shop", "ab", "a" * 64, "a-b_c", "0x", "auto-2", "autos"])
def test_workspace_accepts(value: str) -> None:
    assert rules.workspace(value) == value


@pytest.mark.parametrize("value", [
    "auto", "a", "a" * 65, "Shop", "-ab", "_ab", "a b", "shop\n", "shöp", "", None, 12,
])
def test_workspace_refuses(value: Any) -> None:
    refusal(rules.workspace, value)


@pytest.mark.parametrize("value", ["conv-1", "C", "7", "a" * 128, "a.b:c_d-e", "Conv.2026:01"])
def test_conversation_id_accepts(value: str) -> None:
    assert rules.conversation_id(value) == value


@pytest.mark.parametrize("value", [
    " conv-1", "conv-1 ", " conv-1 ",  # surrounding spaces
    "convé", "conv-ü", "кон",  # non-ASCII letters
    "conve\u0301",  # a combining accent
    "\uff43onv",  # a full-width letter
    "\u0661\u0662",  # Arabic-Indic digits (not ASCII 0-9)
    "",  # empty
    "conv\n1", "conv-1\n", "\nconv-1",  # a newline
    "conv 1", "conv/1", "conv@1", "-conv", ".conv", "_conv", "a" * 129, None, 1,
])
def test_conversation_id_refuses(value: Any) -> None:
    refusal(rules.conversation_id, value)


# ---------------------------------------------------------------------------- task texts

@pytest.mark.parametrize("value,most", [
    ("a", 1), ("shop-app", 64), ("a b", 3), ("é", 1), ("e\u0301", 2), ("管理员", 3),
    (EMOJI, 2), ("demo-admin " + EMOJI, 13), ("x" * 128, 128), (EMOJI * 64, 128), ("a\u00a0b", 3),
    ("a\u0085", 2),  # NEL is not white space to JavaScript's trim, nor a C0 control
])
def test_task_text_accepts(value: str, most: int) -> None:
    assert rules.task_text(value, "request_id", most) == value


@pytest.mark.parametrize("value,most", [
    ("", 128),
    (" a", 128), ("a ", 128), ("\ufeffa", 128), ("a\ufeff", 128), ("\u00a0a", 128), ("a\u00a0", 128),
    ("\u3000a", 128), ("a\u2028", 128), ("\u2029a", 128), ("a\u202f", 128), ("\u1680a", 128),
    ("\ta", 128), ("a\r\n", 128),
    ("a\x00b", 128), ("a\x01b", 128), ("a\nb", 128), ("a\x1fb", 128), ("a\x7fb", 128),
    ("a\ud800", 128), ("\udc00b", 128), ("a\ud83db", 128),  # unpaired surrogates
    (EMOJI, 1),  # two code units
    ("x" * 129, 128), (EMOJI * 64 + "a", 128), ("ab", 1),
    (None, 128), (1, 128), (b"a", 128), (["a"], 128),
])
def test_task_text_refuses(value: Any, most: int) -> None:
    refusal(rules.task_text, value, "request_id", most)


def test_js_whitespace_is_exactly_what_javascript_trim_removes() -> None:
    spaces = {chr(i) for i in range(sys.maxunicode + 1) if unicodedata.category(chr(i)) == "Zs"}
    assert rules.JS_WHITESPACE == spaces | set("\t\n\v\f\r\u2028\u2029\ufeff")


@pytest.mark.parametrize("space", sorted(rules.JS_WHITESPACE), ids=lambda c: f"U+{ord(c):04X}")
def test_task_text_white_space_only_inside(space: str) -> None:
    refusal(rules.task_text, space + "a", "actor", 191)
    refusal(rules.task_text, "a" + space, "actor", 191)
    inside = "a" + space + "b"
    if ord(space) < 0x20:
        refusal(rules.task_text, inside, "actor", 191)
    else:
        assert rules.task_text(inside, "actor", 191) == inside


@pytest.mark.parametrize("code", [*range(0x20), 0x7F], ids=lambda c: f"U+{c:04X}")
def test_task_text_refuses_every_control_character(code: int) -> None:
    refusal(rules.task_text, f"a{chr(code)}b", "client_app_id", 64)


@PROPERTY
@given(value=st.text(max_size=12), most=st.integers(min_value=1, max_value=16))
def test_task_text_matches_an_independent_reading_of_the_rule(value: str, most: int) -> None:
    units = len(value.encode("utf-16-le", "surrogatepass")) // 2
    valid = (1 <= units <= most and js_trimmed(value)
             and not any(ord(c) < 0x20 or ord(c) == 0x7F or 0xD800 <= ord(c) <= 0xDFFF for c in value))
    if valid:
        assert rules.task_text(value, "actor", most) == value
    else:
        refusal(rules.task_text, value, "actor", most)


@pytest.mark.parametrize("value,units", [("", 0), ("abc", 3), ("é", 1), (EMOJI, 2), ("a" + EMOJI + "b", 4)])
def test_utf16_length(value: str, units: int) -> None:
    assert rules.utf16_length(value) == units


# ---------------------------------------------------------------------------- integers

@pytest.mark.parametrize("value,lo,hi,expected", [
    (1, 1, rules.SAFE_INTEGER_MAX, 1),
    (0, 0, 10, 0),
    (10, 0, 10, 10),
    (2.0, 1, rules.SAFE_INTEGER_MAX, 2),  # I-03
    (1e3, 1, rules.SAFE_INTEGER_MAX, 1000),  # I-03
    (-0.0, 0, 10, 0),
    (2**53 - 1, 1, rules.SAFE_INTEGER_MAX, 2**53 - 1),
    (float(2**53 - 1), 1, rules.SAFE_INTEGER_MAX, 2**53 - 1),
    (-(2**53 - 1), -(2**53 - 1), 0, -(2**53 - 1)),
])
def test_integer_accepts(value: Any, lo: int, hi: int, expected: int) -> None:
    result = rules.integer(value, "n", lo, hi)
    assert result == expected and type(result) is int


def test_integer_default_range_is_lo_to_the_largest_safe_integer() -> None:
    assert rules.integer(2**53 - 1, "expected_revision", 1) == 2**53 - 1
    refusal(rules.integer, 2**53, "expected_revision", 1)
    refusal(rules.integer, 0, "expected_revision", 1)


@pytest.mark.parametrize("value", [
    True, False, "1", "120", None, [], {}, 0.5, 1.000001, math.nan, math.inf, -math.inf,
    2**53, float(2**53), 10**400, -(2**53),
], ids=repr)
def test_integer_refuses(value: Any) -> None:
    refusal(rules.integer, value, "n", -(2**53 - 1), 2**60)


@pytest.mark.parametrize("value,lo,hi", [(0, 1, 10), (11, 1, 10), (-1, 0, 10), (10.0 + 1, 0, 10)])
def test_integer_refuses_outside_the_range(value: Any, lo: int, hi: int) -> None:
    refusal(rules.integer, value, "n", lo, hi)


# ---------------------------------------------------------------------------- deadlines

@pytest.mark.parametrize("value,normalised", [
    ("2026-01-15T08:00:00Z", "2026-01-15T08:00:00.000Z"),
    ("2026-01-15T08:00:00.000Z", "2026-01-15T08:00:00.000Z"),
    ("2028-02-29T12:00:00.1Z", "2028-02-29T12:00:00.100Z"),
    ("2028-02-29T12:00:00.12Z", "2028-02-29T12:00:00.120Z"),
    ("2028-02-29T12:00:00.01Z", "2028-02-29T12:00:00.010Z"),
    ("2028-02-29T12:00:00.001Z", "2028-02-29T12:00:00.001Z"),
    ("2000-02-29T00:00:00Z", "2000-02-29T00:00:00.000Z"),  # 2000 is a leap year
    ("1000-01-01T00:00:00Z", "1000-01-01T00:00:00.000Z"),
    ("9999-12-31T23:59:59.999Z", "9999-12-31T23:59:59.999Z"),
])
def test_instant_accepts_and_normalises(value: str, normalised: str) -> None:
    moment = rules.instant(value)
    assert moment.tzinfo is UTC
    assert rules.wire_time(moment) == normalised
    assert rules.policy(policy_body(expires_at=value))["expires_at"] == normalised


def test_instant_keeps_the_milliseconds() -> None:
    assert rules.instant("2028-02-29T12:00:00.1Z") == datetime(2028, 2, 29, 12, 0, 0, 100_000, tzinfo=UTC)


@pytest.mark.parametrize("value", [
    "2026-02-30T00:00:00Z",  # Feb 30
    "2027-02-29T00:00:00Z",  # Feb 29 of a common year
    "1900-02-29T00:00:00Z",  # a century that is not a leap year
    "2026-04-31T00:00:00Z",
    "2026-01-15T24:00:00Z",  # 24:00
    "2026-01-15T23:60:00Z", "2026-01-15T23:59:60Z",  # no leap seconds
    "2026-13-01T00:00:00Z", "2026-00-10T00:00:00Z", "2026-01-00T00:00:00Z",
    "2026-01-15T08:00:00+08:00", "2026-01-15T08:00:00.000+08:00", "2026-01-15T08:00:00+00:00",  # offsets
    "0001-01-01T00:00:00Z", "0999-12-31T23:59:59.999Z", "0000-01-01T00:00:00Z",  # years before 1000
    "garbage", "", "2026-01-15", "2026-01-15T08:00Z", "2026-01-15T08:00:00",
    "2026-01-15 08:00:00Z", "2026-01-15t08:00:00z", "2026-01-15T08:00:00.1234Z", "2026-01-15T08:00:00.Z",
    "2026-1-15T08:00:00Z", "+2026-01-15T08:00:00Z", "12026-01-15T08:00:00Z", "2026-01-15T08:00:00Z\n",
    " 2026-01-15T08:00:00Z", "\u0662\u0660\u0662\u0666-01-15T08:00:00Z",  # Arabic-Indic digits
    None, 1768464000, 1768464000.0, datetime(2026, 1, 15, tzinfo=UTC),
])
def test_instant_refuses(value: Any) -> None:
    refusal(rules.instant, value, "expires_at")
    if value is not None:  # a null deadline is the policy's "no deadline"
        refusal(rules.policy, policy_body(expires_at=value))


@PROPERTY
@given(moment=st.datetimes(min_value=datetime(1000, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59),
                           timezones=st.just(UTC)))
def test_instant_round_trips_the_wire_form(moment: datetime) -> None:
    text = rules.wire_time(moment)
    assert text == wire(moment)
    assert rules.instant(text) == rules.truncated(moment)


@pytest.mark.parametrize("moment,text", [
    (None, None),
    (datetime(2026, 1, 15, 8, 0, 0, 123_999, tzinfo=UTC), "2026-01-15T08:00:00.123Z"),  # truncated
    (datetime(2026, 1, 15, 16, 0, tzinfo=timezone(timedelta(hours=8))), "2026-01-15T08:00:00.000Z"),
])
def test_wire_time(moment: datetime | None, text: str | None) -> None:
    assert rules.wire_time(moment) == text


def test_instant_or_none() -> None:
    assert rules.instant_or_none(None) is None
    assert rules.instant_or_none("2026-01-15T08:00:00Z") == datetime(2026, 1, 15, 8, tzinfo=UTC)
    refusal(rules.instant_or_none, "2026-02-30T00:00:00Z")


# ============================================================================ §2.4 policy

@pytest.mark.parametrize("budget,expected", [
    (None, None), (0, 0), (1, 1), (120, 120), (1_000_000_000, 1_000_000_000), (2.0, 2), (1e3, 1000),
    (1e9, 1_000_000_000),
])
def test_policy_max_write_calls_accepts(budget: Any, expected: int | None) -> None:
    result = rules.policy(policy_body(max_write_calls=budget))
    assert result["max_write_calls"] == expected
    if expected is None:
        assert result["max_write_calls"] is None
    else:
        assert type(result["max_write_calls"]) is int


def test_policy_zero_a_bound_and_null_stay_distinct() -> None:
    results = [rules.policy(policy_body(max_write_calls=v))["max_write_calls"] for v in (0, 7, None)]
    assert results == [0, 7, None]
    assert results[0] is not None and results[0] is not False
    assert len({repr(r) for r in results}) == 3


@pytest.mark.parametrize("budget", [
    -1, 0.5, math.nan, "120", True, False, 1_000_000_001, 2**53 - 1, math.inf, [], {},
], ids=repr)
def test_policy_max_write_calls_refuses(budget: Any) -> None:
    refusal(rules.policy, policy_body(max_write_calls=budget))


@pytest.mark.parametrize("limit,expected", [(1, 1), (2, 2), (10_000, 10_000), (2.0, 2), (1e3, 1000)])
def test_policy_max_concurrent_accepts(limit: Any, expected: int) -> None:
    assert rules.policy(policy_body(max_concurrent=limit))["max_concurrent"] == expected


@pytest.mark.parametrize("limit", [0, -1, 0.5, "2", None, 10_001, True, math.nan, 2**53 - 1], ids=repr)
def test_policy_max_concurrent_refuses(limit: Any) -> None:
    refusal(rules.policy, policy_body(max_concurrent=limit))


def test_policy_normalises_the_whole_object() -> None:
    body = {"max_write_calls": 1e3, "max_concurrent": 4.0, "expires_at": "2028-02-29T12:00:00.1Z"}
    assert rules.policy(body) == {"max_write_calls": 1000, "max_concurrent": 4,
                                  "expires_at": "2028-02-29T12:00:00.100Z"}
    assert rules.policy(policy_body(expires_at=None))["expires_at"] is None


@pytest.mark.parametrize("missing", rules.POLICY_FIELDS)
def test_policy_refuses_a_missing_key(missing: str) -> None:
    body = policy_body()
    del body[missing]
    refusal(rules.policy, body)


@pytest.mark.parametrize("extra", ["max_read_calls", "maxWriteCalls", "budget", ""])
def test_policy_refuses_an_unknown_key(extra: str) -> None:
    refusal(rules.policy, {**policy_body(), extra: 1})


@pytest.mark.parametrize("value", [None, [], "policy", 5, [("max_write_calls", 1)]])
def test_policy_refuses_a_non_object(value: Any) -> None:
    refusal(rules.policy, value)


# ============================================================================ members

def test_members_normalise() -> None:
    result = rules.members([member(session_id=SESSION.upper(), allowed_tools=["b", "a", "B", "_z", "a1"])])
    assert result == [{"session_id": SESSION, "client_app_id": "shop-app", "workspace": "shop",
                       "client_conversation_id": "conv-1", "allowed_tools": ["B", "_z", "a", "a1", "b"]}]


def test_members_are_sorted_by_member_key_after_lower_casing() -> None:
    # Sorted before lower-casing, "BBBB..." would come before "aaaa..." ("B" < "a").
    upper_b = "BBBBBBBB-BBBB-4BBB-BBBB-BBBBBBBBBBBB"
    lower_a = "aaaaaaaa-aaaa-4aaa-aaaa-aaaaaaaaaaaa"
    result = rules.members([member(session_id=upper_b), member(session_id=lower_a)])
    assert [m["session_id"] for m in result] == [lower_a, upper_b.lower()]


def test_members_key_order_is_session_then_workspace_then_conversation() -> None:
    bodies = [member(workspace="shop", client_conversation_id="b"), member(workspace="crm", client_conversation_id="z"),
              member(workspace="shop", client_conversation_id="a"), member(session_id=OTHER_SESSION, workspace="aa"),
              member(workspace="shop-2", client_conversation_id="a")]
    keys = [(m["session_id"], m["workspace"], m["client_conversation_id"]) for m in rules.members(bodies)]
    assert keys == [(SESSION, "crm", "z"), (SESSION, "shop", "a"), (SESSION, "shop", "b"),
                    (SESSION, "shop-2", "a"), (OTHER_SESSION, "aa", "conv-1")]


def test_members_are_copies() -> None:
    tools = ["inventory_read", "product_update"]  # already sorted: must still be copied
    bodies = [member(allowed_tools=tools), member(session_id=OTHER_SESSION)]
    result = rules.members(bodies)
    snapshot = copy.deepcopy(result)
    tools.append("delete_everything")
    bodies[0]["workspace"] = "other"
    bodies[1]["allowed_tools"].clear()
    bodies.append(member(workspace="third"))
    assert result == snapshot
    assert all(m is not b for m in result for b in bodies)


def test_members_do_not_change_their_input() -> None:
    bodies = [member(session_id=SESSION.upper(), allowed_tools=["z", "a"]), member(session_id=OTHER_SESSION)]
    before = copy.deepcopy(bodies)
    rules.members(bodies)
    assert bodies == before


def test_the_same_session_may_appear_with_another_workspace_or_conversation() -> None:
    result = rules.members([member(), member(workspace="crm"), member(client_conversation_id="conv-2")])
    assert len(result) == 3


@pytest.mark.parametrize("second", [
    member(),
    member(session_id=SESSION.upper()),  # the same session in another case
    member(allowed_tools=["other_tool"]),  # tools are not part of the member key
    member(client_app_id="other-app"),
], ids=["identical", "uuid-case", "other-tools", "other-app"])
def test_members_refuse_a_duplicate_member_key(second: dict[str, Any]) -> None:
    refusal(rules.members, [member(), second])


def test_members_count_limits() -> None:
    def many(n: int) -> list[dict[str, Any]]:
        return [member(client_conversation_id=f"conv-{i}") for i in range(n)]
    assert len(rules.members(many(64))) == 64
    refusal(rules.members, many(65))
    refusal(rules.members, [])


@pytest.mark.parametrize("value", [None, member(), "members", ({**member()},)])
def test_members_refuse_a_non_list(value: Any) -> None:
    refusal(rules.members, value)


@pytest.mark.parametrize("extra", ["token", "body", "identity_hash", "display_name", "scope_hash"])
def test_members_refuse_an_extra_key(extra: str) -> None:
    refusal(rules.members, [{**member(), extra: "x"}])


@pytest.mark.parametrize("missing", rules.MEMBER_FIELDS)
def test_members_refuse_a_missing_key(missing: str) -> None:
    body = member()
    del body[missing]
    refusal(rules.members, [body])


@pytest.mark.parametrize("changes", [
    {"session_id": "not-a-uuid"}, {"session_id": None},
    {"workspace": "auto"}, {"workspace": "Shop"}, {"workspace": "s"},
    {"client_conversation_id": " conv-1"}, {"client_conversation_id": "conv-1 "}, {"client_conversation_id": "convé"},
    {"client_conversation_id": "conve\u0301"}, {"client_conversation_id": ""}, {"client_conversation_id": "conv\n1"},
    {"client_app_id": ""}, {"client_app_id": " shop-app"}, {"client_app_id": "x" * 65}, {"client_app_id": 5},
    {"client_app_id": "shop\x00app"}, {"client_app_id": "shop\ud800"},
], ids=repr)
def test_members_refuse_a_bad_field(changes: dict[str, Any]) -> None:
    refusal(rules.members, [member(**changes)])


@pytest.mark.parametrize("app", ["x" * 64, "shop app", EMOJI * 32, "店铺"])
def test_members_accept_client_app_ids(app: str) -> None:
    assert rules.members([member(client_app_id=app)])[0]["client_app_id"] == app


@pytest.mark.parametrize("tools", [
    [], ["*"], ["read_*"], ["inventory_read", "*"], ["a", "a"], ["inventory_read", "product_update", "inventory_read"],
    ["1tool"], ["tool-name"], ["tool.name"], ["tool name"], [" tool"], ["tool\n"], ["x" * 65], ["café"], [""],
    [None], [1], [["a"]], "inventory_read", None, {"inventory_read": True},
    [f"tool_{i}" for i in range(257)],
], ids=lambda v: repr(v)[:40])
def test_members_refuse_a_bad_tool_list(tools: Any) -> None:
    refusal(rules.members, [member(allowed_tools=tools)])
    refusal(rules.tools, tools, "allowed_tools")


@pytest.mark.parametrize("tools,expected", [
    (["b", "a"], ["a", "b"]),
    (["Read", "read"], ["Read", "read"]),  # case-sensitive: two different tools
    (["_", "x" * 64], ["_", "x" * 64]),
    (["no_such_tool_anywhere"], ["no_such_tool_anywhere"]),  # not checked against the catalog (I-02)
])
def test_tools_accept_and_sort(tools: list[str], expected: list[str]) -> None:
    assert rules.tools(tools, "allowed_tools") == expected


def test_tools_limit_is_256() -> None:
    names = [f"tool_{i:03d}" for i in range(256)]
    assert rules.tools(names[::-1], "allowed_tools") == names


TRIPLES = st.tuples(st.sampled_from([SESSION, OTHER_SESSION, "33333333-3333-3333-9333-333333333333"]),
                    st.sampled_from(["shop", "crm", "shop-2", "a_b"]),
                    st.sampled_from(["conv-1", "conv-2", "C", "x.y:z"]))
TOOL_LISTS = st.lists(st.from_regex(rules.TOOL, fullmatch=True), min_size=1, max_size=6, unique=True)


@PROPERTY
@given(data=st.data(), keys=st.lists(TRIPLES, min_size=1, max_size=8, unique=True))
def test_members_normalise_independently_of_input_order(data: st.DataObject, keys: list[tuple[str, str, str]]) -> None:
    bodies = [member(session_id=s.upper() if i % 2 else s, workspace=w, client_conversation_id=c,
                     allowed_tools=data.draw(TOOL_LISTS))
              for i, (s, w, c) in enumerate(keys)]
    shuffled = data.draw(st.permutations(bodies))
    result = rules.members(bodies)
    assert rules.members(shuffled) == result
    texts = [rules.member_key_text(m) for m in result]
    assert texts == sorted(texts)
    assert all(m["allowed_tools"] == sorted(m["allowed_tools"]) for m in result)
    assert all(m["session_id"] == m["session_id"].lower() for m in result)


def test_member_key_text_and_member_key() -> None:
    normalised = rules.members([member()])[0]
    assert rules.member_key_text(normalised) == '["11111111-1111-4111-8111-111111111111","shop","conv-1"]'
    assert rules.member_key(normalised) == rules.digest([SESSION, "shop", "conv-1"])


# ============================================================================ §3.2 the canonical hash

def test_digest_of_a_known_value() -> None:
    value = {"b": 1, "a": [1, "x", None, True], "c": {"é": "管"}}
    text = '{"a":[1,"x",null,true],"b":1,"c":{"é":"管"}}'
    assert rules.digest(value) == hashlib.sha256(text.encode("utf-8")).hexdigest()


def test_digest_ignores_key_insertion_order() -> None:
    assert rules.digest({"a": 1, "b": {"x": 1, "y": 2}}) == rules.digest({"b": {"y": 2, "x": 1}, "a": 1})


def test_digest_keeps_array_order() -> None:
    assert rules.digest(["a", "b"]) != rules.digest(["b", "a"])


def test_digest_distinguishes_precomposed_from_decomposed() -> None:
    precomposed, decomposed = "\u00e9", "e\u0301"
    assert rules.digest({precomposed: 1}) != rules.digest({decomposed: 1})
    assert rules.digest([precomposed]) != rules.digest([decomposed])


@PROPERTY
@given(data=st.data(), value=st.dictionaries(st.text(max_size=6), st.integers() | st.text(max_size=6) | st.none(),
                                             max_size=8))
def test_digest_is_independent_of_insertion_order(data: st.DataObject, value: dict[str, Any]) -> None:
    reordered = dict(data.draw(st.permutations(list(value.items()))))
    assert rules.digest(reordered) == rules.digest(value)
    assert rules.HEX64.fullmatch(rules.digest(value))


def test_request_key() -> None:
    key = rules.request_key("demo-admin", "r-1")
    assert key == rules.digest(["demo-admin", "r-1"])
    assert rules.request_key("demo-admin", "r-1") == key
    assert rules.request_key("other-admin", "r-1") != key
    assert rules.request_key("demo-admin", "r-2") != key
    assert rules.request_key("r-1", "demo-admin") != key
    assert rules.request_key("a", "bc") != rules.request_key("ab", "c")


# ============================================================================ §3.6 bodies and their hashes

def test_create_request_normalises() -> None:
    body = create_body(request_id="create " + EMOJI,
                       members=[member(session_id=OTHER_SESSION.upper(), allowed_tools=["z", "a"]), member()],
                       policy={"max_write_calls": 0, "max_concurrent": 1.0, "expires_at": "2028-02-29T12:00:00.1Z"})
    request = rules.create_request(body)
    assert request.request_id == "create " + EMOJI
    assert [m["session_id"] for m in request.members] == [SESSION, OTHER_SESSION]
    assert request.members[1]["allowed_tools"] == ["a", "z"]
    assert request.policy == {"max_write_calls": 0, "max_concurrent": 1, "expires_at": "2028-02-29T12:00:00.100Z"}


@pytest.mark.parametrize("body", [
    None, [], "body",
    {"members": [member()], "policy": policy_body()},
    {"request_id": "r", "policy": policy_body()},
    {"request_id": "r", "members": [member()]},
    {**create_body(), "task_id": "9732feb7-11a4-4a72-a6fb-8f39ebf61199"},
    {**create_body(), "actor": "demo-admin"},
    create_body(request_id=""), create_body(request_id=" r"), create_body(request_id="r\n"),
    create_body(request_id="x" * 129), create_body(request_id=EMOJI * 64 + "x"), create_body(request_id=5),
    create_body(request_id=None), create_body(members=[]), create_body(members=[member(workspace="auto")]),
    create_body(policy=policy_body(max_write_calls="5")), create_body(policy={}),
], ids=lambda v: repr(v)[:60])
def test_create_request_refuses(body: Any) -> None:
    refusal(rules.create_request, body)


def test_create_request_id_of_128_units() -> None:
    assert rules.create_request(create_body(request_id="x" * 128)).request_id == "x" * 128
    assert rules.create_request(create_body(request_id=EMOJI * 64)).request_id == EMOJI * 64


@pytest.mark.parametrize("action", rules.ACTIONS)
def test_control_request_accepts(action: str) -> None:
    request = rules.control_request({"request_id": "c-1", "expected_revision": 3, "action": action})
    assert request == rules.ControlRequest(request_id="c-1", expected_revision=3, action=action)


@pytest.mark.parametrize("revision,expected", [(1, 1), (2.0, 2), (1e3, 1000), (2**53 - 1, 2**53 - 1)])
def test_control_request_expected_revision(revision: Any, expected: int) -> None:
    request = rules.control_request({"request_id": "c-1", "expected_revision": revision, "action": "pause"})
    assert request.expected_revision == expected and type(request.expected_revision) is int


@pytest.mark.parametrize("changes", [
    {"expected_revision": 0}, {"expected_revision": -1}, {"expected_revision": 1.5}, {"expected_revision": "1"},
    {"expected_revision": True}, {"expected_revision": None}, {"expected_revision": 2**53},
    {"expected_revision": math.nan},
    {"action": "Pause"}, {"action": "expire"}, {"action": "unblock"}, {"action": ""}, {"action": None},
    {"action": ["pause"]}, {"action": " pause"},
    {"request_id": ""}, {"request_id": "x" * 129}, {"request_id": "c-1 "}, {"request_id": 1},
    {"request_id": "c\ud800"},
], ids=repr)
def test_control_request_refuses_a_bad_field(changes: dict[str, Any]) -> None:
    refusal(rules.control_request, {"request_id": "c-1", "expected_revision": 1, "action": "pause", **changes})


@pytest.mark.parametrize("body", [
    None, [], {"request_id": "c-1", "expected_revision": 1},
    {"request_id": "c-1", "action": "pause"}, {"expected_revision": 1, "action": "pause"},
    {"request_id": "c-1", "expected_revision": 1, "action": "pause", "reason": "x"},
    {"request_id": "c-1", "expected_revision": 1, "action": "pause", "task_id": SESSION},
], ids=repr)
def test_control_request_refuses_other_keys(body: Any) -> None:
    refusal(rules.control_request, body)


def test_control_request_id_of_128() -> None:
    body = {"request_id": "x" * 128, "expected_revision": 1, "action": "cancel"}
    assert rules.control_request(body).request_id == "x" * 128


def create_hash_of(body: dict[str, Any], actor: str = "demo-admin") -> str:
    request = rules.create_request(body)
    task = rules.task_id(actor, request.request_id)
    return rules.create_hash(task, actor, request.members, request.policy)


BASE_CREATE = create_body(members=[member(), member(session_id=OTHER_SESSION, workspace="crm",
                                                    allowed_tools=["c_read", "a_write", "b_write"])])


@pytest.mark.parametrize("same", [
    create_body(members=[member(session_id=OTHER_SESSION, workspace="crm",
                                allowed_tools=["b_write", "c_read", "a_write"]),
                         member(allowed_tools=["inventory_read", "product_update"])]),
    create_body(members=[member(session_id=SESSION.upper()),
                         member(session_id=OTHER_SESSION.upper(), workspace="crm",
                                allowed_tools=["a_write", "b_write", "c_read"])]),
    {**BASE_CREATE, "policy": {"expires_at": "2026-06-01T00:00:00.000Z", "max_concurrent": 2.0,
                               "max_write_calls": 5e0}},
    {"policy": BASE_CREATE["policy"], "members": BASE_CREATE["members"], "request_id": BASE_CREATE["request_id"]},
], ids=["members-and-tools-reordered", "uuids-upper-case", "policy-written-differently", "keys-reordered"])
def test_create_hash_is_taken_after_normalisation(same: dict[str, Any]) -> None:
    assert create_hash_of(same) == create_hash_of(BASE_CREATE)


@pytest.mark.parametrize("changes", [
    {"policy": policy_body(max_write_calls=6)},
    {"policy": policy_body(max_write_calls=None)},
    {"policy": policy_body(max_write_calls=0)},
    {"policy": policy_body(max_concurrent=3)},
    {"policy": policy_body(expires_at="2026-06-01T00:00:00.001Z")},
    {"policy": policy_body(expires_at=None)},
    {"members": [member()]},
    {"members": [member(allowed_tools=["inventory_read"]), BASE_CREATE["members"][1]]},
    {"members": [member(client_app_id="other-app"), BASE_CREATE["members"][1]]},
], ids=repr)
def test_create_hash_changes_with_the_content(changes: dict[str, Any]) -> None:
    assert create_hash_of({**BASE_CREATE, **changes}) != create_hash_of(BASE_CREATE)


def test_create_hash_depends_on_task_and_actor() -> None:
    request = rules.create_request(BASE_CREATE)
    task = rules.task_id("demo-admin", request.request_id)
    base = rules.create_hash(task, "demo-admin", request.members, request.policy)
    assert rules.create_hash(task, "other-admin", request.members, request.policy) != base
    assert rules.create_hash(rules.task_id("demo-admin", "x"), "demo-admin", request.members, request.policy) != base
    assert create_hash_of(BASE_CREATE, actor="other-admin") != base


def test_create_hash_excludes_identity_digests() -> None:
    """§3.6: members without identity digests (those belong to the scope hash)."""
    request = rules.create_request(create_body())
    task = rules.task_id("demo-admin", request.request_id)
    expected = rules.digest({
        "taskId": task, "actor": "demo-admin",
        "members": [{"allowedTools": ["inventory_read", "product_update"], "clientAppId": "shop-app",
                     "clientConversationId": "conv-1", "route": "shop", "sessionId": SESSION}],
        "policy": {"maxWriteCalls": 5, "maxConcurrent": 2, "expiresAt": "2026-06-01T00:00:00.000Z"}})
    assert rules.create_hash(task, "demo-admin", request.members, request.policy) == expected


def test_control_hash() -> None:
    task = rules.task_id("demo-admin", "r")
    base = rules.control_hash(task, "demo-admin", "pause", 3)
    assert base == rules.digest({"taskId": task, "actor": "demo-admin", "action": "pause", "expectedRevision": 3})
    assert rules.control_hash(task, "demo-admin", "pause", 3) == base
    others = {rules.control_hash(task, "demo-admin", "cancel", 3), rules.control_hash(task, "demo-admin", "pause", 4),
              rules.control_hash(task, "other-admin", "pause", 3),
              rules.control_hash(rules.task_id("demo-admin", "s"), "demo-admin", "pause", 3)}
    assert base not in others and len(others) == 4


# ============================================================================ §4 state

DEADLINE = "2026-03-01T12:00:00.000Z"  # == NOW


@pytest.mark.parametrize("state,expires_at,now,code", [
    ("active", None, NOW, None),
    ("active", "2026-03-01T12:00:00.001Z", NOW, None),
    ("active", DEADLINE, NOW - MS, None),
    ("active", DEADLINE, NOW - timedelta(microseconds=1), None),
    ("active", DEADLINE, NOW, "TASK_EXPIRED"),  # the deadline's own instant is expired
    ("active", DEADLINE, NOW + MS, "TASK_EXPIRED"),
    ("active", "2000-01-01T00:00:00Z", NOW, "TASK_EXPIRED"),
    ("paused", None, NOW, "TASK_PAUSED"),
    ("paused", DEADLINE, NOW, "TASK_PAUSED"),  # paused and expired answers paused
    ("blocked", None, NOW, "TASK_SCOPE_BLOCKED"),
    ("blocked", DEADLINE, NOW, "TASK_SCOPE_BLOCKED"),
    ("cancelled", None, NOW, "TASK_CANCELLED"),
    ("cancelled", DEADLINE, NOW, "TASK_CANCELLED"),
])
def test_dispatch_refusal(state: str, expires_at: str | None, now: datetime, code: str | None) -> None:
    assert rules.dispatch_refusal(state, expires_at, now) == code
    if code is not None:
        assert ApiError(code).status == 409


@pytest.mark.parametrize("state,expires_at,now,effective", [
    ("active", None, NOW, "active"),
    ("paused", None, NOW, "paused"),
    ("blocked", None, NOW, "blocked"),
    ("cancelled", None, NOW, "cancelled"),
    ("active", DEADLINE, NOW - MS, "active"),
    ("paused", DEADLINE, NOW - MS, "paused"),
    ("active", DEADLINE, NOW, "expired"),
    ("paused", DEADLINE, NOW, "expired"),
    ("blocked", DEADLINE, NOW, "expired"),
    ("cancelled", DEADLINE, NOW, "cancelled"),  # cancelled wins over expired
])
def test_effective_state(state: str, expires_at: str | None, now: datetime, effective: str) -> None:
    assert rules.effective_state(state, expires_at, now) == effective


@pytest.mark.parametrize("expires_at,now,expected", [
    (None, NOW, False),
    (DEADLINE, NOW, True),
    (DEADLINE, NOW - MS, False),
    (DEADLINE, NOW + MS, True),
    ("2026-03-01T12:00:00.001Z", NOW, False),
    ("2026-03-01T20:00:00Z", datetime(2026, 3, 2, 4, 0, tzinfo=timezone(timedelta(hours=8))), True),  # same instant
])
def test_expired(expires_at: str | None, now: datetime, expected: bool) -> None:
    assert rules.expired(expires_at, now) is expected


TRANSITIONS = {  # §4.3: the state reached, or the refusal's code
    ("active", "pause"): "paused", ("active", "resume"): "TASK_CONTROL_CONFLICT", ("active", "cancel"): "cancelled",
    ("paused", "pause"): "paused", ("paused", "resume"): "active", ("paused", "cancel"): "cancelled",
    ("blocked", "pause"): "paused", ("blocked", "resume"): "TASK_CONTROL_CONFLICT", ("blocked", "cancel"): "cancelled",
    ("cancelled", "pause"): "TASK_CANCELLED", ("cancelled", "resume"): "TASK_CANCELLED",
    ("cancelled", "cancel"): "TASK_CANCELLED",
}


def test_the_transition_table_covers_every_state_and_action() -> None:
    assert set(TRANSITIONS) == {(s, a) for s in rules.STATES for a in rules.ACTIONS}


@pytest.mark.parametrize("state,action,outcome", [(s, a, o) for (s, a), o in TRANSITIONS.items()])
def test_transition(state: str, action: str, outcome: str) -> None:
    if outcome.startswith("TASK_"):
        refusal(rules.transition, state, action, code=outcome, status=409)
    else:
        assert rules.transition(state, action) == outcome


def test_blocked_then_pause_then_resume_is_active() -> None:
    state = "blocked"
    refusal(rules.transition, state, "resume", code="TASK_CONTROL_CONFLICT")
    state = rules.transition(state, "pause")
    assert state == "paused"
    assert rules.transition(state, "resume") == "active"


@PROPERTY
@given(actions=st.lists(st.sampled_from(rules.ACTIONS), max_size=20),
       start=st.sampled_from(rules.STATES))
def test_transition_sequences(actions: list[str], start: str) -> None:
    state = start
    for action in actions:
        expected = TRANSITIONS[(state, action)]
        if expected.startswith("TASK_"):
            assert state == "cancelled" or (action == "resume" and state != "paused")
            refusal(rules.transition, state, action, code=expected)
            continue
        reached = rules.transition(state, action)
        assert reached == expected and reached in rules.STATES
        state = reached
    if start == "cancelled" or "cancel" in actions:
        assert state == "cancelled"


@pytest.mark.parametrize("limit,reserved,consumed,allowed", [
    (None, 0, 0, True),
    (None, 10**9, 10**9, True),  # null never refuses
    (0, 0, 0, False),  # 0 refuses any write
    (1, 0, 0, True),
    (1, 1, 0, False),
    (1, 0, 1, False),
    (3, 1, 1, True),
    (3, 2, 1, False),  # reserved plus consumed, not either alone
    (3, 1, 2, False),
    (5, 4, 0, True),
    (5, 0, 4, True),
    (5, 5, 0, False),
    (5, 0, 5, False),
])
def test_write_capacity(limit: int | None, reserved: int, consumed: int, allowed: bool) -> None:
    assert rules.write_capacity(limit, reserved, consumed) is allowed


@PROPERTY
@given(limit=st.none() | st.integers(0, rules.MAX_WRITE_CALLS), reserved=st.integers(0, 2 * 10**9),
       consumed=st.integers(0, 2 * 10**9))
def test_write_capacity_counts_reserved_plus_consumed(limit: int | None, reserved: int, consumed: int) -> None:
    assert rules.write_capacity(limit, reserved, consumed) is (limit is None or reserved + consumed < limit)
