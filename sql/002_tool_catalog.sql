-- Compile results kept beside each provider's OpenAPI document, for operators to read.
-- What agents see is compiled from `openapi` by the running code; these columns only record
-- which compiler version last looked at it and what it warned about.
ALTER TABLE bz_tool_providers
    ADD COLUMN compiler_version integer,
    ADD COLUMN compile_warnings jsonb NOT NULL DEFAULT '[]';
