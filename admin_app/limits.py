"""Every limit of the published contract, in one place: the validators, the demo, the benchmarks
and the tests import them from here, and tests/test_limits.py checks that the OpenAPI documents
state the same numbers. Change a limit here and nowhere else.

A contract limit is one a client can meet: a refusal (or a clamp) on one of the three APIs, in
the configuration a hub accepts, or on a business system's side of a call. Tunables nobody
outside sees (cache sizes, the console's display bounds) stay beside the code that uses them,
except the bounds that keep untrusted text from growing a console page, which are at the end.
The agent SDK (admin_app/agent_sdk) is a client and keeps its own copy of what it checks.

Text lengths are as the validators count them: UTF-16 code units (what the specs count) unless
the name says bytes, which are bytes of UTF-8.
"""
from __future__ import annotations

KIB = 1024
MIB = 1024 * KIB

# ---------------------------------------------------------------- conversation audit
AUDIT_BATCH_MAX_EVENTS = 50                    # events in one append
AUDIT_TEXT_MAX_UNITS = 64000                   # one message's content
AUDIT_BATCH_TEXT_MAX_BYTES = 256 * KIB         # content of one append
AUDIT_ARCHIVE_MAX_EVENTS = 20000               # events in one archive
AUDIT_ARCHIVE_MAX_TEXT_BYTES = 16 * MIB
AUDIT_ENVELOPE_MAX_BYTES = 2 * MIB             # any POST body of the surface
AUDIT_MAX_MEMBERS = 64
AUDIT_LABEL_MAX_UNITS = 128
# Admin API paging: (default, minimum, maximum); values outside are clamped, never refused.
AUDIT_LIST_LIMIT = (50, 1, 100)
AUDIT_EVENTS_LIMIT = (100, 1, 200)

# ---------------------------------------------------------------- agent runtime: turns and runs
RUNTIME_BODY_MAX_BYTES = 512 * KIB             # turns and completions
SEARCH_BODY_MAX_BYTES = 8 * KIB                # capability and knowledge search
SMALL_BODY_MAX_BYTES = 64 * KIB                # the runtime's other POST bodies
USER_INPUT_MAX = 64000
COMPLETION_CONTENT_MAX = 64000
RUN_NAME_MAX = 191                             # a completion's model and runtime
CLIENT_ID_MAX = 128                            # client conversation, turn and message ids
PAGE_CONTEXT_MAX_BYTES = 16 * KIB              # UTF-8 bytes of JSON.stringify(page_context)
PAGE_HINT_MAX = 500                            # each page field that steers the turn
TURN_MAX_RENDERERS = 20
MEMORY_ID_MAX = 191                            # ids in a turn's execution summaries
CAPABILITY_QUERY_MAX = 2000
CAPABILITY_SEARCH_MAX_RESULTS = 12
# Workspace profiles as routes configure them and bootstrap shows them.
ACTIVE_TOOLS_DEFAULT = 8
ACTIVE_TOOLS_MAX = 12                          # the official client refuses a turn with more
WORKSPACE_NAME_MAX = 128
WORKSPACE_DESCRIPTION_MAX = 1000
# The official client refuses a longer workspace list; the hub does not cut the list it sends.
WORKSPACES_LIST_MAX = 128
SYSTEM_PROMPT_MAX = 40000
CLIENT_INSTRUCTIONS_MAX = 20000
# A route as the configuration declares it.
ROUTE_NAME_MAX = 191
ROUTE_DESCRIPTION_MAX = 2000
# A route's business-system description (system-info), within the official client's limits.
SYSTEM_NAME_MAX = 120
SYSTEM_SUMMARY_MAX = 400
SYSTEM_MAX_DOMAINS = 6
SYSTEM_DOMAIN_MAX = 120
SYSTEM_MAX_BOUNDARIES = 6
SYSTEM_BOUNDARY_MAX = 160

# ---------------------------------------------------------------- knowledge
KNOWLEDGE_INLINE_MAX = 3000                    # a chunk's text inline in a turn
KNOWLEDGE_TITLE_MAX = 300
KNOWLEDGE_HINT_MAX = 240
KNOWLEDGE_READ_MAX = 16000                     # characters of a chunk one read returns
KNOWLEDGE_SEARCH_MAX_RESULTS = 20
KNOWLEDGE_QUERY_MAX = 1000
KNOWLEDGE_DOCUMENT_MAX_BYTES = 5 * MIB         # one document a route's knowledge loads

# ---------------------------------------------------------------- agent artifacts (BUSINESS_SIDE.md H.1)
ARTIFACT_MAX_BYTES = 6 * MIB                   # one image, and the most a route's max_bytes allows
ARTIFACT_HEADER_MAX = 4096                     # characters of X-Bailing-Artifact (base64url)
ARTIFACT_TEXT_MAX = 128                        # conversation, turn and name (UTF-16 code units)
ARTIFACT_RUN_ID_LENGTH = 36
ARTIFACT_BUCKET_NAME_MAX = 64
ARTIFACT_URL_MAX = 2048                        # a receipt's URL, as the official client accepts it

# ---------------------------------------------------------------- tools and invocations
TOOL_DESCRIPTION_MAX = 500
TOOL_GUIDANCE_MAX = 32768
TOOL_GUIDANCE_MAX_BYTES = 64 * KIB
TOOL_SCOPE_MAX = 191
TOOL_SCHEMA_MAX_DEPTH = 16                     # of a tool's public input schema
TOOL_SCHEMA_MAX_BYTES = 64 * KIB               # the official client refuses a larger one
INVOCATION_ARGUMENTS_MAX_BYTES = 1 * MIB
INVOCATION_ENVELOPE_MAX_BYTES = 2 * MIB
RESUME_BODY_MAX_BYTES = 1 * KIB
INVOCATION_SUMMARY_MAX = 240
RESULT_TEXT_MAX = 8192
BUSINESS_RESPONSE_MAX_BYTES = 2 * MIB          # what the hub reads of a business system's answer
SIGNATURE_MAX_CLOCK_SKEW_SECONDS = 300         # a business system accepts either side of its clock

# ---------------------------------------------------------------- spec pull and probes (BUSINESS_SIDE.md B, C)
SPEC_PULL_MAX_BYTES = 5 * MIB                  # a pulled OpenAPI document, as sent (Content-Length or streamed)
SPEC_PULL_SECONDS = 10                         # one pull, and each of its two negative probes, whole
SPEC_YAML_MAX_ALIASES = 100                    # aliases one YAML document may use
SPEC_AUTO_REFRESH_MAX_MIN = 1440               # auto_refresh_min: 0 (off) to a day
AUTHZ_PROBE_MAX_MS = 8000                      # the authorization probe: min(provider timeout_ms, this)

# ---------------------------------------------------------------- agent auth
AUTH_BODY_MAX_BYTES = 64 * KIB
WITHDRAW_BODY_MAX_BYTES = 4 * KIB              # POST /authorizations/{id}/revoke
AUTHORIZATIONS_PER_WINDOW = 10                 # per address and client
AUTHORIZATION_WINDOW_SECONDS = 60
AUTH_MAX_ROUTES = 64
CALLBACK_MAX = 2048                            # redirect_uri, and a client's authorization page
STATE_LENGTH = (8, 512)
DEVICE_LABEL_MAX = 128
ON_BEHALF_OF_MAX = 191
SUBJECT_DISPLAY_NAME_MAX = 120                 # UTF-16 code units, once trimmed
SUBJECT_DISPLAY_BODY_MAX_BYTES = 4 * KIB       # PUT /sessions/{id}/subject-display
SESSIONS_LIMIT = (20, 1, 100)                  # GET /sessions: default, minimum, maximum
SESSIONS_CURSOR_MAX = 2048
GRANT_FIELD_MAX = 8192                         # code, redirect_uri, verifier, refresh token
SESSION_SUBJECT_MAX = 255                      # a session an operator issues
# The principal a business backend approves with.
PRINCIPAL_FIELD_MAX = {"id": 128, "tenant": 128, "audience": 64, "channel": 128}
PRINCIPAL_MAX_ROLES = 64
PRINCIPAL_ROLE_MAX = 64

# ---------------------------------------------------------------- admin API and admins
ADMIN_BODY_MAX_BYTES = 64 * KIB
# Approvals paging (default, minimum, maximum); values outside are refused.
APPROVALS_LIMIT = (50, 1, 100)
APPROVALS_OFFSET_MAX = 10**9
APPROVAL_REASON_MAX = 2000
# The configuration-change log's paging (BUSINESS_SIDE.md § G.2): (default, minimum, maximum),
# values outside are brought into bounds, never refused; offsets beyond any row read an empty page.
CONFIG_AUDIT_LIMIT = (100, 1, 500)
CONFIG_AUDIT_OFFSET_MAX = 2**53 - 1
# What one configuration-change row shows of a change (config_audit/changes.py): at most this many
# {path, before, after} entries, each value cut to this many characters of its JSON.
CONFIG_AUDIT_DIFF_ITEMS_MAX = 40
CONFIG_AUDIT_DIFF_VALUE_MAX = 200
# Retention, legal holds and erasure (issue 33; migration 084's checks): a policy keeps messages
# 1 to 36,500 days (or for good); a hold's value (an archive id, a principal id, a tenant) and an
# erasure's principal id; the reasons given.
RETENTION_KEEP_DAYS = (1, 36500)
LEGAL_HOLD_VALUE_MAX = 256
RETENTION_REASON_MAX = 2000
# Lists of holds, purge runs and erasure requests, newest first: (default, minimum, maximum),
# clamped, never refused.
RETENTION_LIST_LIMIT = (100, 1, 500)
# Hub pause (BUSINESS_SIDE.md § E): the optional reason, and the body of POST /admin/pause|resume.
PAUSE_REASON_MAX = 500
PAUSE_BODY_MAX_BYTES = 4 * KIB
# A route's approval time-to-live (`approvals.ttl_seconds`, per tool `tool_ttl_seconds`): from a
# minute (shorter could lapse before anyone is told) to 30 days.
APPROVAL_TTL_SECONDS = (60, 30 * 24 * 3600)
# Business decisions of approvals (BUSINESS_SIDE.md § F): Core's body cap of POST
# /approvals/:id/decision, its signature window, the approver and comment it keeps, and the
# argument text an approval request carries.
APPROVAL_DECISION_BODY_MAX_BYTES = 64 * KIB
APPROVAL_DECISION_WINDOW_MS = 300_000
APPROVAL_DECISION_APPROVER_MAX = 64
APPROVAL_DECISION_COMMENT_MAX = 1000
APPROVAL_REQUEST_ARGS_TEXT_MAX = 1000
PASSWORD_LENGTH = (12, 1024)
TOKEN_DAYS_DEFAULT = 90
TOKEN_DAYS_MAX = 3650

# ---------------------------------------------------------------- task control (TASK_CONTROL.md §2-§3, §9)
TASK_MAX_MEMBERS = 64
TASK_MAX_TOOLS = 256                           # exact tool names per member
TASK_MAX_WRITE_CALLS = 1_000_000_000
TASK_MAX_CONCURRENT = 10_000
TASK_TEXT_MAX = {"request_id": 128, "client_app_id": 64}  # UTF-16 code units
TASK_CREATE_BODY_MAX_BYTES = 64 * KIB
TASK_CONTROL_BODY_MAX_BYTES = 4 * KIB
TASK_LIST_LIMIT = (30, 1, 100)                 # default, minimum, maximum: tasks and invocation pages

# ---------------------------------------------------------------- Client API jobs (CLIENT_API_AND_EXECUTOR.md §F)
# Core's numbers unless a comment says otherwise; paging values outside are clamped, never refused.
JOB_PREVIEW_CHARS = 200                        # input_preview, and a list's summary of a result (§A.4, §F)
JOB_LIST_LIMIT = (50, 1, 200)                  # GET /admin/api/runs: default, minimum, maximum (§F)
JOB_SEARCH_LIMIT = (20, 1, 100)                # GET /admin/api/runs/trace matches (§F)
# A trace search's value: the longest ID a job is known by (request_id, sql/081); Core sets none.
JOB_SEARCH_VALUE_MAX = 512
JOB_TRACE_EVENTS_MAX = 100                     # a job trace is built from the first 100 audit rows (§F)
JOB_AUDIT_MAX = 100                            # GET /admin/api/runs/<id>/audit rows (§F)
# GET /admin/api/delivery-dlq (§D.3): default, minimum, maximum; below the minimum (or not a
# number) means the default.
DEAD_LETTER_LIMIT = (100, 1, 500)
DEAD_LETTER_PREVIEW_CHARS = 500                # a dead letter's content_preview (§D.3)
EXECUTOR_TOKEN_DESCRIPTION_MAX = 500           # Core sets none (§B.2)
EXECUTOR_TOKEN_BODY_MAX_BYTES = 64 * KIB       # POST /admin/api/executor-tokens; Core reads up to 1 MiB (§1)
DISPATCH_LEASES_MAX = 200                      # GET /admin/api/dispatch-status leases (§F)
DISPATCH_BLOCKED_THREADS_MAX = 200             # and blocked threads (Core states no cap)
DISPATCH_INFLIGHT_JOBS_MAX = 10                # in-flight job IDs of a blocked thread (§F)

# ---------------------------------------------------------------- console support triage
RUN_LOOKUP_LENGTH = (4, 191)                   # an ID prefix long enough to narrow, and a cap

# ---------------------------------------------------------------- console: untrusted text on a page
# A page costs at most a small multiple of the text it shows, however the text is made.
CONSOLE_MARKERS_PER_TEXT = 64                  # markers with a title per message or snippet; then short ones
CONSOLE_PAGE_TEXT_BYTES = 1 * MIB              # HTML of message text on one transcript page (one message always)
# The Markdown view parses in time linear in a message's syntax characters (ASCII punctuation and
# line breaks) but up to ~40 µs each: a message with more is shown plain, and so are the messages
# of a page that has spent its time on Markdown.
CONSOLE_MARKDOWN_SYNTAX_PER_MESSAGE = 8000
CONSOLE_MARKDOWN_SECONDS_PER_PAGE = 0.5

# ---------------------------------------------------------------- approval notifications
# One attempt, whole, however slowly the other end answers: a webhook's name lookup, connect,
# TLS, request and the answer's status and headers; an SMTP session from connect to the message
# accepted.
NOTIFICATION_WEBHOOK_SECONDS = 10
NOTIFICATION_EMAIL_SECONDS = 30
# A claimed delivery is leased for the longest attempt and the time to record its outcome, so no
# other worker takes it again while an attempt may still be running.
NOTIFICATION_RECORD_SECONDS = 30
NOTIFICATION_LEASE_SECONDS = (max(NOTIFICATION_WEBHOOK_SECONDS, NOTIFICATION_EMAIL_SECONDS)
                              + NOTIFICATION_RECORD_SECONDS)

# ---------------------------------------------------------------- tool rate limits
# A refused call is told to wait at most the longest window a policy can name (1d), in ms.
RATE_LIMIT_RETRY_AFTER_MS_MAX = 86_400_000
