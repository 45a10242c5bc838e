"""Failed sign-ins slow guessing without letting a stranger lock a real user out.

Failures are counted twice: per account and per client address.
- Per account, the answer is only delayed, by a time that grows with the failures and is
  bounded: the right password, typed by the real user from their own address, still works after
  any number of a stranger's failures.
- Per address, once an address has failed many times it must wait before its next attempt
  (a window that doubles and is bounded); attempts inside the window are answered 429 without
  checking the password. Only the stranger's own address is held back.
Names that belong to no admin are counted in one of a fixed number of buckets, so typed names
add no rows; addresses are counted per IPv4 address or IPv6 /64, and every row is forgotten once
its last failure is old.

An attempt on a name that belongs to no admin is checked against a hash made here, so it costs
the same time as a wrong password and the answer does not reveal who exists."""
from __future__ import annotations

import hashlib
import ipaddress
import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select, text
from sqlalchemy.orm import Session

from ..canonical import utc_now
from .admins import hash_password
from .models import Admin

ACCOUNT_FREE_FAILURES = 3      # failures answered at full speed
ACCOUNT_DELAY_STEP = 1.0       # seconds added per further failure
ACCOUNT_MAX_DELAY = 5.0        # the longest an answer is held back
ADDRESS_FREE_FAILURES = 10     # failures from one address before it must wait between attempts
ADDRESS_MAX_WAIT = 60.0        # the longest wait window, in seconds
FORGET_AFTER = timedelta(minutes=15)
UNKNOWN_BUCKETS = 64


# Made once per process, when the console is set up, never while someone waits to sign in.
_NO_ADMIN_HASH = hash_password("not a real password, only spends the same time")


@dataclass(frozen=True)
class Counts:
    account: int
    address: int
    address_last_failure: datetime | None


@dataclass(frozen=True)
class Attempt:
    """What one sign-in needs before the password is checked."""

    admin_id: int | None  # None: no admin has this name
    password_hash: str  # the admin's, or one that costs the same to verify
    account: str
    address: str
    counts: Counts


def attempt(db: Session, username: str, remote_addr: str | None) -> Attempt:
    """The admin the name belongs to (if any) and the failures counted against the attempt."""
    admin = db.execute(select(Admin.id, Admin.password_hash).where(Admin.username == username)).first()
    admin_id, password_hash = (admin.id, admin.password_hash) if admin else (None, _NO_ADMIN_HASH)
    account, address = account_key(admin_id, username), address_key(remote_addr)
    return Attempt(admin_id, password_hash, account, address, counts(db, account, address))


def admin_to_sign_in(db: Session, attempt: Attempt) -> Admin | None:
    """The attempt's admin as it is now, unless it is gone or disabled since it was looked up."""
    admin = db.get(Admin, attempt.admin_id) if attempt.admin_id is not None else None
    return admin if admin is not None and not admin.disabled else None


def account_key(admin_id: int | None, username: str) -> str:
    if admin_id is not None:
        return f"admin:{admin_id}"
    bucket = int.from_bytes(hashlib.sha256(username.encode("utf-8", "replace")).digest()[:4], "big")
    return f"unknown:{bucket % UNKNOWN_BUCKETS}"


def address_key(address: str | None) -> str:
    try:
        ip = ipaddress.ip_address(address or "")
    except ValueError:
        return "address:unknown"
    if ip.version == 6:
        if ip.ipv4_mapped is not None:
            return f"address:{ip.ipv4_mapped}"
        return "address:" + str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return f"address:{ip}"


def counts(db: Session, account: str, address: str) -> Counts:
    rows = {r.key: r for r in db.execute(
        text("SELECT key, failures, last_failure_at FROM bz_sign_in_failures "
             "WHERE key IN (:a, :b) AND last_failure_at > :since"),
        {"a": account, "b": address, "since": utc_now() - FORGET_AFTER})}
    addr = rows.get(address)
    return Counts(rows[account].failures if account in rows else 0,
                  addr.failures if addr else 0, addr.last_failure_at if addr else None)


def account_delay(failures: int) -> float:
    """Seconds to hold back the answer to an attempt on an account with this many failures."""
    if failures < ACCOUNT_FREE_FAILURES:
        return 0.0
    return min((failures - ACCOUNT_FREE_FAILURES + 1) * ACCOUNT_DELAY_STEP, ACCOUNT_MAX_DELAY)


def address_wait(c: Counts) -> int:
    """Whole seconds this address must still wait before its next attempt (0: it may try now)."""
    if c.address < ADDRESS_FREE_FAILURES or c.address_last_failure is None:
        return 0
    window = min(2.0 ** (c.address - ADDRESS_FREE_FAILURES), ADDRESS_MAX_WAIT)
    remaining = (c.address_last_failure + timedelta(seconds=window) - utc_now()).total_seconds()
    return max(0, math.ceil(remaining))


def failed(db: Session, account: str, address: str) -> None:
    now = utc_now()
    db.execute(text("DELETE FROM bz_sign_in_failures WHERE last_failure_at < :old"),
               {"old": now - FORGET_AFTER})
    for key in sorted((account, address)):  # one order everywhere: no deadlock between attempts
        db.execute(text("INSERT INTO bz_sign_in_failures (key, failures, last_failure_at) "
                        "VALUES (:k, 1, :now) ON CONFLICT (key) DO UPDATE "
                        "SET failures = bz_sign_in_failures.failures + 1, last_failure_at = :now"),
                   {"k": key, "now": now})


def succeeded(db: Session, account: str, address: str) -> None:
    db.execute(text("DELETE FROM bz_sign_in_failures WHERE key IN (:a, :b)"),
               {"a": account, "b": address})
