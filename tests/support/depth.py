"""How deep the property tests go: two Hypothesis profiles, and depth relative to them.

``dev`` (the default) runs few examples, so the unit tier is quick while editing; ``ci``
(chosen by ``CI=true``) runs Hypothesis's own default of 100 per property, today's depth.
``HYPOTHESIS_PROFILE=ci`` (or ``dev``) picks one by name. Neither has a deadline: no
property here is about time (speed is measured in bench/), and a loaded machine must not
fail an example for being slow. Both stay random: nothing is derandomized.

A property that wants more than the profile's depth asks for a multiple of it
(``@settings(max_examples=examples(4))``), never a literal, so ``dev`` stays quick.
"""

from __future__ import annotations

import os

from hypothesis import settings

__all__ = ["examples", "load_profile"]

_EXAMPLES = {"dev": 10, "ci": 100}


def load_profile() -> str:
    """Register both profiles and load the one this run asks for; its name."""
    for name, count in _EXAMPLES.items():
        settings.register_profile(name, max_examples=count, deadline=None, print_blob=True)
    default = "ci" if os.environ.get("CI") == "true" else "dev"
    name = os.environ.get("HYPOTHESIS_PROFILE") or default
    settings.load_profile(name)
    return name


def examples(times: float) -> int:
    """``times`` the loaded profile's examples per property (at least one)."""
    return max(1, round(settings.default.max_examples * times))
