"""What talks to a broker as a member: the token and the HTTP client, the ``/whoami`` and
``/roster`` calls, the one SSE follow loop, the roster text, the ``roster`` MCP tool — and a
runner's link (:mod:`.link`): its activity reporter (:mod:`.reporter`) and its
subscription (:mod:`.subscription`)."""
