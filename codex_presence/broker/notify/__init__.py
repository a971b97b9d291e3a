"""The broker's notifications: the targets as configured, the notifier that asks the policy
(:mod:`codex_presence.core.notify_policy`) what is due and delivers it, and the claims that
let brokers sharing Redis send each notice once. The notifier's route (``GET /notify``) and
the team file's ``[[notify]]`` entries load with every broker; apprise, behind
:mod:`~.apprise_sender`, only when a target is configured."""
