-- Approvals that expire and a queue worked by several approvers.
--
-- A route may give the approvals of its calls a time-to-live (`approvals` in the route's
-- configuration: a default and per-tool values). The instant is fixed when the approval is made;
-- expiry is evaluated wherever a decision or a resume is taken (expires_at <= now()), never
-- written as a status, so that no sweeper has to run for it to hold.
ALTER TABLE bz_routes ADD COLUMN approvals jsonb NOT NULL DEFAULT '{}';
ALTER TABLE bz_tool_approvals ADD COLUMN expires_at timestamptz;
ALTER TABLE bz_tool_approvals ADD CONSTRAINT bz_tool_approvals_expiry_after_creation
    CHECK (expires_at IS NULL OR expires_at > created_at);

-- The queue: pending approvals oldest first, keyset-paged on (created_at, id), whatever filter.
CREATE INDEX bz_tool_approvals_pending ON bz_tool_approvals (created_at, id) WHERE status = 'pending';
