-- /metrics reads these counts at every scrape: partial indexes keep each read proportional to the
-- rows that need a person (invocations to reconcile, calls still dispatching), not to the table.
CREATE INDEX bz_tool_invocations_reconciliation ON bz_tool_invocations (updated_at)
    WHERE status = 'reconciliation_required';
CREATE INDEX bz_tool_journal_dispatching ON bz_tool_journal (job_id)
    WHERE state = 'dispatching';
