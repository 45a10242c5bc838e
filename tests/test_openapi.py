"""The published OpenAPI documents: served, valid OpenAPI 3.1, and true to the routes: every
registered API route is documented and every documented operation exists."""
from __future__ import annotations

import re

import pytest
from jsonschema.validators import validator_for

from admin_app import create_app
from admin_app.openapi import DOCUMENTS, REFUSAL_ONLY_ENDPOINTS, document

IGNORED_METHODS = {"HEAD", "OPTIONS"}
HTTP_METHODS = {"get", "put", "post", "delete", "patch", "head", "options", "trace"}


def _openapi_path(rule: str) -> str:
    """Werkzeug's `<conv:name>` placeholders as OpenAPI's `{name}`."""
    return re.sub(r"<(?:[^:<>]+:)?([^<>]+)>", r"{\1}", rule)


def registered_operations(prefix: str) -> set[tuple[str, str]]:
    app = create_app({"database_url": "postgresql://unused/unused"})
    found = set()
    for rule in app.url_map.iter_rules():
        if rule.endpoint in REFUSAL_ONLY_ENDPOINTS or rule.endpoint.startswith("openapi."):
            continue
        if not (rule.rule == prefix or rule.rule.startswith(prefix + "/")):
            continue
        for method in rule.methods - IGNORED_METHODS:
            found.add((method.lower(), _openapi_path(rule.rule)[len(prefix):] or "/"))
    return found


def documented_operations(doc: dict) -> set[tuple[str, str]]:
    return {(method, path) for path, item in doc["paths"].items()
            for method in item if method in HTTP_METHODS}


@pytest.mark.parametrize("prefix", sorted(DOCUMENTS))
def test_every_route_is_documented_and_every_documented_operation_exists(prefix):
    doc = document(prefix)
    registered = registered_operations(prefix)
    documented = documented_operations(doc)
    assert registered, f"no routes under {prefix}"
    assert registered - documented == set(), "routes missing from the document"
    assert documented - registered == set(), "documented operations with no route"


@pytest.mark.parametrize("prefix", sorted(DOCUMENTS))
def test_document_is_openapi_3_1_with_the_prefix_as_server(prefix):
    doc = document(prefix)
    assert doc["openapi"].startswith("3.1.")
    assert doc["servers"] == [{"url": prefix}]
    assert doc["info"]["title"] and doc["info"]["version"]
    operation_ids = [op["operationId"] for item in doc["paths"].values()
                     for method, op in item.items() if method in HTTP_METHODS]
    assert len(operation_ids) == len(set(operation_ids)), "operationId must be unique"
    for path, item in doc["paths"].items():
        for method, op in item.items():
            if method not in HTTP_METHODS:
                continue
            assert op.get("responses"), f"{method} {path} documents no response"
            for placeholder in re.findall(r"{([^}]+)}", path):
                params = op.get("parameters", []) + item.get("parameters", [])
                assert any(p.get("in") == "path" and p.get("name") == placeholder
                           for p in params), f"{method} {path}: {placeholder} undeclared"


@pytest.mark.parametrize("prefix", sorted(DOCUMENTS))
def test_every_schema_in_the_document_is_a_valid_json_schema(prefix):
    doc = document(prefix)
    cls = validator_for({"$schema": "https://json-schema.org/draft/2020-12/schema"})
    for schema in doc.get("components", {}).get("schemas", {}).values():
        cls.check_schema(schema)


@pytest.mark.parametrize("prefix", sorted(DOCUMENTS))
def test_document_is_served_at_prefix_openapi_json(server, prefix):
    response = server.get(f"{prefix}/openapi.json")
    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("application/json")
    assert response.json() == document(prefix)
