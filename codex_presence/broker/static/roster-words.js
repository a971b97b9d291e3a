// codex-presence web roster: the words for time, counts and agents, apart from roster.js (which
// draws the rows with them) so that neither grows past what one can read. Pure functions of
// a member's presence and this machine's clock; nothing here touches the page.
window.codexPresenceWords = (() => {
  'use strict';

  // -- time ------------------------------------------------------------------------------

  const rtf = new Intl.RelativeTimeFormat('en', { numeric: 'always' });
  const clockTime = new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit' });
  // The time of day of ``ms`` (unix ms), as this machine says it: "14:05".
  function clock(ms) {
    return clockTime.format(ms);
  }

  const UNITS = [
    ['day', 86400], ['hour', 3600], ['minute', 60], ['second', 1],
  ];

  function lastActive(ms) {
    if (!ms) return 'never seen';
    const seconds = Math.max(0, Math.round((Date.now() - ms) / 1000));
    if (seconds < 10) return 'last active just now';
    for (const [unit, size] of UNITS) {
      if (seconds >= size) return 'last active ' + rtf.format(-Math.floor(seconds / size), unit);
    }
    return 'last active just now';
  }

  // How long, to the unit that matters: "45 s", "14 min", "2 h 5 min", "3 d 4 h" (the same
  // words as `roster --watch`).
  function elapsed(seconds) {
    const s = Math.max(0, Math.floor(seconds));
    let parts;
    if (s < 60) parts = [[s, 's']];
    else if (s < 3600) parts = [[Math.floor(s / 60), 'min']];
    else if (s < 86400) parts = [[Math.floor(s / 3600), 'h'], [Math.floor((s % 3600) / 60), 'min']];
    else parts = [[Math.floor(s / 86400), 'd'], [Math.floor((s % 86400) / 3600), 'h']];
    return parts.filter(([n], i) => i === 0 || n).map(([n, unit]) => `${n} ${unit}`).join(' ');
  }

  // Since when the member's activity holds, or null (idle, or a broker that does not say).
  function sinceOf(p) {
    return (p.activity === 'working' || p.activity === 'blocked') && Number.isFinite(p.activitySince)
      ? p.activitySince : null;
  }

  // "2 working, 1 needs input" when two or more of the member's sessions are busy, else "".
  function sessionsText(p) {
    const s = p.sessions;
    if (!s || typeof s !== 'object') return '';
    const working = Number.isInteger(s.working) && s.working > 0 ? s.working : 0;
    const blocked = Number.isInteger(s.blocked) && s.blocked > 0 ? s.blocked : 0;
    if (working + blocked < 2) return '';
    const parts = [];
    if (working) parts.push(`${working} working`);
    if (blocked) parts.push(`${blocked} needs input`);
    return parts.join(', ');
  }

  // How many commands the member's sessions left running (0: none, or not said).
  function backgroundOf(p) {
    return Number.isInteger(p.background) && p.background > 0 ? p.background : 0;
  }

  // -- agents (the roster's `agents`: one per session) -----------------------------------
  // The words of core/agent_record.py's agent_words and waits_words, for the page.

  function said(obj, key) {
    const value = obj && typeof obj === 'object' ? obj[key] : undefined;
    return typeof value === 'string' && value ? value : null;
  }

  // The member's agents as the broker lists them (objects only), when at least one says
  // which client it is (sessions that share nothing are the member's row already), or [].
  function agentsOf(p) {
    const listed = Array.isArray(p.agents) ? p.agents.filter((a) => a && typeof a === 'object') : [];
    return listed.some((a) => said(a, 'client')) ? listed : [];
  }

  // "claude in api-server", "claude", or "an agent".
  function agentText(agent) {
    const client = said(agent, 'client') || 'an agent';
    const project = said(agent, 'project');
    return project ? `${client} in ${project}` : client;
  }

  const ASKS = {
    file_change: 'approve a file change',
    question: 'answer a question',
    permission: 'grant a permission',
    elicitation: 'answer a form',
  };

  // What a person must do: "approve `make`", "approve a file change", "needs input"...
  function waitsText(waits) {
    const kind = said(waits, 'kind');
    const detail = said(waits, 'detail');
    const program = said(waits, 'program');
    const tool = said(waits, 'tool');
    if (kind === 'command') {
      const shown = detail || program;
      return shown ? `approve \`${shown}\`` : 'approve a command';
    }
    if (kind === 'permission' && tool) return `grant \`${tool}\``;
    if (kind === 'elicitation' && tool) return `answer \`${tool}\``;
    const asks = Object.prototype.hasOwnProperty.call(ASKS, kind) ? ASKS[kind] : null;
    if (!asks) return 'needs input';
    return detail ? `${asks}: ${detail}` : asks;
  }

  return {
    clock, lastActive, elapsed, sinceOf, sessionsText, backgroundOf, agentsOf, agentText, waitsText,
  };
})();
