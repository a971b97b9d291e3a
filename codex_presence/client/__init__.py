"""What talks to a broker as a member: the token and the HTTP client, the ``/whoami`` and
``/roster`` calls, the one SSE follow loop, the roster text, and the ``roster`` MCP tool."""
