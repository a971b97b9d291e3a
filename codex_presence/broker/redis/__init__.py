"""The broker's store in Redis, shared by several brokers of one team: the link (one client,
or one behind Sentinel) and the store the broker's rules run over. Only ``broker --redis``
loads it (redis-py is the extra ``[redis]``)."""
