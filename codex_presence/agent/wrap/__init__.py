"""``codex-presence wrap``: the byte-exact stdio proxy.

:mod:`.pump` copies the bytes (standard library only: the child's first answer waits for
nothing), :mod:`.session` is the event loop around it. Empty on purpose: importing this
package must load nothing before the child has started.
"""
