"""Who is calling: client apps, agent sessions and their tokens, admins and their permissions."""
