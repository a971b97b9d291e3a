"""The reference presence broker: the team, the connection counts and the activity TTL, the
store they live in (this process's memory, or Redis shared by several brokers), the rules and
the fan-out, and the HTTP app, server, limits and web roster page around them."""
