"""The reference presence broker: the team, the connection counts and the activity TTL,
the rules and the fan-out, and the HTTP app, server, limits and web roster page around them."""
