"""The demo hub configuration: a CRM and an ERP, each a client app with its routes, both tool
providers served by the demo business system."""
from __future__ import annotations

from ..resources import EXAMPLES_DIR as EXAMPLES


def demo_config(business_url: str) -> dict:
    return {
        "tool_providers": [
            {"name": "demo-crm", "base_url": business_url + "/crm", "openapi": str(EXAMPLES / "crm.openapi.json"),
             "secret_env": "DEMO_CRM_SECRET", "timeout_ms": 10000},
            {"name": "demo-erp", "base_url": business_url + "/erp", "openapi": str(EXAMPLES / "erp.openapi.json"),
             "secret_env": "DEMO_ERP_SECRET", "timeout_ms": 10000},
        ],
        "routes": [
            {"route_key": "customers", "name": "Customer desk", "description": "Look after customer accounts.",
             "enabled": True, "audience": {"enabled": True, "tenants": ["tenant-7", "tenant-9"]},
             "target_config": {"system_prompt": "You help the customer desk of the demo CRM.",
                               "model": "any-local-model"},
             "agent_client": {"enabled": True, "instructions": "Be brief. Ask before changing money matters.",
                              "memory": {"recent_messages": 12}, "knowledge": {"enabled": True, "top_k": 3}},
             "tools": {"sources": [{"provider": "demo-crm", "allow": ["customer.read", "customer.write"]}],
                       "agent_direct": {"enabled": True,
                                        "write_tools": ["customer_update_credit_limit", "customer_note_add",
                                                        "customer_update_email"],
                                        "force_approval_tools": ["customer_update_email"]}}},
            {"route_key": "orders", "name": "Order desk", "description": "Orders and stock.",
             "enabled": True, "audience": {"enabled": False},
             "target_config": {"system_prompt": "You help the order desk of the demo ERP."},
             "agent_client": {"enabled": True, "knowledge": {"enabled": True, "top_k": 3}},
             "tools": {"sources": [{"provider": "demo-erp", "allow": ["*"]}],
                       "agent_direct": {"enabled": True,
                                        "write_tools": ["order_create", "order_cancel", "order_import",
                                                        "inventory_adjust", "inventory_reserve"]}},
             # An order desk decision is due within the working week; an import within a day.
             "approvals": {"ttl_seconds": 5 * 24 * 3600, "tool_ttl_seconds": {"order_import": 24 * 3600}}},
        ],
        "client_apps": [
            {"app_id": "crm-demo", "name": "Demo CRM", "allowed_routes": ["customers"], "enabled": True,
             "agent_authorize_url": business_url + "/consent/crm/authorize"},
            {"app_id": "erp-demo", "name": "Demo ERP", "allowed_routes": ["orders"], "enabled": True,
             "agent_authorize_url": business_url + "/consent/erp/authorize"},
        ],
    }
