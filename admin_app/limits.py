"""Every limit of the published contract, in one place: the validators, the demo, the benchmarks
and the tests import them from here, and tests/test_limits.py checks that the OpenAPI documents
state the same numbers. Change a limit here and nowhere else.

Text lengths are UTF-16 code units (what the specs count), sizes are bytes of UTF-8.
"""
from __future__ import annotations

# ---------------------------------------------------------------- conversation audit
AUDIT_BATCH_MAX_EVENTS = 50                    # events in one append
AUDIT_TEXT_MAX_UNITS = 64000                   # one message's content
AUDIT_BATCH_TEXT_MAX_BYTES = 256 * 1024        # content of one append
AUDIT_ARCHIVE_MAX_EVENTS = 20000               # events in one archive
AUDIT_ARCHIVE_MAX_TEXT_BYTES = 16 * 1024 * 1024
AUDIT_ENVELOPE_MAX_BYTES = 2 * 1024 * 1024     # any POST body of the surface
AUDIT_MAX_MEMBERS = 64
AUDIT_LABEL_MAX_UNITS = 128
# Admin API paging: (default, minimum, maximum); values outside are clamped, never refused.
AUDIT_LIST_LIMIT = (50, 1, 100)
AUDIT_EVENTS_LIMIT = (100, 1, 200)
