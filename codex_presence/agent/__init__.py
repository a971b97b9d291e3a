"""``wrap``'s I/O shells: the byte-exact relay around the child, its recorder, and the
broker link (the activity reporter and the member's subscription) that tells the broker."""
