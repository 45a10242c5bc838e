"""Retention, legal holds and erasure of conversation messages (issue 33): policies per client
app and route, a purge that redacts what expired, holds that stop any purge or erasure, and
erasure of one principal's messages. Text is removed through conversation_audit.redaction, so
every leaf of the evidence log still verifies; every change is in the configuration-change log."""
