-- The indexes 070 built on tables every hub has, for a hub that went without the conversation
-- audit (070 belongs to it: admin_app/migrations.py FEATURES). Where 070 was applied they are
-- there already and nothing changes; the definitions are 070's own.
CREATE INDEX IF NOT EXISTS bz_messages_run ON bz_messages (run_id, id);
CREATE INDEX IF NOT EXISTS bz_tool_approvals_settled
    ON bz_tool_approvals ((coalesce(decided_at, expires_at)) DESC, id);
CREATE INDEX IF NOT EXISTS bz_tool_approvals_decided
    ON bz_tool_approvals (decided_at DESC, id) WHERE status <> 'pending';
CREATE INDEX IF NOT EXISTS bz_access_log_target_user_at ON bz_access_log (target, username, at, id);
