-- Core 0.7.0 cross-system member bindings. Adds columns only: 057 stays as it was, no rows are
-- moved or rewritten, and v1 records keep NULL in the new member columns.
ALTER TABLE bz_agent_conversation_archives ADD COLUMN membership_version integer;
ALTER TABLE bz_agent_conversation_members
    ADD COLUMN client_app_id text,
    ADD COLUMN route_key text,
    ADD COLUMN client_name text;
