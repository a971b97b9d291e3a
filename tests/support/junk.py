"""Wrong-shaped values for property tests: what a field of a message may hold instead of
what the protocol says (a list where a string belongs, a number, null, a nested object, a
huge string). The mappings must take any of them in any field without raising."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import strategies as st

__all__ = ["HUGE", "junk", "or_junk", "with_junk_at_some_field"]

HUGE = "x" * 100_000
"""A string far longer than any name or id codex or claude writes."""

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False),
    st.text(max_size=6),
    st.just(len(HUGE)).map("x".__mul__),
)

_nested = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.text(max_size=4), inner, max_size=3),
    ),
    max_leaves=4,
)

junk: st.SearchStrategy[Any] = st.one_of(
    _scalars,
    st.lists(_nested, max_size=3),
    st.dictionaries(st.text(max_size=4), _nested, max_size=3),
)
"""Any JSON value: scalars of every type, and (two times in three) a list or an object,
unhashable where the protocol has a string."""


def or_junk(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """The well-formed values of ``strategy`` (three times in four), or junk: enough junk
    to reach every field, enough sense to reach every state."""
    return st.sampled_from([False, False, False, True]).flatmap(
        lambda junky: junk if junky else strategy
    )


def _paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place inside ``value`` (object keys and list indexes, at any depth)."""
    if isinstance(value, dict):
        items: list[tuple[Any, Any]] = list(value.items())
    elif isinstance(value, list):
        items = list(enumerate(value))
    else:
        return []
    out: list[tuple[Any, ...]] = []
    for key, inner in items:
        out.append((*path, key))
        out += _paths(inner, (*path, key))
    return out


@st.composite
def with_junk_at_some_field(draw: st.DrawFn, message: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``message`` with the value at one place, at any depth, replaced by junk."""
    mangled = copy.deepcopy(message)
    paths = _paths(mangled)
    if not paths:
        return mangled
    *parents, last = draw(st.sampled_from(paths))
    target: Any = mangled
    for key in parents:
        target = target[key]
    target[last] = draw(junk)
    return mangled
