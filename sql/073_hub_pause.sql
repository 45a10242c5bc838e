-- Hub pause (BUSINESS_SIDE.md § E): whether the hub refuses new work, shared by every process of
-- every host on this database. Core keeps it as a file on one filesystem; here it is one row, read
-- by each refusing request, so a pause committed by any process is seen by the next request of
-- every other.
--
-- The row holds the change in force: paused or not, why (optional, bounded), who made it (a
-- console or API admin's username, or the operator's `cli:<login>`) and when. The history of
-- every pause and resume is in bz_admin_events beside the other admin actions.

CREATE TABLE bz_hub_pause (
    id             smallint PRIMARY KEY DEFAULT 1 CHECK (id = 1),
    paused         boolean NOT NULL DEFAULT false,
    reason         text CHECK (reason IS NULL OR char_length(reason) <= 500),
    actor          text CHECK (actor IS NULL OR char_length(actor) <= 128),
    actor_admin_id bigint REFERENCES bz_admins (id) ON DELETE SET NULL,
    changed_at     timestamptz NOT NULL DEFAULT now()
);
INSERT INTO bz_hub_pause (id) VALUES (1);

-- Pauses and resumes join the admin trail; they name no admin (target 'hub').
ALTER TABLE bz_admin_events DROP CONSTRAINT bz_admin_events_action_check;
ALTER TABLE bz_admin_events ADD CONSTRAINT bz_admin_events_action_check
    CHECK (action IN ('admin_created', 'admin_disabled', 'admin_enabled', 'role_changed', 'password_reset',
                      'password_changed', 'token_issued', 'token_revoked', 'sessions_ended',
                      'hub_paused', 'hub_resumed'));
