-- Tool providers whose OpenAPI document is pulled from the business system (BUSINESS_SIDE.md B)
-- and the operators' health checks of them (B.3 access policy, C authorization probe).
--
-- `openapi` stays the one source the catalog compiles from: for a URL provider it holds the last
-- document pulled successfully, kept when a later pull fails. The pull's own record (when it was
-- last attempted, how that went and why it failed) is beside it, so every host of the hub sees
-- it and the schedule measures `auto_refresh_min` from the last attempt, whichever host made it.
ALTER TABLE bz_tool_providers
    ADD COLUMN spec_url text CHECK (spec_url IS NULL OR length(spec_url) BETWEEN 1 AND 2048),
    ADD COLUMN spec_access_policy text NOT NULL DEFAULT 'signed_required'
        CHECK (spec_access_policy IN ('signed_required', 'public_allowed')),
    ADD COLUMN auto_refresh_min integer NOT NULL DEFAULT 0 CHECK (auto_refresh_min BETWEEN 0 AND 1440),
    ADD COLUMN spec_refreshed_at timestamptz,
    ADD COLUMN spec_pull_attempted_at timestamptz,
    ADD COLUMN spec_pull_status text CHECK (spec_pull_status IN ('changed', 'unchanged', 'failed')),
    ADD COLUMN spec_pull_error text CHECK (spec_pull_error IS NULL OR length(spec_pull_error) <= 500),
    -- {status: protected|public|inconclusive, signed_http?, unsigned_http?, invalid_http?, reason?, at}
    ADD COLUMN spec_access_probe jsonb,
    -- {status: pass|suspect|inconclusive|skipped, http?, tool?, mode?, requires_subject?, reason?, at}
    ADD COLUMN authz_probe jsonb,
    ADD CONSTRAINT bz_tool_providers_auto_refresh_needs_url CHECK (auto_refresh_min = 0 OR spec_url IS NOT NULL);
