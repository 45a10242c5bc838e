-- Support triage in the console: lookups of a run by a prefix of any ID it is known by, and the
-- list of unresolved tool calls. A UUID prefix is a range of the column's btree (the primary keys
-- of runs and invocations; the runs' session below). text_pattern_ops makes `LIKE 'prefix%'` an
-- index range read on the text IDs whatever the database's collation.
CREATE INDEX bz_runs_session ON bz_runs (session_id);
CREATE INDEX bz_runs_conversation_prefix ON bz_runs (client_conversation_id text_pattern_ops);
CREATE INDEX bz_runs_turn_prefix ON bz_runs (client_turn_id text_pattern_ops);
CREATE INDEX bz_tool_invocations_invocation_prefix ON bz_tool_invocations (invocation_id text_pattern_ops);

-- Unresolved calls, newest first, keyset paged on (created_at, id): only the few rows that still
-- need someone are indexed.
CREATE INDEX bz_tool_invocations_unresolved ON bz_tool_invocations (created_at DESC, id DESC)
    WHERE status IN ('reconciliation_required', 'business_rejected', 'rejected_before_dispatch',
                     'in_progress', 'awaiting_approval');
