-- Indexes for reads whose cost grew with their table rather than with their page, found by
-- bench/scale_measure.py on a year's volume (docs/scaling.md).

-- A run's messages (its trace, and the user's message an approver is shown): a sequential scan
-- of every message before.
CREATE INDEX bz_messages_run ON bz_messages (run_id, id);

-- The approvals history, latest settlement first (the console's keyset order): a sort of every
-- decided approval before.
CREATE INDEX bz_tool_approvals_settled ON bz_tool_approvals ((coalesce(decided_at, expires_at)) DESC, id);

-- The admin API's decided, approved and denied lists, latest decision first.
CREATE INDEX bz_tool_approvals_decided ON bz_tool_approvals (decided_at DESC, id) WHERE status <> 'pending';

-- The conversation list filtered by app, route or last turn, newest first, and its bounded
-- count: each an index range that stops after a page (or the count's cap), instead of a walk
-- of every archive until enough of them match.
CREATE INDEX bz_agent_conversation_archives_app_updated
    ON bz_agent_conversation_archives (client_app_id, updated_at, id);
CREATE INDEX bz_agent_conversation_archives_route_updated
    ON bz_agent_conversation_archives (route_key, updated_at, id);
CREATE INDEX bz_agent_conversation_archives_status_updated
    ON bz_agent_conversation_archives (last_turn_status, updated_at, id);

-- A principal's or tenant's archives: in archive order from the index alone, so that the list's
-- semi-join and its bounded count stop after what they need. Not partial: the planner takes its
-- row estimates from the statistics of an expression index only when it has no predicate.
CREATE INDEX bz_agent_conversation_members_principal_archive ON bz_agent_conversation_members
    ((principal ->> 'id'), archive_id);
CREATE INDEX bz_agent_conversation_members_tenant_archive ON bz_agent_conversation_members
    ((principal ->> 'tenant'), archive_id);
DROP INDEX bz_agent_conversation_members_principal_id;
DROP INDEX bz_agent_conversation_members_principal_tenant;

-- The access log filtered by target: each read's group is found among that person's reads of
-- that target, one index probe each, instead of among every read of the target (a transcript
-- read page by page for months holds thousands).
CREATE INDEX bz_access_log_target_user_at ON bz_access_log (target, username, at, id);
