// codex-presence web roster: sign-in, the live SSE subscription, and the rows.
//
// The page holds one EventSource('/subscribe?name=<me>&key=<key>&light=1') while the tab
// is visible: a light stream, which never carries the whole roster: where a full one
// sends it, a light one sends `changed`, and the page reads GET /roster, sending back the
// ETag it has (If-None-Match: a 304 and no body while the roster is the one it read
// last); the `presence` events that come meanwhile are applied after it, in order. A
// session is the cookie (HttpOnly, set by POST /session) and the key that
// sign-in returns, kept in this origin's localStorage and sent with every request: a page
// on another port of this host shares the cookie jar but not the storage, so it can neither
// use a stolen cookie nor plant one of its own as the session. When the tab is hidden
// for longer than the hide delay the stream is closed, so the member's `connected` drops;
// showing the tab again reconnects. A brief tab-away never touches the stream.
//
// What an operator needs besides the rows: how long each member has been working or
// waiting (from `activitySince`, against this machine's clock), the longest-waiting first,
// how many of a member's sessions are working and need input when two or more are busy
// (`sessions`: "working (2 working, 1 needs input)"), what a member's sessions left running,
// apart from the state (`background`: "idle · 1 background command · 4 min"), the count of
// members who need input
// in the tab's title, a line per agent under its member (`agents`: "claude in api-server ·
// needs input: approve `make` · 1 min"), an opt-in desktop notification
// when someone becomes blocked (permission is asked only when the toggle is turned on),
// and the truth when the stream is down: the rows are marked stale, "as of" the moment it
// was lost (or the broker said it lost its shared store), until a fresh roster comes.
// Everything is drawn with textContent: nothing from the wire is parsed as HTML.
(() => {
  'use strict';

  const body = document.body;
  const $ = (id) => document.getElementById(id);
  const params = new URLSearchParams(location.search);
  const hideDelay = nonNegative(params.get('hideDelay'), nonNegative(body.dataset.hideDelay, 5000));
  const TICK_MS = 1000;            // how often the durations and "last active …" are redrawn
  const KEY_ITEM = 'codexPresenceSessionKey';
  const STARTED_ITEM = 'codexPresenceBrokerStartedAt';
  const SORT_ITEM = 'codexPresenceSort';
  const NOTIFY_ITEM = 'codexPresenceNotify';
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
    key: stored(KEY_ITEM),
    asOf: null,                    // while stale: when the rows were last known current
    sort: stored(SORT_ITEM) === 'team' ? 'team' : 'attention',
    notify: false,
    raw: [],                       // the roster as GET /roster last gave it
    etag: null,                    // GET /roster's ETag for raw
    whole: null,                   // a `changed` not yet read: {team, privileges}
    reading: false,
    held: [],                      // `presence` events that came during the read
  };
  // Read by tests and handy in the console: how often the stream was opened and closed,
  // and the notifications raised.
  // `reads`: GET /roster answers by status (200, 304, ...).
  const stats = (window.codexPresence = {
    opens: 0, closes: 0, hideDelay, notices: [], reads: {},
  });

  function stored(item) {
    try { return localStorage.getItem(item) || ''; } catch (err) { return ''; }
  }

  function store(item, value) {
    try {
      if (value) localStorage.setItem(item, value); else localStorage.removeItem(item);
    } catch (err) { /* storage refused: it lasts as long as this page */ }
  }

  function setSessionKey(key) {
    store(KEY_ITEM, key);
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

  // The stream's status; anything but live makes the rows stale.
  function setStream(status, text) {
    body.dataset.stream = status;
    $('stream').textContent = text;
    if (status === 'live') markLive();
    else if (state.members.size) markStale();
  }

  // -- words: time and counts (roster-words.js) -------------------------------------------

  const {
    clock, lastActive, elapsed, sinceOf, sessionsText, backgroundOf, agentsOf, agentText, waitsText,
  } = window.codexPresenceWords;

  // -- the rows --------------------------------------------------------------------------

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
    const since = sinceOf(p);
    row.dataset.connected = String(connected);
    row.dataset.activity = activity;
    row.dataset.lastSeen = String(p.lastSeen || 0);
    row.dataset.since = since === null ? '' : String(since);
    const background = backgroundOf(p);
    row.dataset.background = String(background);
    row.dataset.backgroundSince =
      background && Number.isFinite(p.backgroundSince) ? String(p.backgroundSince) : '';
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
    const sessions = activity === 'idle' ? '' : sessionsText(p);
    row.querySelector('.activity').textContent = sessions ? `${a.text} (${sessions})` : a.text;
    drawAgents(row, p);
    drawTimes(row);
  }

  // A line per agent session under the member: client and project, state, what a blocked
  // one waits on; its time is drawn with the others (drawTimes).
  function drawAgents(row, p) {
    const list = row.querySelector('.agents');
    const agents = agentsOf(p);
    list.replaceChildren();
    list.hidden = agents.length === 0;
    for (const agent of agents) {
      const activity = agent.state === 'working' || agent.state === 'blocked' ? agent.state : 'idle';
      const item = $('agent-template').content.firstElementChild.cloneNode(true);
      item.dataset.state = activity;
      item.dataset.since =
        activity !== 'idle' && Number.isFinite(agent.since) ? String(agent.since) : '';
      item.querySelector('.agent-what').textContent = agentText(agent);
      item.querySelector('.agent-state').textContent = ACTIVITY[activity].text;
      const waits = item.querySelector('.agent-waits');
      waits.textContent = activity === 'blocked' ? ': ' + waitsText(agent.waits) : '';
      waits.hidden = activity !== 'blocked';
      list.appendChild(item);
    }
  }

  // What moves with the clock: how long the activity has held, "last active …", and
  // whether the row is stale.
  function drawTimes(row) {
    const since = Number(row.dataset.since) || 0;
    const now = state.asOf === null ? Date.now() : state.asOf;
    row.querySelector('.since').textContent = since ? '· ' + elapsed((now - since) / 1000) : '';
    const background = Number(row.dataset.background) || 0;
    const backgroundSince = Number(row.dataset.backgroundSince) || 0;
    row.querySelector('.background').textContent = background
      ? `· ${background} background ${background === 1 ? 'command' : 'commands'}` +
        (backgroundSince ? ' · ' + elapsed((now - backgroundSince) / 1000) : '')
      : '';
    for (const item of row.querySelectorAll('.agent')) {
      const agentSince = Number(item.dataset.since) || 0;
      item.querySelector('.agent-since').textContent =
        agentSince ? '· ' + elapsed((now - agentSince) / 1000) : '';
    }
    row.querySelector('.activity-col').title =
      ACTIVITY[row.dataset.activity].label + (since ? ' since ' + new Date(since).toLocaleString() : '');
    const ms = Number(row.dataset.lastSeen) || 0;
    const el = row.querySelector('.last-active');
    el.textContent = lastActive(ms);
    el.title = ms ? new Date(ms).toLocaleString() : '';
    const asOf = row.querySelector('.as-of');
    asOf.hidden = state.asOf === null;
    asOf.textContent = state.asOf === null ? '' : 'as of ' + clock(state.asOf);
    if (state.asOf === null) delete row.dataset.stale; else row.dataset.stale = 'true';
  }

  function drawAllTimes() {
    for (const row of document.querySelectorAll('li.member')) drawTimes(row);
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
    document.title = (blocked ? `(${blocked}) ` : '') + `${state.team} roster`;
  }

  // -- order: the longest-waiting first ----------------------------------------------------

  // By default: blocked members, the longest-blocked first; then working ones, the longest
  // first; then everyone else, in team-file order. "team order" keeps the file's order.
  function ordered() {
    const names = [...state.members.keys()];
    if (state.sort === 'team') return names;
    const rank = { blocked: 0, working: 1 };
    const position = new Map(names.map((name, i) => [name, i]));
    const key = (name) => {
      const p = state.members.get(name);
      const since = sinceOf(p);
      return [rank[p.activity] ?? 2, since === null ? Infinity : since, position.get(name)];
    };
    return names.sort((x, y) => {
      const a = key(x), b = key(y);
      for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return a[i] < b[i] ? -1 : 1;
      return 0;
    });
  }

  function arrange() {
    const list = $('members');
    const rows = ordered().map(rowFor);
    if (rows.some((row, i) => list.children[i] !== row)) list.append(...rows);
  }

  // -- stale -----------------------------------------------------------------------------

  function markStale() {
    if (state.asOf !== null) return;  // stale since the first moment it was lost
    state.asOf = Date.now();
    body.dataset.stale = 'true';
    const note = $('stale-note');
    note.textContent = `Not live: these rows show the roster as of ${clock(state.asOf)}.`;
    note.hidden = false;
    drawAllTimes();
  }

  function markLive() {
    if (state.asOf === null) return;
    state.asOf = null;
    delete body.dataset.stale;
    $('stale-note').hidden = true;
    drawAllTimes();
  }

  // -- notifications ----------------------------------------------------------------------

  function notifyHint(text) {
    const hint = $('notify-hint');
    hint.textContent = text;
    hint.hidden = !text;
  }

  function setNotify(on) {
    state.notify = on;
    $('notify').checked = on;
    store(NOTIFY_ITEM, on ? '1' : '');
  }

  // Turned on: permission is asked now, and only now (never on load).
  async function toggleNotify() {
    if (!$('notify').checked) {
      setNotify(false);
      notifyHint('');
      return;
    }
    if (!('Notification' in window)) {
      setNotify(false);
      notifyHint('This browser cannot show notifications.');
      return;
    }
    let permission = Notification.permission;
    if (permission === 'default') {
      try { permission = await Notification.requestPermission(); } catch (err) { permission = 'denied'; }
    }
    if (permission === 'granted') {
      setNotify(true);
      notifyHint('');
    } else {
      setNotify(false);
      notifyHint('Notifications are blocked for this page: allow them in the browser\u2019s site settings.');
    }
  }

  function becameBlocked(before, after) {
    if (!state.notify || !before || before.activity === 'blocked' || after.activity !== 'blocked') return;
    if (!('Notification' in window) || Notification.permission !== 'granted') return;
    const title = `${after.name} needs input`;
    const waiting = agentsOf(after).find((a) => a.state === 'blocked' && a.client);
    const body = waiting
      ? `${state.team}: ${after.name} · ${agentText(waiting)}: ${waitsText(waiting.waits)}`
      : `${state.team}: ${after.name} is waiting on a person.`;
    const options = { body, tag: 'codex-presence:' + after.name };
    try {
      const notice = new Notification(title, options);
      notice.addEventListener('click', () => { window.focus(); notice.close(); });
      stats.notices.push({ title, body: options.body });
    } catch (err) { /* a browser that only notifies from a service worker */ }
  }

  // -- updates from the stream --------------------------------------------------------------

  // A member still blocked is the same wait: its since moves to the next agent's when the
  // first of two waiting agents is answered, and the page counts from the wait's start.
  function sameWait(before, p) {
    if (before && before.activity === 'blocked' && p.activity === 'blocked' &&
        Number.isFinite(before.activitySince) && Number.isFinite(p.activitySince) &&
        before.activitySince < p.activitySince) {
      return { ...p, activitySince: before.activitySince };
    }
    return p;
  }

  function replaceAll(data) {
    const before = state.members;
    state.team = data.team;
    $('team-name').textContent = data.team;
    data.members = data.members.map((p) => sameWait(before.get(p.name), p));
    state.members = new Map(data.members.map((p) => [p.name, p]));
    state.privileges = data.privileges || {};
    $('members').replaceChildren();
    for (const p of data.members) {
      draw(p);
      becameBlocked(before.get(p.name), p);
    }
    arrange();
    drawSummary();
    announce('roster');
  }

  function update(given) {
    const before = state.members.get(given.name);
    const p = sameWait(before, given);
    state.members.set(p.name, p);
    draw(p);
    becameBlocked(before, p);
    arrange();
    drawSummary();
  }

  setInterval(drawAllTimes, TICK_MS);

  // -- the stream ------------------------------------------------------------------------

  function connect() {
    if (state.source || !state.me) return;
    clearTimeout(state.retryTimer);
    state.retryTimer = null;
    const query = new URLSearchParams({ name: state.me, key: state.key, light: '1' });
    const source = new EventSource('/subscribe?' + query);
    state.source = source;
    stats.opens++;
    setStream('connecting', 'connecting…');
    source.addEventListener('open', () => { state.retries = 0; });
    source.addEventListener('changed', (e) => changed(JSON.parse(e.data)));
    source.addEventListener('presence', (e) => {
      const p = JSON.parse(e.data);
      if (state.reading) state.held.push(p);
      else update(p);
    });
    // The broker lost its shared store (Redis): the rows stay, and may be out of date.
    source.addEventListener('stale', () => setStream('stale', 'stale: broker lost its store'));
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

  // Where a full stream sends the roster: read it (one read at a time; a `changed`
  // during a read reads again), then apply the `presence` events held meanwhile.
  function changed(data) {
    state.whole = { team: data.team, privileges: data.privileges || {} };
    if (!state.reading) readRoster();
  }

  async function readRoster() {
    state.reading = true;
    try {
      while (state.whole) {
        const whole = state.whole;
        state.whole = null;
        state.held = [];  // what came before this read is in it
        const headers = { [KEY_HEADER]: state.key };
        if (state.etag) headers['If-None-Match'] = state.etag;
        let response;
        try {
          response = await fetch('/roster', {
            credentials: 'same-origin', cache: 'no-store', headers,
          });
        } catch {
          return;  // the stream is down too: its reconnect reads again
        }
        stats.reads[response.status] = (stats.reads[response.status] || 0) + 1;
        if (response.status === 200) {
          state.raw = await response.json();
          state.etag = response.headers.get('ETag');
        } else if (response.status !== 304) {
          return;  // signed out, or the broker's trouble: the stream says which
        }
        if (state.whole) continue;  // read again
        replaceAll({ team: whole.team, members: state.raw, privileges: whole.privileges });
        setStream('live', 'live'); // a roster read after `changed` is current
      }
    } finally {
      state.reading = false;
      const held = state.held;
      state.held = [];
      for (const p of held) update(p);  // in order, after the roster they came after
    }
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

  // Told to roster-notify.js, which shows an admin the notification targets: each roster
  // (whether the member is an admin, by the broker's own bucket), and signing out.
  function announce(what) {
    const admin = state.me !== null && state.privileges[state.me] === 'admin';
    document.dispatchEvent(new CustomEvent('codexpresence:' + what, { detail: { key: state.key, admin } }));
  }

  function signedOut(reason) {
    announce('signedout');
    state.me = null;
    state.members = new Map();
    disconnect('closed', 'signed out');
    markLive();
    $('members').replaceChildren();
    const note = $('signin-reason');
    note.textContent = reason || '';
    note.hidden = !reason;
    show('signin');
  }

  // The session this page held is gone: say why. A broker that keeps its sessions in
  // memory forgets them when it restarts, and /healthz says when it started.
  async function whyEnded() {
    const started = stored(STARTED_ITEM);
    try {
      const health = await (await fetch('/healthz', { cache: 'no-store' })).json();
      if (!health.store && started && String(health.startedAt) !== started) {
        return 'The broker restarted; sign in again.';
      }
    } catch (err) { /* not known: say what is */ }
    return 'Your session ended (signed out elsewhere, or expired); sign in again.';
  }

  async function start() {
    state.key = state.key || stored(KEY_ITEM);  // signed in from another tab meanwhile?
    if (!state.key) {
      signedOut('');  // no key: whatever cookie the jar holds is not this page's session
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
      const reason = await whyEnded();
      setSessionKey('');
      store(STARTED_ITEM, '');
      signedOut(reason);
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
    $('signin-reason').hidden = true;
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
        const answer = await response.json();
        setSessionKey(answer.key);
        store(STARTED_ITEM, String(answer.brokerStartedAt || ''));
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
    announce('signedout');
    disconnect('closed', 'signed out');
    state.me = null;
    const key = state.key;
    setSessionKey('');
    store(STARTED_ITEM, '');
    try {
      await fetch('/session/logout', {
        method: 'POST', credentials: 'same-origin', headers: { [KEY_HEADER]: key },
      });
    } finally {
      signedOut('');
    }
  });

  $('sort').value = state.sort;
  $('sort').addEventListener('change', () => {
    state.sort = $('sort').value === 'team' ? 'team' : 'attention';
    store(SORT_ITEM, state.sort === 'team' ? 'team' : '');
    arrange();
  });
  // A choice made before stays made, if the browser still allows it; nothing is asked.
  setNotify(stored(NOTIFY_ITEM) === '1' && 'Notification' in window && Notification.permission === 'granted');
  $('notify').addEventListener('change', toggleNotify);

  start();
})();
