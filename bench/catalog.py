"""Turn preparation and capability search over a catalog of 1,000 tools, beside the example's.

A generated OpenAPI document with 1,000 operations (reads and writes over fifty resources, each
with its ACC block) is applied with `bailing-admin config apply` as a provider of route `big`;
the example configuration (examples/hub.json, eight CRM operations) gives route `customers`.
A session on both routes then times, in alternating rounds:
  POST /agent-api/v1/workspaces/{route}/turns              (a new turn each time)
  POST /agent-api/v1/workspaces/{route}/capabilities/search

There is no fixed target: the figures show what a large catalog costs against a small one.

    python bench/catalog.py [--tools 1000] [--repetitions 100] [--workers 2]
"""
from __future__ import annotations

import argparse
import itertools
import json

import requests

from common import EXAMPLES, bearer, bench_hub, expect, finish, interleaved, ratio

RESOURCES = ["customer", "invoice", "order", "shipment", "warehouse", "supplier", "contract", "ticket",
             "payment", "refund", "product", "price_list", "discount", "campaign", "lead", "opportunity",
             "quote", "employee", "timesheet", "expense", "asset", "license", "vendor", "purchase_order",
             "receipt", "budget", "project", "task", "milestone", "document", "approval_rule", "tax_code",
             "currency", "bank_account", "ledger_entry", "cost_center", "region", "store", "carrier",
             "return", "claim", "subscription", "plan", "usage_record", "meter", "alert", "report",
             "dashboard", "webhook", "audit_entry"]
READ_ACTIONS = ["get", "list", "search", "export_summary", "history", "count", "lookup_by_code",
                "status", "related", "compare", "forecast", "aging"]
WRITE_ACTIONS = ["create", "update", "archive", "restore", "assign", "close", "reopen", "tag"]
QUERIES = ["find the open invoices of customer Acme", "cancel the shipment to Berlin",
           "how many tickets are waiting", "update the price list for spring", "export the ledger",
           "who approved the purchase order", "create a refund for order 4711"]


def operation(resource: str, action: str, write: bool) -> tuple[str, str, dict]:
    name = f"{resource}_{action}"
    words = resource.replace("_", " ")
    description = (f"{action.replace('_', ' ').capitalize()} of a {words}. Works on the {words} records "
                   f"of the tenant; results are limited to what the subject may see in the {words} module.")
    acc = {"version": 1, "enabled": True, "scope": f"{resource}.{'write' if write else 'read'}",
           "risk": {"level": "medium" if write else "low"},
           "execution": {"readonly": not write, "idempotent": not write, "timeout_ms": 5000},
           "guidance": {"when_to_use": f"When the user asks to {action.replace('_', ' ')} a {words}.",
                        "returns": f"The {words} as JSON."}}
    if write:
        acc["subject"] = {"required": True}
        op = {"operationId": name, "summary": f"{action} {words}", "description": description,
              "requestBody": {"required": True, "content": {"application/json": {"schema": {
                  "type": "object", "required": ["id"], "additionalProperties": False,
                  "properties": {"id": {"type": "string", "maxLength": 64},
                                 "note": {"type": "string", "maxLength": 2000}}}}}},
              "responses": {"200": {"description": "Done"}}, "x-agent-capability": acc}
        return f"/{resource}s/{action}", "post", op
    op = {"operationId": name, "summary": f"{action} {words}", "description": description,
          "parameters": [{"name": "q", "in": "query", "required": False, "description": "Filter text.",
                          "schema": {"type": "string", "maxLength": 200}}],
          "responses": {"200": {"description": "Found"}}, "x-agent-capability": acc}
    return f"/{resource}s/{action}", "get", op


def big_document(count: int) -> tuple[dict, list[str]]:
    """An OpenAPI 3.1 document of `count` operations, and the names of its writes."""
    paths: dict[str, dict] = {}
    writes = []
    combos = [(r, a, False) for r in RESOURCES for a in READ_ACTIONS] + \
             [(r, a, True) for r in RESOURCES for a in WRITE_ACTIONS]
    combos.sort(key=lambda c: (c[0], c[1]))
    if count > len(combos):
        raise SystemExit(f"at most {len(combos)} tools")
    for resource, action, write in combos[:count]:
        path, method, op = operation(resource, action, write)
        paths.setdefault(path, {})[method] = op
        if write:
            writes.append(op["operationId"])
    doc = {"openapi": "3.1.0", "info": {"title": "Big ERP", "version": "1.0.0"}, "paths": paths}
    return doc, writes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tools", type=int, default=1000)
    parser.add_argument("--repetitions", type=int, default=100)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()

    with bench_hub(args.workers) as (_db_url, operator, hub, folder):
        operator("config", "apply", str(EXAMPLES / "hub.json"))
        doc, writes = big_document(args.tools)
        (folder / "big.openapi.json").write_text(json.dumps(doc), "utf-8")
        hub_doc = json.loads((EXAMPLES / "hub.json").read_text("utf-8"))
        client = hub_doc["client_apps"][0]
        client["allowed_routes"] = ["customers", "big"]
        operator.apply({
            "tool_providers": [{"name": "big-erp", "base_url": "http://127.0.0.1:9/erp",
                                "openapi": str(folder / "big.openapi.json"), "secret_env": "DEMO_ERP_SECRET"}],
            "routes": [{"route_key": "big", "name": "Everything desk", "enabled": True,
                        "audience": {"enabled": False},
                        "agent_client": {"enabled": True},
                        "tools": {"sources": [{"provider": "big-erp", "allow": ["*"]}],
                                  "agent_direct": {"enabled": True, "write_tools": writes}}}],
            "client_apps": [client],
        }, folder)
        session = operator.session("crm-demo", "customers,big")
        http = requests.Session()
        http.headers.update(bearer(session["access_token"]))
        counter = itertools.count()

        def turn(route: str):
            def call():
                n = next(counter)
                return http.post(f"{hub.url}/agent-api/v1/workspaces/{route}/turns", timeout=60, json={
                    "client_conversation_id": f"conv-{route}-{n % 20}", "client_turn_id": f"turn-{n}",
                    "user_message_id": f"msg-{n}", "user_input": QUERIES[n % len(QUERIES)]})
            return call

        def search(route: str):
            def call():
                n = next(counter)
                return http.post(f"{hub.url}/agent-api/v1/workspaces/{route}/capabilities/search",
                                 timeout=60, json={"query": QUERIES[n % len(QUERIES)]})
            return call

        found = expect(search("big")()).json()
        total = found["discovery"]["authorized_total"]
        if total != args.tools:
            raise RuntimeError(f"route big shows {total} tools, expected {args.tools}")
        small_total = expect(search("customers")()).json()["discovery"]["authorized_total"]
        results = interleaved({"turn_small": turn("customers"), "turn_big": turn("big"),
                               "search_small": search("customers"), "search_big": search("big")},
                              args.repetitions)

    print(f"catalog of {args.tools} tools (route big) against {small_total} (route customers) "
          f"(gunicorn, {args.workers} workers)")
    figures = {"tools": args.tools, "small_tools": small_total, "workers": args.workers,
               "repetitions": args.repetitions}
    for kind in ("turn", "search"):
        small, big = results[f"{kind}_small"], results[f"{kind}_big"]
        for label, c in (("small", small), ("big", big)):
            print(f"  {kind:6} {label:5}: median {c['median_ms']} ms, p95 {c['p95_ms']} ms, {c['bytes']} bytes")
        r = ratio(big["median_ms"], small["median_ms"])
        print(f"  {kind:6} big/small median ratio {r}")
        figures[kind] = {"small": small, "big": big, "big_over_small": r}
    finish("catalog", figures)


if __name__ == "__main__":
    main()
