// codex-presence web roster: each member's last hours as a strip, and today's waits.
//
// Apart from roster.js (which tells it of each roster and of signing out with two document
// events), so that the roster's drawing and this one never meet. On the first roster of a
// session it asks GET /roster for the names, then GET /history for each member twice: the
// last HOURS for the strip (one coloured stretch per interval: working, needs input, idle,
// offline; a time nobody knows is left blank) and since local midnight for the words beside
// it ("needs input 42 min over 9 waits, longest 11 min"). Again every REFRESH_MS while
// signed in. A failure keeps what is shown. Everything is drawn with textContent and the
// CSSOM (no markup from the broker, no inline style attributes: the page's CSP forbids them).
(() => {
  'use strict';

  const HOURS = 8;
  const REFRESH_MS = 60000;
  const KEY_HEADER = 'x-codex-presence-key';
  const WORDS = { working: 'working', blocked: 'needs input', idle: 'idle', offline: 'offline' };
  const $ = (id) => document.getElementById(id);
  const state = { key: '', timer: null, asking: 0 };
  // Read by tests and handy in the console: how often the strips were drawn.
  const stats = (window.codexPresenceHistory = { asked: 0, drawn: 0 });

  function hide() {
    $('history').hidden = true;
    $('history-list').replaceChildren();
  }

  function elapsed(seconds) {
    const s = Math.max(0, Math.floor(Number(seconds) || 0));
    if (s < 60) return `${s} s`;
    if (s < 3600) return `${Math.floor(s / 60)} min`;
    const m = Math.floor((s % 3600) / 60);
    return `${Math.floor(s / 3600)} h` + (m ? ` ${m} min` : '');
  }

  function words(today) {
    const totals = today.totals || {};
    const waits = today.waits || {};
    const count = Number.isInteger(waits.count) && waits.count > 0 ? waits.count : 0;
    const parts = [];
    if (count) {
      const noun = count === 1 ? 'wait' : 'waits';
      parts.push(`needs input ${elapsed(totals.blocked)} over ${count} ${noun}, ` +
        `longest ${elapsed(waits.longest)}`);
    } else {
      parts.push('never needed input');
    }
    for (const key of ['working', 'idle', 'offline']) {
      if (Number(totals[key]) >= 1) parts.push(`${WORDS[key]} ${elapsed(totals[key])}`);
    }
    return parts.join('; ');
  }

  function strip(recent, from, to) {
    const bar = document.createElement('div');
    bar.className = 'history-bar';
    const span = to - from;
    for (const interval of Array.isArray(recent.intervals) ? recent.intervals : []) {
      if (!(interval.state in WORDS)) continue;
      const since = Math.max(from, Number(interval.since) || from);
      const until = Math.min(to, interval.until === null ? to : Number(interval.until) || to);
      if (until <= since) continue;
      const piece = document.createElement('span');
      piece.className = 'history-piece';
      piece.dataset.state = interval.state;
      piece.title = `${WORDS[interval.state]} ${elapsed((until - since) / 1000)}`;
      piece.style.left = `${(100 * (since - from)) / span}%`;
      piece.style.width = `${Math.max(0.2, (100 * (until - since)) / span)}%`;
      bar.append(piece);
    }
    return bar;
  }

  function line(name, recent, today, from, to) {
    const li = document.createElement('li');
    li.className = 'history-row';
    li.dataset.name = name;
    const who = document.createElement('span');
    who.className = 'history-name';
    who.textContent = name;
    const totals = document.createElement('span');
    totals.className = 'history-totals';
    totals.textContent = words(today);
    li.append(who, strip(recent, from, to), totals);
    return li;
  }

  async function get(path) {
    const response = await fetch(path, {
      credentials: 'same-origin', cache: 'no-store', headers: { [KEY_HEADER]: state.key },
    });
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    return response.json();
  }

  async function ask() {
    const asking = ++state.asking;  // an answer to an older question is dropped
    stats.asked++;
    const to = Date.now();
    const from = to - HOURS * 3600000;
    const midnight = new Date(to);
    midnight.setHours(0, 0, 0, 0);
    let rows;
    try {
      const roster = await get('/roster');
      const names = (Array.isArray(roster) ? roster : []).map((p) => String(p.name));
      rows = await Promise.all(names.map(async (name) => {
        const member = encodeURIComponent(name);
        const [recent, today] = await Promise.all([
          get(`/history?member=${member}&since=${from}`),
          get(`/history?member=${member}&since=${midnight.getTime()}`),
        ]);
        return line(name, recent, today, from, to);
      }));
    } catch (err) {
      return;  // the broker unreachable, or no history kept: keep what is shown
    }
    if (asking !== state.asking || !state.key) return;
    $('history-list').replaceChildren(...rows);
    $('history').hidden = rows.length === 0;
    stats.drawn++;
  }

  function stop() {
    clearInterval(state.timer);
    state.timer = null;
    state.key = '';
    state.asking++;
    hide();
  }

  document.addEventListener('codexpresence:roster', (e) => {
    const detail = e.detail || {};
    if (!detail.key) {
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
