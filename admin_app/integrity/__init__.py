"""Checking stored records against the evidence log: what each leaf covers, the background
verifier, and the proofs a transcript export carries."""
