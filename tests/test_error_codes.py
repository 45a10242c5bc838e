"""The error-code registry (admin_app/error_codes.py) is the one place a code is defined.

An AST walk over admin_app checks that every raise names a registered code, that every
registered code is raised somewhere, and that the OpenAPI documents name only registered codes,
each under the registry's HTTP status. ApiError itself is tested at the end.
"""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from admin_app import error_codes, errors, surfaces
from admin_app.config import PROJECT_ROOT
from admin_app.error_codes import CODES, COMMAND_CODES
from admin_app.errors import ApiError, invalid_field, invalid_request
from admin_app.validation import Invalid

PACKAGE = PROJECT_ROOT / "admin_app"
OPENAPI = sorted((PACKAGE / "openapi").glob("*.json"))
# The modules that pass codes on in variables (the handlers, the command runner); everywhere
# else a code is a literal at the raise, so this walk sees every one.
PASS_ON = {PACKAGE / "errors.py", PACKAGE / "surfaces.py", PACKAGE / "cli.py"}
# The demo's fake business system answers as a business system, not as the hub.
NOT_THE_HUB = PACKAGE / "demo" / "business.py"


def _modules() -> list[tuple[Path, ast.Module]]:
    return [(path, ast.parse(path.read_text(), str(path)))
            for path in sorted(PACKAGE.rglob("*.py")) if path != NOT_THE_HUB]


def _called(node: ast.Call) -> str | None:
    func = node.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def _where(path: Path, node: ast.AST) -> str:
    return f"{path.relative_to(PROJECT_ROOT)}:{getattr(node, 'lineno', '?')}"


def raises(modules: list[tuple[Path, ast.Module]]) -> list[tuple[str, Path, ast.Call, ast.expr | None]]:
    """(callee, module, call, first argument) for every ApiError(...) and cli _fail(...)."""
    found = []
    for path, tree in modules:
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _called(node) in ("ApiError", "_fail"):
                first = node.args[0] if node.args else next(
                    (k.value for k in node.keywords if k.arg == "code"), None)
                found.append((_called(node), path, node, first))
    return found


def bad_raises(modules: list[tuple[Path, ast.Module]]) -> list[str]:
    problems = []
    for callee, path, node, first in raises(modules):
        known = CODES if callee == "ApiError" else CODES.keys() | COMMAND_CODES.keys()
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            if first.value not in known:
                problems.append(f"{_where(path, node)}: {first.value!r} is not in error_codes")
        elif path not in PASS_ON:
            problems.append(f"{_where(path, node)}: the code of {callee}(...) must be a string literal")
    return problems


def used_codes(modules: list[tuple[Path, ast.Module]]) -> set[str]:
    """Literal codes at raises, plus every string in the modules that pass codes on."""
    used = {first.value for _, _, _, first in raises(modules)
            if isinstance(first, ast.Constant) and isinstance(first.value, str)}
    for path, tree in modules:
        if path in PASS_ON:
            used |= {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    return used


# ---------------------------------------------------------------- raises in the code

def test_every_raise_names_a_registered_code():
    assert bad_raises(_modules()) == []


def test_every_registered_code_is_raised_somewhere():
    used = used_codes(_modules())
    assert sorted(set(CODES) - used) == [], "registered but never raised: dead entries"
    assert sorted(set(COMMAND_CODES) - used) == [], "registered but never raised: dead entries"


def test_the_walk_catches_an_unknown_or_computed_code(tmp_path):
    source = ('raise ApiError("no_such_code")\n'
              'raise ApiError(code)\n'
              'raise ApiError("not_found")\n'
              '_fail("no_such_command_code")\n')
    module = PACKAGE / "runtime" / "example.py"
    problems = bad_raises([(module, ast.parse(source))])
    assert [p.split(": ", 1)[1] for p in problems] == [
        "'no_such_code' is not in error_codes",
        "the code of ApiError(...) must be a string literal",
        "'no_such_command_code' is not in error_codes",
    ]


def test_the_walk_sees_a_registered_code_nobody_raises():
    tree = ast.parse('raise ApiError("not_found")\n')
    assert used_codes([(PACKAGE / "runtime" / "example.py", tree)]) == {"not_found"}


def test_the_commands_refuse_only_with_registered_codes():
    # Commands share the API codes where the meaning is the same (invalid_request, ...); the
    # two registries never define one code twice.
    assert set(CODES) & set(COMMAND_CODES) == set()


def test_plain_http_errors_map_to_codes_of_their_own_status():
    for status, code in errors._HTTP_CODES.items():
        assert CODES[code].status == status, code


def test_the_areas_internal_error_codes_are_500s():
    # Task control alone fails closed with 503 "retry with the original request" (TASK_CONTROL.md §9.1).
    for _, code in (*surfaces.AREA_INTERNAL_ERROR_CODES, (None, surfaces.INTERNAL_ERROR_CODE)):
        assert CODES[code].status == (503 if code == "TASK_UNAVAILABLE" else 500), code


# ---------------------------------------------------------------- the registry's own claims

def test_every_entry_is_complete():
    for code, entry in CODES.items():
        assert 400 <= entry.status <= 599, code
        assert entry.message.strip() and entry.documented.strip(), code
    for code, command in COMMAND_CODES.items():
        assert command.message.strip() and command.documented.strip(), code


_HUB_FILE = re.compile(r"(openapi/[\w*.-]+\.json|docs/[\w.-]+\.md|README\.md)")


def test_a_code_said_to_be_documented_in_a_hub_file_is_there():
    for code, entry in {**CODES, **COMMAND_CODES}.items():
        if not entry.documented.startswith("hub:"):
            continue
        for name in _HUB_FILE.findall(entry.documented):
            files = sorted((PACKAGE if name.startswith("openapi/") else PROJECT_ROOT).glob(name))
            assert files, f"{code}: {name} does not exist"
            assert any(re.search(rf"\b{re.escape(code)}\b", f.read_text()) for f in files), \
                f"{code} is said to be documented in {name} but is not named there"


# ---------------------------------------------------------------- the OpenAPI documents

_CODES_LIST = re.compile(r"Codes: ((?:`\w+`(?:, )?)+)")
_STATUS_CODE = re.compile(r"`(\d{3}) (\w+)`|\b(\d{3}) `(\w+)`")


def _pointer(*parts: object) -> str:
    return "/" + "/".join(str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def _error_codes_in(node: object) -> list[str]:
    """Codes a response states: the `error` member's enum or const, or an example body's value."""
    found: list[str] = []
    if isinstance(node, dict):
        error = node.get("error")
        if isinstance(error, str):
            found.append(error)
        elif isinstance(error, dict):
            found += [*error.get("enum", []), *([error["const"]] if "const" in error else [])]
        for value in node.values():
            found += _error_codes_in(value)
    elif isinstance(node, list):
        for value in node:
            found += _error_codes_in(value)
    return found


def _descriptions(node: object, path: tuple[object, ...] = ()) -> list[tuple[tuple[object, ...], str]]:
    if isinstance(node, dict):
        out = [(path, node["description"])] if isinstance(node.get("description"), str) else []
        for key, value in node.items():
            out += _descriptions(value, (*path, key))
        return out
    if isinstance(node, list):
        return [d for i, value in enumerate(node) for d in _descriptions(value, (*path, i))]
    return []


def documented_codes(doc: dict) -> list[tuple[str, int | None, str]]:
    """(code, status or None, JSON pointer) for every error code a document names.

    A response's status comes from where it is declared; a shared response (components) takes the
    status of every operation that refers to it. Codes in prose say their status ("`404 x`",
    "413 `x`"), or are a response's "Codes: `x`, `y`." list."""
    found: list[tuple[str, int | None, str]] = []
    uses: dict[str, set[int]] = {}
    for route, item in doc.get("paths", {}).items():
        for method, operation in item.items():
            for status, response in operation.get("responses", {}).items():
                where = ("paths", route, method, "responses", status)
                ref = response.get("$ref", "")
                if ref.startswith("#/components/responses/"):
                    uses.setdefault(ref.rsplit("/", 1)[1], set()).add(int(status))
                found += [(code, int(status), _pointer(*where)) for code in _error_codes_in(response)]
                for match in _CODES_LIST.finditer(response.get("description", "")):
                    found += [(code, int(status), _pointer(*where, "description"))
                              for code in re.findall(r"`(\w+)`", match.group(1))]
    for name, response in doc.get("components", {}).get("responses", {}).items():
        where = _pointer("components", "responses", name)
        codes = _error_codes_in(response)
        if codes and name not in uses:
            found += [(code, None, where + " (referred to by no operation)") for code in codes]
        found += [(code, status, where) for code in codes for status in sorted(uses.get(name, ()))]
    for path, text in _descriptions(doc):
        for match in _STATUS_CODE.finditer(text):
            status, code = (match.group(1), match.group(2)) if match.group(1) else (match.group(3), match.group(4))
            found.append((code, int(status), _pointer(*path, "description")))
    return found


def contract_problems(doc: dict) -> list[str]:
    problems = []
    for code, status, where in documented_codes(doc):
        if code not in CODES:
            problems.append(f"{where}: {code} is not in error_codes")
        elif status is None:
            problems.append(f"{where}: {code} is documented under no status")
        elif code != "http_error" and CODES[code].status != status:
            problems.append(f"{where}: {code} is {CODES[code].status} in error_codes, {status} here")
    return problems


@pytest.mark.parametrize("path", OPENAPI, ids=lambda p: p.name)
def test_the_documents_name_registered_codes_under_their_status(path):
    assert contract_problems(json.loads(path.read_text())) == []


@pytest.mark.parametrize("path", OPENAPI, ids=lambda p: p.name)
def test_the_documents_are_read_for_codes_at_all(path):
    # Against a reader that silently finds nothing: every document names a dozen codes or more.
    assert len({code for code, _, _ in documented_codes(json.loads(path.read_text()))}) >= 10


def test_a_document_that_disagrees_with_the_registry_fails():
    def operation(status: str, schema: dict, description: str = "x") -> dict:
        return {"responses": {status: {"description": description,
                                       "content": {"application/json": {"schema": schema}}}}}

    doc = {
        "paths": {
            "/a": {"get": operation("404", {"properties": {"error": {"const": "not_found"}}})},
            "/b": {"get": operation("409", {"properties": {"error": {"enum": ["not_found", "made_up"]}}})},
            "/c": {"get": {"responses": {"400": {"$ref": "#/components/responses/Shared"}}}},
            "/d": {"post": operation("403", {}, "Codes: `forbidden`, `expired`.")},
        },
        "components": {"responses": {
            "Shared": {"content": {"application/json": {"example": {"error": "unauthorized"}}}},
            "Orphan": {"content": {"application/json": {"schema": {"properties": {"error": {
                "const": "invalid_request"}}}}}},
        }},
        "x-note": {"description": "A bad id is `400 not_found`."},
    }
    assert sorted(contract_problems(doc)) == sorted([
        "/paths/~1b/get/responses/409: not_found is 404 in error_codes, 409 here",
        "/paths/~1b/get/responses/409: made_up is not in error_codes",
        "/components/responses/Shared: unauthorized is 401 in error_codes, 400 here",
        "/paths/~1d/post/responses/403/description: expired is 410 in error_codes, 403 here",
        "/components/responses/Orphan (referred to by no operation): invalid_request is documented under no status",
        "/x-note/description: not_found is 404 in error_codes, 400 here",
    ])


# ---------------------------------------------------------------- ApiError

def test_an_unknown_code_fails_at_the_raise():
    with pytest.raises(KeyError):
        ApiError("no_such_code")


def test_the_status_and_default_message_come_from_the_registry():
    err = ApiError("run_not_found")
    assert (err.status, err.code, err.message) == (404, "run_not_found", CODES["run_not_found"].message)
    assert err.body() == {"error": "run_not_found", "message": "No such run."}


def test_a_message_of_its_own_and_extra_fields_join_the_envelope():
    err = ApiError("conversation_audit_limit", "Too many events.", max_events=50)
    assert err.status == 413
    assert err.body() == {"error": "conversation_audit_limit", "message": "Too many events.", "max_events": 50}


def test_an_empty_message_is_kept_not_replaced_by_the_default():
    assert ApiError("not_found", "").message == ""


def test_one_bad_field_has_the_shape_of_field_validation():
    single = invalid_field("status", "must be one of pending, all")
    checked = invalid_request(Invalid([("status", "must be one of pending, all")]))
    assert single.status == checked.status == 400
    assert single.body() == checked.body() == {
        "error": "invalid_request", "message": "status: must be one of pending, all",
        "problems": [{"path": "status", "message": "must be one of pending, all"}]}


def test_unauthorized_carries_the_bearer_challenge():
    err = errors.unauthorized()
    assert (err.status, err.code, err.headers) == (401, "unauthorized", {"WWW-Authenticate": 'Bearer realm="bailing"'})


def test_a_command_code_has_a_default_message_and_an_unknown_one_fails():
    assert error_codes.message_of("schema_missing") == COMMAND_CODES["schema_missing"].message
    assert error_codes.message_of("not_found") == "Not found."
    with pytest.raises(KeyError):
        error_codes.message_of("no_such_code")


# ---------------------------------------------------------------- the API surfaces

def test_every_path_under_an_api_root_answers_in_the_envelope():
    assert all(surfaces.is_api_path(p) for p in ("/agent-api", "/agent-api/v2/anything", "/agent-auth/v1/token",
                                                 "/admin/api/tool-approvals"))
    assert not any(surfaces.is_api_path(p) for p in ("/agent-apis", "/admin/apiary", "/console", "/health/live"))


def test_an_area_with_its_own_internal_error_code_keeps_it():
    assert surfaces.internal_error_code("/agent-api/v1/tool-invocations/x/resume") == "agent_tool_internal_error"
    assert surfaces.internal_error_code("/admin/api/conversation-audits") == "conversation_audit_internal_error"
    assert surfaces.internal_error_code("/agent-api/v1/workspaces") == "internal_error"


def test_every_api_route_mounts_under_its_surface_prefix():
    from admin_app import create_app

    prefixes = tuple(surface.prefix for surface in surfaces.SURFACES)
    rules = [rule.rule for rule in create_app().url_map.iter_rules() if surfaces.is_api_path(rule.rule)]
    assert rules and [r for r in rules if not r.startswith(prefixes)] == []
