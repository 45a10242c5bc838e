"""Who changed retention, and through which door, for the configuration-change log: the admin
API (the admin, its method and path), the console (the admin, POST, the API path it matches) or
the command line (`cli:<login>`, a verb). The service records its own row (record_object), so
the admin API's hook adds no plain one beside it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from ..config_audit.changes import snapshot
from ..config_audit.log import record_object


@dataclass(frozen=True)
class Door:
    by: str
    method: str
    path: str


def record(db: Session, door: Door, kind: str, key: str, before: Any, after: Any) -> None:
    """One change of a retention object (a mapping of its stored row, or None) as its allowlisted
    settings (config_audit.changes.FIELDS[kind]) before and after."""
    record_object(db, door.by, door.method, door.path, kind, key,
                  None if before is None else snapshot(kind, before),
                  None if after is None else snapshot(kind, after))
