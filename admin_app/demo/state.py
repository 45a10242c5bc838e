"""What the demo remembers between runs (in the data folder, mode 0600): its signing secrets, the
demo admins' generated passwords and Client Tokens, and (one file each, as the SDK stores them)
its agents' sessions, so a second run reuses them."""
from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

ROLES = ("admin", "auditor", "approver", "support")


class DemoState:
    def __init__(self, data_dir: Path):
        self.path = Path(data_dir) / "demo-state.json"
        self.data: dict = json.loads(self.path.read_text()) if self.path.exists() else {}
        self.data.setdefault("secrets", {"crm": secrets.token_urlsafe(32), "erp": secrets.token_urlsafe(32)})
        self.data.setdefault("control", secrets.token_urlsafe(24))
        self.data.setdefault("passwords", {role: secrets.token_urlsafe(12) for role in ROLES})
        self.data.pop("sessions", None)  # kept by the SDK's session files now
        self.data.setdefault("client_tokens", {})

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump(self.data, handle, indent=2)

    def agent_store(self, name: str) -> Path:
        return self.path.parent / "demo-agents" / f"{name}.json"

    def reset(self) -> None:
        self.data["client_tokens"] = {}
        folder = self.path.parent / "demo-agents"
        if folder.is_dir():
            for stored in folder.iterdir():
                stored.unlink()
