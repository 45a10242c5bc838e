"""Tool providers whose OpenAPI document the hub pulls from the business system (BUSINESS_SIDE.md
§B), and the operators' health checks of them: the spec's access policy (§B.3) and the
authorization probe (§C). Neither check ever gates an invocation: they are stored on the provider
and shown in the console, `bailing-admin provider show` and /metrics."""
