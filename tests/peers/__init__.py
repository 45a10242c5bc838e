"""Peers of the hub written from Core's contract (CLIENT_API_AND_EXECUTOR.md), not from the hub's
code: a Dify-like and an n8n-like Client API consumer, an OpenClaw-like executor with a scripted
brain, and a callback receiver that verifies Core's signature. Each runs as its own process
(`python -m tests.peers.<name> --help`) and uses only `requests` and the standard library, so that
the end-to-end tests exercise the hub over HTTP exactly as those connectors do."""
