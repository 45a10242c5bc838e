"""Agent Conversation Audit v1 and v2: archives of the complete visible conversation."""
