-- Approvals decided by the business system (BUSINESS_SIDE.md §F): the approval request sent to
-- it as a signed webhook, and its decision posted back to POST /approvals/<number>/decision.
--
-- Every decision now says through which door it came (the console, the admin API, or the
-- business system) and with which credential the business door was opened, so the console and
-- the history show who decided and how. A business decision carries its own id (`decision_id`):
-- a replay of the same decision is recognised by it, and one id never decides two approvals.

ALTER TABLE bz_tool_approvals
    ADD COLUMN decision_id text CHECK (decision_id ~ '^[A-Za-z0-9_.:-]{1,128}$'),
    -- console | admin_api | business_system; NULL for decisions made before this file.
    ADD COLUMN decided_via text CHECK (decided_via IN ('console', 'admin_api', 'business_system')),
    -- For the business door: `signature`, `client_token:<app_id>` or `admin_token:<username>`.
    ADD COLUMN decided_credential text CHECK (char_length(decided_credential) <= 200),
    ADD CONSTRAINT bz_tool_approvals_decision_id_key UNIQUE (decision_id);

-- A channel may be the business system's own: it receives Core's `tool_approval_request`
-- (`business_webhook`, or its alias `approval_webhook`, kept as written), signed like a webhook.
ALTER TABLE bz_approval_channels DROP CONSTRAINT bz_approval_channels_kind_check;
ALTER TABLE bz_approval_channels DROP CONSTRAINT bz_approval_channels_kind_fields;
ALTER TABLE bz_approval_channels ADD CONSTRAINT bz_approval_channels_kind_check
    CHECK (kind IN ('webhook', 'email', 'business_webhook', 'approval_webhook'));
ALTER TABLE bz_approval_channels ADD CONSTRAINT bz_approval_channels_kind_fields CHECK (
    (kind IN ('webhook', 'business_webhook', 'approval_webhook') AND url IS NOT NULL
     AND secret_env IS NOT NULL AND cardinality(recipients) = 0)
    OR (kind = 'email' AND url IS NULL AND secret_env IS NULL
        AND cardinality(recipients) BETWEEN 1 AND 20));
