-- The client gate (BUSINESS_SIDE.md §D.1): a client app's `rate_limit_per_min` is one bucket,
-- `client:<app_id>` (60-second sliding window, in bz_tool_rate_buckets of 074), shared by every
-- session and user of the client, charged by each tool call before its tool and provider gates
-- and by each knowledge search. 0 = off: every existing client keeps working as before (Core's
-- default for clients is not what a hub that had no such limit should start refusing with).
ALTER TABLE bz_client_apps
    ADD COLUMN rate_limit_per_min integer NOT NULL DEFAULT 0
        CHECK (rate_limit_per_min BETWEEN 0 AND 1000000);
