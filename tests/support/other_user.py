"""Another local user, as the tests simulate one: they run as root (in CI and here), so a
file made ours and then chowned to ``OTHER_UID`` is as if that user had created it, and a
forked child that drops to ``OTHER_UID`` acts as them."""

from __future__ import annotations

OTHER_UID = 65534
"""``nobody``: a uid that is not ours and owns nothing of the test's."""
