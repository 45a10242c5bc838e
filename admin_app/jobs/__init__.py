"""Core's Client API and executor protocol (CLIENT_API_AND_EXECUTOR.md): jobs that connectors
submit with POST /run and poll with GET /jobs/<id>, that executors claim, work on (with governed
tool calls) and report, and the completion callbacks that tell the connector."""
