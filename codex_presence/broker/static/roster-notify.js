// codex-presence web roster: the broker's notification targets, for an admin.
//
// Apart from roster.js (which tells it of each roster and of signing out with two document
// events) so that neither grows past what one can read. When the first roster says the
// member is an admin it asks GET /notify, then every REFRESH_MS while signed in; after the
// roster, never in its way. An operator's page never asks. The broker answers admins only:
// a 403 (a role changed meanwhile) hides the section without a word and ends the asking
// for this session; any other failure keeps what is shown. Each target is one line: its label (the URL
// with its secrets masked by the broker; the URL itself never reaches the page), what it is
// told of and after how long, for whom, what was sent and given up, and "failing: <error>"
// while it fails. Everything is drawn with textContent: labels come from configuration.
(() => {
  'use strict';

  const REFRESH_MS = 30000;
  const KEY_HEADER = 'x-codex-presence-key';
  const EVENTS = { blocked: 'needs input', answered: 'back to work', lost: 'session lost' };
  const $ = (id) => document.getElementById(id);
  const state = { key: '', timer: null, asking: 0 };
  // Read by tests and handy in the console: how often the targets were asked for.
  const stats = (window.codexPresenceNotify = { asked: 0, shown: 0 });

  function hide() {
    $('notify-targets').hidden = true;
    $('notify-list').replaceChildren();
  }

  function seconds(n) {
    const s = Math.max(0, Math.round(Number(n) || 0));
    if (s < 60 || s % 60) return `${s} s`;
    return s % 3600 ? `${s / 60} min` : `${s / 3600} h`;
  }

  function count(n) {
    return Number.isInteger(n) && n > 0 ? n : 0;
  }

  function line(target) {
    const li = document.createElement('li');
    li.className = 'notify-target';
    const label = document.createElement('span');
    label.className = 'notify-label';
    label.textContent = String(target.label ?? '');
    const on = Array.isArray(target.on) ? target.on.map((e) => EVENTS[e] || String(e)) : [];
    const who = Array.isArray(target.members) ? target.members.map(String).join(', ') : 'everyone';
    const parts = [`${on.join(', ') || 'nothing'} after ${seconds(target.after)}`, `for ${who}`];
    if (Number(target.repeat) > 0) parts.push(`repeated every ${seconds(target.repeat)}`);
    parts.push(`${count(target.sent)} sent, ${count(target.givenUp)} given up`);
    if (count(target.dropped)) parts.push(`${count(target.dropped)} dropped`);
    const rule = document.createElement('span');
    rule.className = 'notify-rule';
    rule.textContent = ' · ' + parts.join(' · ');
    li.append(label, rule);
    if (target.failing) {
      li.dataset.failing = 'true';
      const failing = document.createElement('span');
      failing.className = 'notify-failing';
      failing.textContent = ' · failing: ' + String(target.lastError || 'no reason given');
      li.append(failing);
    }
    return li;
  }

  function draw(targets) {
    if (!targets.length) {
      hide();
      return;
    }
    $('notify-list').replaceChildren(...targets.map(line));
    $('notify-targets').hidden = false;
    stats.shown++;
  }

  async function ask() {
    const asking = ++state.asking;  // an answer to an older question is dropped
    stats.asked++;
    let response;
    try {
      response = await fetch('/notify', {
        credentials: 'same-origin', cache: 'no-store', headers: { [KEY_HEADER]: state.key },
      });
    } catch (err) {
      return;  // the broker unreachable: the roster says so; keep what is shown
    }
    if (asking !== state.asking || !state.key) return;
    if (response.status === 403) {
      stop();  // not an admin: nothing to show, and nothing more to ask
      return;
    }
    if (!response.ok) return;
    try {
      const answer = await response.json();
      if (asking === state.asking && state.key) {
        draw(Array.isArray(answer.targets) ? answer.targets : []);
      }
    } catch (err) { /* not JSON: keep what is shown */ }
  }

  function stop() {
    clearInterval(state.timer);
    state.timer = null;
    state.key = '';
    state.asking++;
    hide();
  }

  // Each roster says whether the member is an admin (the broker's bucket): only then is
  // /notify asked, so an operator's page never asks at all.
  document.addEventListener('codexpresence:roster', (e) => {
    const detail = e.detail || {};
    if (!detail.admin || !detail.key) {
      stop();
      return;
    }
    if (state.timer !== null && state.key === detail.key) return;  // a reconnect: already asking
    stop();
    state.key = detail.key;
    ask();
    state.timer = setInterval(ask, REFRESH_MS);
  });
  document.addEventListener('codexpresence:signedout', stop);
})();
