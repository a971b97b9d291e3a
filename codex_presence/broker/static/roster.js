// codex-presence web roster: sign-in, the live SSE subscription, and the rows.
//
// The page holds one EventSource('/subscribe?name=<me>&key=<key>') while the tab is
// visible. A session is the cookie (HttpOnly, set by POST /session) and the key that
// sign-in returns, kept in this origin's localStorage and sent with every request: a page
// on another port of this host shares the cookie jar but not the storage, so it can neither
// use a stolen cookie nor plant one of its own as the session. When the tab is hidden
// for longer than the hide delay the stream is closed, so the member's `connected` drops;
// showing the tab again reconnects. A brief tab-away never touches the stream.
// Everything is drawn with textContent: nothing from the wire is parsed as HTML.
(() => {
  'use strict';

  const body = document.body;
  const $ = (id) => document.getElementById(id);
  const params = new URLSearchParams(location.search);
  const hideDelay = nonNegative(params.get('hideDelay'), nonNegative(body.dataset.hideDelay, 5000));
  const TICK_MS = 5000;            // how often "last active …" is redrawn
  const KEY_ITEM = 'codexPresenceSessionKey';
  const KEY_HEADER = 'x-codex-presence-key';
  const RETRY_MS = [1000, 2000, 5000, 10000, 30000];

  const state = {
    me: null,
    team: '',
    members: new Map(),            // name -> Presence, in roster order
    privileges: {},                // name -> 'admin' | 'operator' | null, from the broker
    source: null,
    hideTimer: null,
    retryTimer: null,
    retries: 0,
    key: sessionKey(),
  };
  // Read by tests and handy in the console: how often the stream was opened and closed.
  const stats = (window.codexPresence = { opens: 0, closes: 0, hideDelay });

  function sessionKey() {
    try { return localStorage.getItem(KEY_ITEM) || ''; } catch (err) { return ''; }
  }

  function setSessionKey(key) {
    try {
      if (key) localStorage.setItem(KEY_ITEM, key); else localStorage.removeItem(KEY_ITEM);
    } catch (err) { /* storage refused: the session lasts as long as this page */ }
    state.key = key;
  }

  function nonNegative(text, fallback) {
    const n = Number(text);
    return text !== null && text !== undefined && text !== '' && Number.isFinite(n) && n >= 0 ? n : fallback;
  }

  // -- views -----------------------------------------------------------------------------

  function show(view) {
    body.dataset.view = view;
    $('signin').hidden = view !== 'signin';
    $('roster').hidden = view !== 'roster';
    $('session').hidden = view !== 'roster';
    if (view === 'signin') $('token').focus();
  }

  function setStream(status, text) {
    body.dataset.stream = status;
    $('stream').textContent = text;
  }

  // -- the rows --------------------------------------------------------------------------

  const rtf = new Intl.RelativeTimeFormat('en', { numeric: 'always' });
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

  const ACTIVITY = {
    working: { text: 'working', icon: 'spinner', label: 'working' },
    blocked: { text: 'needs input', icon: 'needs-input-mark', label: 'blocked: needs input', mark: '!' },
    idle: { text: 'idle', icon: 'idle-dot', label: 'idle' },
  };

  function rowFor(name) {
    let row = document.querySelector(`li.member[data-name="${CSS.escape(name)}"]`);
    if (!row) {
      row = $('row-template').content.firstElementChild.cloneNode(true);
      row.dataset.name = name;
      $('members').appendChild(row);
    }
    return row;
  }

  function draw(p) {
    const row = rowFor(p.name);
    const connected = Number(p.connected) || 0;
    const activity = p.activity === 'working' || p.activity === 'blocked' ? p.activity : 'idle';
    const bucket = state.privileges[p.name] || '';  // the broker's rule, not a copy of it
    row.dataset.connected = String(connected);
    row.dataset.activity = activity;
    row.dataset.lastSeen = String(p.lastSeen || 0);
    row.querySelector('.name').textContent = p.name;
    row.querySelector('.you').hidden = p.name !== state.me;
    row.querySelector('.role').textContent = (p.role && p.role.title) || 'no role';
    const b = row.querySelector('.bucket');
    b.hidden = !bucket;
    b.textContent = bucket;
    b.dataset.bucket = bucket;
    const dot = row.querySelector('.conn-dot');
    dot.classList.toggle('on', connected > 0);
    row.querySelector('.connection').textContent = connected > 0 ? `${connected} connected` : 'offline';
    const a = ACTIVITY[activity];
    const icon = row.querySelector('.activity-icon');
    icon.className = 'activity-icon ' + a.icon;
    icon.textContent = a.mark || '';
    const label = row.querySelector('.activity');
    label.textContent = a.text;
    row.querySelector('.activity-col').title = a.label;
    drawSeen(row);
  }

  function drawSeen(row) {
    const ms = Number(row.dataset.lastSeen) || 0;
    const el = row.querySelector('.last-active');
    el.textContent = lastActive(ms);
    el.title = ms ? new Date(ms).toLocaleString() : '';
  }

  function drawSummary() {
    let online = 0, working = 0, blocked = 0;
    for (const p of state.members.values()) {
      if ((Number(p.connected) || 0) > 0) online++;
      if (p.activity === 'working') working++;
      if (p.activity === 'blocked') blocked++;
    }
    const summary = $('summary');
    summary.replaceChildren();
    const chip = (n, text, alert) => {
      const el = document.createElement('span');
      el.className = 'chip' + (alert && n ? ' alert' : '');
      const strong = document.createElement('strong');
      strong.textContent = String(n);
      el.append(strong, ' ' + text);
      summary.appendChild(el);
    };
    chip(blocked, blocked === 1 ? 'needs input' : 'need input', true);
    chip(working, 'working', false);
    chip(online, `of ${state.members.size} online`, false);
    document.title = (blocked ? `(${blocked}) ` : '') + `${state.team} roster · codex-presence`;
  }

  function replaceAll(data) {
    state.team = data.team;
    $('team-name').textContent = data.team;
    state.members = new Map(data.members.map((p) => [p.name, p]));
    state.privileges = data.privileges || {};
    $('members').replaceChildren();
    for (const p of data.members) draw(p);
    drawSummary();
  }

  function update(p) {
    state.members.set(p.name, p);
    draw(p);
    drawSummary();
  }

  setInterval(() => {
    for (const row of document.querySelectorAll('li.member')) drawSeen(row);
  }, TICK_MS);

  // -- the stream ------------------------------------------------------------------------

  function connect() {
    if (state.source || !state.me) return;
    clearTimeout(state.retryTimer);
    state.retryTimer = null;
    const query = new URLSearchParams({ name: state.me, key: state.key });
    const source = new EventSource('/subscribe?' + query);
    state.source = source;
    stats.opens++;
    setStream('connecting', 'connecting…');
    source.addEventListener('open', () => {
      state.retries = 0;
      setStream('live', 'live');
    });
    source.addEventListener('roster', (e) => {
      replaceAll(JSON.parse(e.data));
      setStream('live', 'live'); // a roster is always current (after a stale spell too)
    });
    // The broker lost its shared store (Redis): the rows stay, and may be out of date.
    source.addEventListener('stale', () => setStream('stale', 'stale: broker lost its store'));
    source.addEventListener('presence', (e) => update(JSON.parse(e.data)));
    source.addEventListener('error', () => {
      if (source !== state.source) return;
      if (source.readyState === EventSource.CLOSED) {
        // Refused (signed out, broker restarted, too many streams): find out which.
        disconnect('offline', 'offline');
        retryLater();
      } else {
        setStream('reconnecting', 'reconnecting…');
      }
    });
  }

  function disconnect(status, text) {
    if (state.source) {
      state.source.close();
      state.source = null;
      stats.closes++;
    }
    setStream(status, text);
  }

  function retryLater() {
    const delay = RETRY_MS[Math.min(state.retries, RETRY_MS.length - 1)];
    state.retries++;
    clearTimeout(state.retryTimer);
    state.retryTimer = setTimeout(() => {
      state.retryTimer = null;
      if (document.visibilityState !== 'hidden') start();
    }, delay);
  }

  document.addEventListener('visibilitychange', () => {
    if (document.visibilityState === 'hidden') {
      if (state.hideTimer === null && state.source) {
        state.hideTimer = setTimeout(() => {
          state.hideTimer = null;
          disconnect('paused', 'paused (tab hidden)');
        }, hideDelay);
      }
    } else {
      clearTimeout(state.hideTimer);
      state.hideTimer = null;
      if (state.me && !state.source) connect();
    }
  });
  // Leaving the page: let go of the stream at once, not when the socket times out.
  window.addEventListener('pagehide', () => disconnect('closed', 'closed'));
  window.addEventListener('pageshow', (e) => { if (e.persisted && state.me) connect(); });

  // -- session ---------------------------------------------------------------------------

  function signedOut() {
    state.me = null;
    disconnect('closed', 'signed out');
    show('signin');
  }

  async function start() {
    state.key = state.key || sessionKey();  // signed in from another tab meanwhile?
    if (!state.key) {
      signedOut();  // no key: whatever cookie the jar holds is not this page's session
      return;
    }
    let response;
    try {
      response = await fetch('/whoami', {
        credentials: 'same-origin', cache: 'no-store', headers: { [KEY_HEADER]: state.key },
      });
    } catch (err) {
      setStream('offline', 'broker unreachable');
      retryLater();
      return;
    }
    if (response.status === 401) {
      setSessionKey('');
      signedOut();
      return;
    }
    if (!response.ok) {
      setStream('offline', `broker error ${response.status}`);
      retryLater();
      return;
    }
    const who = await response.json();
    state.me = who.name;
    state.team = who.team;
    $('me').textContent = who.name;
    $('team-name').textContent = who.team;
    show('roster');
    connect();
    if (document.visibilityState === 'hidden') {
      document.dispatchEvent(new Event('visibilitychange'));
    }
  }

  $('signin-form').addEventListener('submit', async (e) => {
    e.preventDefault();
    const error = $('signin-error');
    const button = $('signin-submit');
    error.hidden = true;
    button.disabled = true;
    try {
      const response = await fetch('/session', {
        method: 'POST',
        credentials: 'same-origin',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams({ token: $('token').value.trim() }),
      });
      if (response.status === 200) {
        $('token').value = '';
        setSessionKey((await response.json()).key);
        await start();
        return;
      }
      error.textContent = response.status === 401
        ? 'That token is not a member\u2019s token.'
        : `Sign-in failed (HTTP ${response.status}).`;
    } catch (err) {
      error.textContent = 'The broker cannot be reached.';
    } finally {
      button.disabled = false;
    }
    error.hidden = false;
  });

  $('sign-out').addEventListener('click', async () => {
    disconnect('closed', 'signed out');
    state.me = null;
    const key = state.key;
    setSessionKey('');
    try {
      await fetch('/session/logout', {
        method: 'POST', credentials: 'same-origin', headers: { [KEY_HEADER]: key },
      });
    } finally {
      $('members').replaceChildren();
      show('signin');
    }
  });

  start();
})();
