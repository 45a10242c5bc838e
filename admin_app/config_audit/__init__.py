"""The configuration-change audit (BUSINESS_SIDE.md § G): what was changed, by whom, how, and the
retention purge of this log alone (BAILING_AUDIT_RETENTION_DAYS)."""
