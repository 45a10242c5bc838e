-- Sensitive reads through /admin/api are recorded beside the console's: each row names the door
-- it came through, and an API read names the personal token that made it. Job traces are reads
-- of their own.
ALTER TABLE bz_access_log
    ADD COLUMN channel text NOT NULL DEFAULT 'console' CHECK (channel IN ('console', 'api')),
    ADD COLUMN admin_token_id bigint REFERENCES bz_admin_tokens (id),
    ADD CONSTRAINT bz_access_log_api_token CHECK ((channel = 'api') = (admin_token_id IS NOT NULL));
-- Rows written before this migration came from the console; from now on every writer names it.
ALTER TABLE bz_access_log ALTER COLUMN channel DROP DEFAULT;

ALTER TABLE bz_access_log DROP CONSTRAINT bz_access_log_action_check;
ALTER TABLE bz_access_log ADD CONSTRAINT bz_access_log_action_check
    CHECK (action IN ('transcript_view', 'transcript_export', 'snapshot_view', 'snapshot_download',
                      'run_trace_view', 'job_trace_view'));
