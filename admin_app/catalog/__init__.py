"""The tool catalog: OpenAPI + ACC compiled into typed tools, projected per workspace."""
