"""`config apply` on mutated configurations: examples/hub.json (and a fuller variant using every
optional field, once with its OpenAPI document inline) with keys dropped, values retyped, keys
given twice in the raw JSON text, unknown keys added, lists and objects emptied, list items
swapped or repeated. Every outcome must be a success or an `Invalid` whose every problem names a
path into the document, never another exception; a refusal must leave the configuration tables
exactly as they were, and `--check` must agree with the apply it predicts while writing nothing.

Most examples run in-process (file written, loaded and applied as the command does, on a real
PostgreSQL); a smaller set runs the real `bailing-admin config apply` process.
"""
from __future__ import annotations

import copy
import json
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings, strategies as st
from hypothesis.configuration import set_hypothesis_home_dir
from sqlalchemy.orm import Session

from admin_app.config_apply import apply, check, load_file
from admin_app.validation import Invalid
from tests.conftest import EXAMPLES, run_cli_process

# Hypothesis keeps caches under .hypothesis in the working directory even without an example
# database: keep them out of the checkout.
set_hypothesis_home_dir(Path(tempfile.gettempdir()) / "bailing-config-mutations-hypothesis")

TABLES = ("bz_tool_providers", "bz_routes", "bz_client_apps")
# Deterministic (CI sees the same examples every run) and nothing written into the checkout.
SETTINGS = dict(deadline=None, derandomize=True, database=None, print_blob=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                       HealthCheck.data_too_large])
KEYS_OF = (("bz_tool_providers", "name", "tool_providers"), ("bz_routes", "route_key", "routes"),
           ("bz_client_apps", "app_id", "client_apps"))
IN_PROCESS_EXAMPLES = 200
PROCESS_EXAMPLES = 20


# ---------------------------------------------------------------- the documents mutated

def _example() -> dict:
    return json.loads((EXAMPLES / "hub.json").read_text())


def _full() -> dict:
    """hub.json with every optional field of every section given, and a second provider, route
    and client that reference each other."""
    doc = _example()
    doc["tool_providers"].append({"name": "demo-erp", "base_url": "https://erp.example.com",
                                  "openapi": "erp.openapi.json", "secret_env": "DEMO_ERP_SECRET",
                                  "timeout_ms": 5000})
    route = doc["routes"][0]
    route.update({
        "description": "Customer questions.", "permission": "full",
        "audience": {"enabled": True, "anonymous": False, "ids": ["user-42"], "tenants": ["tenant-7"],
                     "roles": ["clerk"], "audiences": ["desk"]},
    })
    route["agent_client"].update({
        "max_tool_calls": 20, "active_tool_limit": 8,
        "memory": {"recent_messages": 12, "recent_budget_chars": 20000, "per_message_chars": 4000,
                   "summary_enabled": True, "summary_max_chars": 2000},
        "knowledge": {"enabled": True, "mode": "chunk", "top_k": 5, "max_docs": 3, "page_boost": False},
        "system_info": {"name": "CRM", "summary": "Customers and their credit.",
                        "domains": ["customers"], "boundaries": ["No payments."]},
    })
    route["tools"]["agent_direct"]["force_approval_tools"] = ["customer_update_credit_limit"]
    doc["routes"].append({
        "route_key": "orders", "name": "Orders", "enabled": False, "permission": "readonly",
        "tools": {"sources": [{"provider": "demo-erp", "allow": ["*"]}],
                  "agent_direct": {"enabled": True, "write_tools": ["order_create"],
                                   "unattended_write_tools": ["order_create"]}},
    })
    doc["client_apps"].append({"app_id": "erp-desk", "name": "ERP desk", "enabled": False,
                               "allowed_routes": ["customers", "orders"],
                               "agent_authorize_url": "https://erp.example.com/authorize"})
    return doc


def _full_inline() -> dict:
    doc = _full()
    doc["tool_providers"][0]["openapi"] = json.loads((EXAMPLES / "crm.openapi.json").read_text())
    return doc


SEEDS = {"example": _example(), "full": _full(), "full-inline-openapi": _full_inline()}

# ---------------------------------------------------------------- paths into a document

Path_ = tuple  # keys (str) and indexes (int) from the root


def _nodes(value: Any, at: Path_ = ()) -> list[Path_]:
    """Every node's path, in document order (so draws are reproducible)."""
    out = [at]
    if isinstance(value, dict):
        for key, item in value.items():
            out += _nodes(item, at + (key,))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            out += _nodes(item, at + (i,))
    return out


def _get(doc: Any, at: Path_) -> Any:
    for key in at:
        doc = doc[key]
    return doc


def _text(at: Path_) -> str:
    """The path as the hub writes it: routes[2].tools.agent_direct.write_tools[0]."""
    out = ""
    for key in at:
        out += f"[{key}]" if isinstance(key, int) else (f".{key}" if out else key)
    return out


_TOKEN = re.compile(r"\[(\d+)\]|\.?([^.\[\]]+)")


def points_into(doc: Any, path: str) -> bool:
    """Whether a problem's path names a place in the document: every step exists, except a last
    key missing from an object that is there (a required key), or a place inside the OpenAPI
    document a provider's `openapi` names by file."""
    steps = [int(i) if i else key for i, key in _TOKEN.findall(path)]
    if not path or _text(tuple(steps)) != path:
        return False
    node = doc
    for n, step in enumerate(steps):
        if isinstance(node, str) and steps[n - 1] == "openapi" and steps[0] == "tool_providers":
            return True  # inside the referenced file
        last = n == len(steps) - 1
        if isinstance(step, int) and isinstance(node, list) and step < len(node):
            node = node[step]
        elif isinstance(step, str) and isinstance(node, dict) and step in node:
            node = node[step]
        else:
            return last and isinstance(node, dict)  # a missing key of an object that is there
    return True


# ---------------------------------------------------------------- mutations

# Keys a path can name unambiguously (no dots or brackets), some that storage refuses, a long one.
KEYS = st.from_regex(r"[a-z][a-z_]{0,11}", fullmatch=True) | st.sampled_from(
    ["a\x00b", "\ud800", "k" * 300])
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(),
    st.sampled_from([0, 1, -1, 2**31, 2**53, 2**63, 2**64 + 1, -(2**70), 10**100]),
    st.floats(allow_nan=False, allow_infinity=False),  # JSON has no NaN (a TOML test has)
    st.text(max_size=20),
    st.sampled_from([("x", 5000), ("\u00e9", 70000)]).map(lambda unit: unit[0] * unit[1]),
    st.sampled_from(["", " ", "a\nb", "a\x00b", "\ud800", "\u2028",
                     "customer.read", "*", "demo-crm", "customers", "customer_delete",
                     "https://example.com", "http://127.0.0.1:1/x", "crm.openapi.json"]),
)
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(KEYS, inner, max_size=3), max_leaves=6)


def _mutate(data, doc: dict) -> str:
    """One mutation of doc in place, drawn from data; returns what it did (for the report)."""
    nodes = _nodes(doc)
    kind = data.draw(st.sampled_from(["drop", "retype", "unknown", "empty", "swap", "repeat"]))
    if kind == "drop":
        members = [p for p in nodes if p and isinstance(_get(doc, p[:-1]), dict)]
        if members:
            at = data.draw(st.sampled_from(members))
            del _get(doc, at[:-1])[at[-1]]
            return f"drop {_text(at)}"
    elif kind == "retype":
        at = data.draw(st.sampled_from(nodes[1:]))
        _get(doc, at[:-1])[at[-1]] = data.draw(VALUES)
        return f"retype {_text(at)}"
    elif kind == "unknown":
        objects = [p for p in nodes if isinstance(_get(doc, p), dict)]
        at = data.draw(st.sampled_from(objects))
        key = data.draw(KEYS)
        _get(doc, at)[key] = data.draw(VALUES)
        return f"add {_text(at + (key,))}"
    elif kind == "empty":
        containers = [p for p in nodes[1:] if isinstance(_get(doc, p), (dict, list))]
        at = data.draw(st.sampled_from(containers))
        _get(doc, at[:-1])[at[-1]] = type(_get(doc, at))()
        return f"empty {_text(at)}"
    else:
        lists = [p for p in nodes if isinstance(_get(doc, p), list) and _get(doc, p)]
        if lists:
            at = data.draw(st.sampled_from(lists))
            items = _get(doc, at)
            if kind == "repeat":
                items.append(copy.deepcopy(items[data.draw(st.integers(0, len(items) - 1))]))
                return f"repeat an item of {_text(at)}"
            i, j = data.draw(st.integers(0, len(items) - 1)), data.draw(st.integers(0, len(items) - 1))
            items[i], items[j] = items[j], items[i]
            return f"swap {_text(at)}[{i}] and [{j}]"
    return "nothing"


def _dumps(node: Any, duplicate: tuple[Path_, str, Any] | None, at: Path_ = ()) -> str:
    """JSON text of node; with duplicate (object path, key, value) that object gives key again."""
    if isinstance(node, dict):
        members = [f"{json.dumps(k)}: {_dumps(v, duplicate, at + (k,))}" for k, v in node.items()]
        if duplicate is not None and duplicate[0] == at:
            members.append(f"{json.dumps(duplicate[1])}: {json.dumps(duplicate[2])}")
        return "{" + ", ".join(members) + "}"
    if isinstance(node, list):
        return "[" + ", ".join(_dumps(v, duplicate, at + (i,)) for i, v in enumerate(node)) + "]"
    return json.dumps(node)


def _draw_config(data, directory: Path) -> tuple[dict, Path, str | None, list[str]]:
    """A mutated configuration written to directory: (document, file, duplicated key path or
    None, mutations)."""
    seed = data.draw(st.sampled_from(sorted(SEEDS)))
    doc = copy.deepcopy(SEEDS[seed])
    done = [seed] + [_mutate(data, doc) for _ in range(data.draw(st.integers(1, 3)))]
    duplicate = None
    if data.draw(st.sampled_from([False] * 7 + [True])):  # one in eight, about
        members = [p for p in _nodes(doc) if p and isinstance(_get(doc, p[:-1]), dict)]
        if members:
            at = data.draw(st.sampled_from(members))
            value = data.draw(st.one_of(st.just(_get(doc, at)), VALUES))
            duplicate = (at[:-1], at[-1], value)
            done.append(f"duplicate {_text(at)}")
            # The text gives the key twice; a lenient reader would keep the last value.
            _get(doc, at[:-1])[at[-1]] = value
    for name in ("crm.openapi.json", "erp.openapi.json"):
        if not (directory / name).exists():
            shutil.copy(EXAMPLES / name, directory / name)
    path = directory / "mutated.json"
    path.write_text(_dumps(doc, duplicate))
    return doc, path, _text(duplicate[0] + (duplicate[1],)) if duplicate else None, done


def assert_refusal_names_paths(problems: list[tuple[str, str]], doc: dict, duplicated: str | None,
                               done: list[str]) -> None:
    assert problems, done
    for path, message in problems:
        assert points_into(doc, path), (path, message, done)
    if duplicated is not None:
        assert (duplicated, "is given more than once (duplicate key)") in problems, (problems, done)


def fingerprint(conn) -> dict:
    """Every row of the configuration tables with its xmin: any write, even of equal values,
    shows up."""
    return {table: conn.exec_driver_sql(
        f"SELECT xmin::text, to_jsonb(t)::text FROM {table} AS t ORDER BY id").all()
        for table in TABLES}


# ---------------------------------------------------------------- the properties

@settings(max_examples=IN_PROCESS_EXAMPLES, **SETTINGS)
@given(data=st.data())
def test_mutated_configuration_applies_or_names_every_problem(app, configured, tmp_path, data):
    """In-process, as the command runs it: load the file, then `check` in a read-only
    transaction of its own and `apply` in a savepoint of a transaction rolled back afterwards,
    so every example starts from the same configured database."""
    doc, path, duplicated, done = _draw_config(data, tmp_path)
    hub = app.extensions["bailing"]

    def run(do) -> tuple[str, Any]:
        try:
            return "ok", do()
        except Invalid as err:
            return "invalid", err.problems

    loaded = run(lambda: load_file(path))
    if loaded[0] == "invalid":
        assert_refusal_names_paths(loaded[1], doc, duplicated, done)
        event("refused by load_file")  # --hypothesis-show-statistics tells how often
        return
    assert duplicated is None, done
    assert loaded[1] == doc, done

    def checked():
        with hub.db.session() as session:
            return check(session, loaded[1], tmp_path)

    predicted = run(checked)
    with hub.db.engine.connect() as conn:
        outer = conn.begin()
        before = fingerprint(conn)
        session = Session(bind=conn, join_transaction_mode="create_savepoint")
        try:
            outcome = run(lambda: apply(session, loaded[1], tmp_path))
            if outcome[0] == "invalid":
                # Measured before the rollback: nothing was written, not merely undone.
                assert fingerprint(conn) == before, done
                session.rollback()
            else:
                session.flush()
                # A success wrote what it reports: every record it created is there now.
                for table, key, section in KEYS_OF:
                    names = {row[0] for row in conn.exec_driver_sql(f"SELECT {key} FROM {table}")}
                    assert set(outcome[1]["created"][section]) <= names, done
        finally:
            session.close()
            outer.rollback()
        assert fingerprint(conn) == before  # check wrote nothing either

    assert predicted[0] == outcome[0], (predicted, outcome, done)
    event("applied" if outcome[0] == "ok" else "refused by validation")
    if outcome[0] == "invalid":
        assert_refusal_names_paths(outcome[1], doc, None, done)
        assert predicted[1] == outcome[1], done
    else:
        assert predicted[1] == {"checked": True, **outcome[1]}, done
        assert set(outcome[1]) == {"created", "changed", "unchanged", "warnings"}, done


# Its cost is 20 bailing-admin processes; the SQL they reach is the in-process test's above.
@pytest.mark.any_server
@settings(max_examples=PROCESS_EXAMPLES, **SETTINGS)
@given(data=st.data())
def test_mutated_configuration_through_the_command(db_url, configured, sql, tmp_path, data):
    """The real `bailing-admin config apply [--check]` process: exit 0 with a JSON report, or
    exit 1 with a JSON `invalid_request` naming every problem's path and no traceback, the
    configuration tables untouched."""
    doc, path, duplicated, done = _draw_config(data, tmp_path)
    check_only = data.draw(st.booleans())
    before = _committed(sql)

    result = run_cli_process(["config", "apply", str(path), *(["--check"] if check_only else [])],
                             db_url, data_dir=tmp_path / "var")

    assert "Traceback" not in result.stderr, (result.stderr, done)
    if result.returncode == 0:
        assert duplicated is None, done
        report = json.loads(result.stdout)
        assert {"created", "changed", "unchanged", "warnings"} <= set(report), done
        assert report.get("checked", False) is check_only
        if check_only:
            assert _committed(sql) == before, done
        return
    assert result.returncode == 1, (result.returncode, result.stderr, done)
    assert result.stdout == ""
    err = json.loads(result.stderr)
    assert err["error"] == "invalid_request", (err, done)
    assert_refusal_names_paths([(p["path"], p["message"]) for p in err["problems"]], doc,
                               duplicated, done)
    assert _committed(sql) == before, done


def _committed(sql) -> dict:
    return {table: sql(f"SELECT xmin::text, to_jsonb(t)::text FROM {table} AS t ORDER BY id")
            for table in TABLES}


# ---------------------------------------------------------------- the harness itself

def test_every_seed_applies_as_it_is(app, configured, tmp_path):
    """Control: unmutated, each seed is accepted, so refusals above come from the mutations."""
    for name in ("crm.openapi.json", "erp.openapi.json"):
        shutil.copy(EXAMPLES / name, tmp_path / name)
    hub = app.extensions["bailing"]
    for seed, doc in SEEDS.items():
        path = tmp_path / f"{seed}.json"
        path.write_text(_dumps(doc, None))
        with hub.db.session() as session:
            report = check(session, load_file(path), tmp_path)
        assert report["checked"] is True, seed


@pytest.mark.parametrize("path, expected", [
    ("routes[0].tools.agent_direct.write_tools[0]", True),
    ("routes[0].tools.agent_direct.write_tools[1]", False),
    ("routes[0].colour", True),  # a key the object lacks
    ("routes[0].colour.hue", False),
    ("routes[1]", False),
    ("tool_providers[0].openapi.paths./x.get", True),  # inside the referenced file
    ("routes[0].name.first", False),
    ("client_apps[0]name", False),
    ("", False),
])
def test_points_into(path, expected):
    assert points_into(_example(), path) is expected
