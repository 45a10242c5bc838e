"""The Agent Client Runtime: bootstrap, turns, memory, knowledge, capability search, completion."""
