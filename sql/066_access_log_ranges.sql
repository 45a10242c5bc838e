-- Each read names the range of sequences it showed (a transcript page, an export), so one scroll
-- through a long transcript reads as one span in the log, not as many bare rows. Reads of a whole
-- record (a snapshot, a trace) leave the range empty.
ALTER TABLE bz_access_log
    ADD COLUMN first_sequence bigint,
    ADD COLUMN last_sequence bigint,
    ADD CONSTRAINT bz_access_log_sequences CHECK (
        (first_sequence IS NULL AND last_sequence IS NULL)
        OR (first_sequence IS NOT NULL AND last_sequence IS NOT NULL AND first_sequence <= last_sequence));

-- Exporting the log is itself a sensitive read: an auditor's download of who read what is recorded.
-- So is a search across archives that shows message text (its target: the search, as a query string).
ALTER TABLE bz_access_log DROP CONSTRAINT bz_access_log_action_check;
ALTER TABLE bz_access_log ADD CONSTRAINT bz_access_log_action_check
    CHECK (action IN ('transcript_view', 'transcript_export', 'snapshot_view', 'snapshot_download',
                      'run_trace_view', 'job_trace_view', 'access_log_export', 'message_search'));

-- The console's filters: one person's reads, and every read of one record, newest first.
CREATE INDEX bz_access_log_user_at ON bz_access_log (username, at DESC, id DESC);
CREATE INDEX bz_access_log_target_at ON bz_access_log (target, at DESC, id DESC);
