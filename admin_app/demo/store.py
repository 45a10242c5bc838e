"""The demo business system's data and operations, in memory: small, but real enough that a
write changes what the next read returns."""
from __future__ import annotations

import copy
import threading
from typing import Any

CUSTOMERS: list[dict[str, Any]] = [
    {"id": "C-100234", "name": "ACME Industrial GmbH", "email": "billing@acme.example", "phone": "+49 30 1234567",
     "status": "active", "segment": "mid_market", "country": "DE", "vat_id": "DE123456789",
     "credit_limit": 5000, "currency": "EUR"},
    {"id": "C-100235", "name": "Northwind Traders", "email": "ap@northwind.example", "phone": None,
     "status": "active", "segment": "smb", "country": "GB", "vat_id": None,
     "credit_limit": 2500, "currency": "GBP"},
    {"id": "C-100236", "name": "Contoso Retail", "email": "finance@contoso.example", "phone": "+1 555 0100",
     "status": "prospect", "segment": "enterprise", "country": "US", "vat_id": None,
     "credit_limit": 0, "currency": "USD"},
]
INVENTORY: list[dict[str, Any]] = [
    {"sku": "ABC-1001", "warehouse_id": "WH-BER", "on_hand": 420, "reserved": 20, "reorder_point": 100},
    {"sku": "ABC-1002", "warehouse_id": "WH-BER", "on_hand": 35, "reserved": 0, "reorder_point": 50},
    {"sku": "XYZ-2001", "warehouse_id": "WH-LON", "on_hand": 1200, "reserved": 150, "reorder_point": 300},
]
WAREHOUSES = [
    {"id": "WH-BER", "name": "Berlin", "country": "DE", "active": True},
    {"id": "WH-LON", "name": "London", "country": "GB", "active": True},
    {"id": "WH-NYC", "name": "New York", "country": "US", "active": False},
]


class NotFound(Exception):
    pass


class DemoStore:
    def __init__(self):
        self.lock = threading.Lock()
        self.customers = {c["id"]: copy.deepcopy(c) for c in CUSTOMERS}
        self.notes: dict[str, list[dict]] = {}
        self.orders: dict[str, dict] = {
            "ORD-000001": {"id": "ORD-000001", "customer_id": "C-100234", "status": "open", "currency": "EUR",
                           "lines": [{"sku": "ABC-1001", "quantity": 10, "unit_price": 12.5}],
                           "shipping_address": {"line1": "Alexanderplatz 1", "city": "Berlin",
                                                "postal_code": "10178", "country": "DE"}},
        }
        self.inventory = {(i["sku"], i["warehouse_id"]): copy.deepcopy(i) for i in INVENTORY}
        self.reservations: list[dict] = []

    # ---- helpers
    def _customer(self, customer_id: str) -> dict:
        if customer_id not in self.customers:
            raise NotFound(f"customer {customer_id}")
        return self.customers[customer_id]

    def _order(self, order_id: str) -> dict:
        if order_id not in self.orders:
            raise NotFound(f"order {order_id}")
        return self.orders[order_id]

    def _stock(self, sku: str, warehouse_id: str | None = None) -> list[dict]:
        rows = [v for (s, w), v in self.inventory.items() if s == sku and (warehouse_id in (None, w))]
        if not rows:
            raise NotFound(f"sku {sku}")
        return rows

    # ---- operations: (params, body) -> (status, json)
    def handle(self, operation: str, params: dict[str, Any], body: Any) -> tuple[int, Any]:
        handler = getattr(self, "op_" + operation, None)
        if handler is None:
            return 501, {"error": "not_implemented", "operation": operation}
        with self.lock:
            try:
                return handler(params, body if isinstance(body, dict) else {})
            except NotFound as err:
                return 404, {"error": "not_found", "message": f"No {err}."}

    def op_health_check(self, p, b):
        return 200, {"status": "ok"}

    def op_customer_search(self, p, b):
        q = str(p.get("q", "")).lower()
        items = [c for c in self.customers.values()
                 if q in c["name"].lower() or q in (c["email"] or "").lower() or q in c["id"].lower()]
        return 200, {"items": items, "total": len(items)}

    def op_customer_get(self, p, b):
        return 200, self._customer(p["customer_id"])

    def op_customer_update_credit_limit(self, p, b):
        customer = self._customer(p["customer_id"])
        customer["credit_limit"] = b["credit_limit"]
        return 200, customer

    def op_customer_delete(self, p, b):
        self._customer(p["customer_id"])["status"] = "suspended"
        return 204, None

    def op_customer_contacts_list(self, p, b):
        customer = self._customer(p["customer_id"])
        return 200, {"items": [{"name": customer["name"] + " billing", "email": customer["email"],
                                "role": "billing"}]}

    def op_customer_note_add(self, p, b):
        self._customer(p["customer_id"])
        note = {"id": f"N-{len(self.notes.get(p['customer_id'], [])) + 1:05d}", **b}
        self.notes.setdefault(p["customer_id"], []).append(note)
        return 201, note

    def op_customer_update_email(self, p, b):
        customer = self._customer(p["customer_id"])
        customer["email"] = b.get("email")
        return 200, customer

    def op_customer_merge(self, p, b):
        source = self._customer(b["source_customer_id"])
        target = self._customer(b["target_customer_id"])
        source["status"] = "merged"
        return 200, {"target_customer_id": target["id"], "merged_customer_id": source["id"]}

    def op_customer_export_csv(self, p, b):
        lines = ["id,name,country"] + [f'{c["id"]},{c["name"]},{c["country"]}' for c in self.customers.values()]
        return 200, {"content_type": "text/csv", "rows": len(lines) - 1, "csv": "\n".join(lines)}

    def op_order_list(self, p, b):
        items = [o for o in self.orders.values()
                 if p.get("status") in (None, o["status"]) and p.get("customer_id") in (None, o["customer_id"])]
        return 200, {"items": items[: int(p.get("limit", 50))], "next_cursor": None}

    def op_order_get(self, p, b):
        return 200, self._order(p["order_id"])

    def op_order_create(self, p, b):
        self._customer(b["customer_id"])
        order_id = f"ORD-{len(self.orders) + 1:06d}"
        self.orders[order_id] = {"id": order_id, "status": "open", **b}
        return 201, self.orders[order_id]

    def op_order_cancel(self, p, b):
        order = self._order(p["order_id"])
        if order["status"] == "cancelled":
            return 409, {"error": "already_cancelled"}
        order["status"] = "cancelled"
        return 200, order

    def op_order_update_shipping_address(self, p, b):
        order = self._order(p["order_id"])
        order["shipping_address"] = b
        return 200, order

    def op_inventory_get(self, p, b):
        return 200, {"sku": p["sku"], "levels": self._stock(p["sku"], p.get("warehouse_id"))}

    def op_inventory_search(self, p, b):
        text = str(b.get("text", "")).lower()
        items = [v for v in self.inventory.values() if text in v["sku"].lower()]
        return 200, {"items": items, "next_cursor": None}

    def op_inventory_adjust(self, p, b):
        level = self._stock(p["sku"], b.get("warehouse_id"))[0]
        level["on_hand"] += b["quantity_delta"]
        return 200, level

    def op_inventory_reserve(self, p, b):
        level = self._stock(p["sku"], b.get("warehouse_id"))[0]
        if level["on_hand"] - level["reserved"] < b["quantity"]:
            return 409, {"error": "insufficient_stock"}
        level["reserved"] += b["quantity"]
        reservation = {"id": f"R-{len(self.reservations) + 1:05d}", "sku": p["sku"], **b}
        self.reservations.append(reservation)
        return 201, reservation

    def op_order_import(self, p, b):
        rows = [line.split(",") for line in b["csv"].splitlines()[1:] if line.strip()]
        if b.get("dry_run"):
            return 200, {"dry_run": True, "rows": len(rows)}
        created = []
        for row in rows[:50]:
            order_id = f"ORD-{len(self.orders) + 1:06d}"
            self.orders[order_id] = {"id": order_id, "customer_id": row[0], "status": "open",
                                     "lines": [{"sku": row[1],
                                                "quantity": int(row[2]) if row[2:3] and row[2].isdigit() else 1,
                                                "unit_price": 0}], "currency": row[4] if len(row) > 4 else "EUR"}
            created.append(order_id)
        return 201, {"rows": len(rows), "created": created}

    def op_warehouse_list(self, p, b):
        items = [w for w in WAREHOUSES if p.get("country") in (None, w["country"])]
        return 200, {"items": items}
