// Flightdeck dashboard: vanilla JS, no build step. It polls the JSON API under /ui/api/
// (relative to this page), never stacks requests of one kind, and renders with keyed row
// updates so that rows, buttons and focus survive every refresh. No innerHTML with data:
// every value goes through textContent or an attribute. Every API request carries the token
// the user typed once into the token form (kept in sessionStorage, for this tab only) as
// "Authorization: Bearer"; a 401 brings the form back with the reason.
(() => {
  'use strict';

  const API = 'api/';
  const TOKEN_KEY = 'flightdeck.token';
  const THEME_KEY = 'flightdeck.theme';
  const STATUSES = ['PENDING', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELLED', 'EXPIRED'];
  const TERMINAL = ['SUCCEEDED', 'FAILED', 'CANCELLED', 'EXPIRED'];
  const SHARED = ['owner', 'follower', 'hit', 'local'];
  const CONFIRM_MS = 4000;

  const $ = (id) => document.getElementById(id);

  // h builds an element: h('td', {class: 'num', title: '…'}, 'text', child).
  function h(tag, props, ...children) {
    const el = document.createElement(tag);
    if (props) {
      for (const [k, v] of Object.entries(props)) {
        if (v == null || v === false) continue;
        if (k === 'class') el.className = v;
        else if (k === 'text') el.textContent = v;
        else if (k === 'data') Object.assign(el.dataset, v);
        else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
        else el.setAttribute(k, v === true ? '' : String(v));
      }
    }
    for (const c of children.flat()) {
      if (c == null || c === false) continue;
      el.append(c instanceof Node ? c : String(c));
    }
    return el;
  }

  function setText(el, v) {
    const s = v == null ? '' : String(v);
    if (el.textContent !== s) el.textContent = s;
  }
  function setAttr(el, name, v) {
    if (v == null || v === false) {
      if (el.hasAttribute(name)) el.removeAttribute(name);
    } else if (el.getAttribute(name) !== String(v)) {
      el.setAttribute(name, String(v));
    }
  }
  function setClass(el, name, on) {
    if (el.classList.contains(name) !== !!on) el.classList.toggle(name, !!on);
  }

  // ---- formatting -------------------------------------------------------------------------

  const nf = new Intl.NumberFormat();
  function fmtInt(n) { return n == null || n < 0 ? '—' : nf.format(n); }
  function fmtDur(ms) {
    if (ms == null || ms < 0 || !Number.isFinite(ms)) return '—';
    if (ms < 1000) return Math.round(ms) + ' ms';
    const s = ms / 1000;
    if (s < 10) return s.toFixed(1) + ' s';
    if (s < 60) return Math.round(s) + ' s';
    const m = Math.floor(s / 60);
    if (m < 60) return m + 'm ' + String(Math.floor(s % 60)).padStart(2, '0') + 's';
    const hrs = Math.floor(m / 60);
    if (hrs < 48) return hrs + 'h ' + String(m % 60).padStart(2, '0') + 'm';
    return Math.floor(hrs / 24) + 'd ' + (hrs % 24) + 'h';
  }
  function fmtRate(r) {
    if (!r) return '0';
    if (r < 0.1) return r.toFixed(3);
    if (r < 10) return r.toFixed(2);
    return r.toFixed(1);
  }
  function fmtClock(d) {
    if (!(d instanceof Date) || Number.isNaN(d.getTime())) return '—';
    const p = (n, w = 2) => String(n).padStart(w, '0');
    return p(d.getHours()) + ':' + p(d.getMinutes()) + ':' + p(d.getSeconds()) + '.' + p(d.getMilliseconds(), 3);
  }
  // A flight key is ai:<stage>:v<n>:<tenant>:<sha256> or …:<tenant>:rk:<requestKey>; stage
  // and tenant have their own columns, so the key column shows what identifies the request.
  function keyTail(key, stage, tenant) {
    let rest = key;
    const m = /^[^:]+:([^:]+):v\d+:([^:]+):(.*)$/.exec(key);
    if (m && (!stage || m[1] === stage) && (!tenant || m[2] === tenant)) rest = m[3];
    return rest;
  }
  function shortKey(key, stage, tenant) {
    const rest = keyTail(key, stage, tenant);
    if (/^[0-9a-f]{64}$/.test(rest)) return rest.slice(0, 12) + '…' + rest.slice(-4);
    if (rest.length > 28) return rest.slice(0, 18) + '…' + rest.slice(-8);
    return rest;
  }
  // errorText joins type, code and message, dropping repeats ("cancelled · cancelled").
  function errorText(type, code, msg) {
    const head = [...new Set([type, code].filter(Boolean))].join(' · ');
    return head && msg ? head + ': ' + msg : head || msg || '';
  }
  function trunc(s, n) { return s.length > n ? s.slice(0, n - 1) + '…' : s; }
  function parseTime(s) {
    if (!s) return null;
    const d = new Date(s);
    return Number.isNaN(d.getTime()) || d.getFullYear() < 1971 ? null : d;
  }

  // ---- state --------------------------------------------------------------------------------

  const state = {
    paused: false,
    token: sessionStorage.getItem(TOKEN_KEY) || '',
    locked: true,          // no accepted token yet: the token form is up and nothing polls
    actions: false,        // the node has an action token configured
    canAct: false,         // this tab's token is the action token
    nodeName: '',
    stageModes: {},
    filter: { status: '', stage: '', q: '' },
    flights: [],
    counts: {},
    stages: [],
    detailKey: null,
    detailSig: '',
    skewMs: 0,             // server clock minus client clock, from overview.generatedAt
    failing: new Map(),    // resource -> last error message
    everOk: false,
    eventsSeen: null,      // Set of event row keys once the first events arrived
    actionsState: new Map(), // "cancel:<key>" / "requeue:<stage>/<id>" -> {confirm, busy, error, timer}
  };

  // ---- API ----------------------------------------------------------------------------------

  class APIError extends Error {
    constructor(message, status, code, token) {
      super(message);
      this.status = status;
      this.code = code || '';
      this.token = token; // the token the request carried
    }
  }

  async function api(path, opts = {}) {
    const ctl = new AbortController();
    const timer = setTimeout(() => ctl.abort(), opts.timeout || 10000);
    const token = opts.token != null ? opts.token : state.token;
    const headers = Object.assign({}, opts.headers);
    if (token) headers.Authorization = 'Bearer ' + token;
    let res;
    try {
      res = await fetch(API + path, {
        method: opts.method || 'GET',
        headers,
        body: opts.body,
        cache: 'no-store',
        credentials: 'same-origin',
        signal: ctl.signal,
      });
    } catch (e) {
      throw new APIError(e && e.name === 'AbortError' ? 'request timed out' : 'network error', 0, '', token);
    } finally {
      clearTimeout(timer);
    }
    const text = await res.text().catch(() => '');
    let body = null;
    try { body = text ? JSON.parse(text) : null; } catch { body = null; }
    if (!res.ok) {
      const msg = (body && typeof body.error === 'string' && body.error) || text.trim() || res.statusText;
      throw new APIError(msg || 'HTTP ' + res.status, res.status, body && body.code, token);
    }
    return body;
  }

  // ---- polling ------------------------------------------------------------------------------

  // Each resource is fetched at most once at a time: a tick that finds it in flight skips it.
  const resources = {
    overview: { every: 1000, path: () => 'overview', apply: renderOverview },
    flights: { every: 1000, path: flightsPath, apply: renderFlights },
    events: { every: 1000, path: () => 'events?n=60', apply: renderEvents },
    node: { every: 2500, path: () => 'node', apply: renderNode },
    dlq: { every: 2500, path: () => 'dlq?n=50', apply: renderDLQ },
    detail: { every: 1000, path: () => state.detailKey && 'flight?key=' + encodeURIComponent(state.detailKey),
      apply: renderDetail, fail: detailFailed },
  };
  for (const r of Object.values(resources)) { r.inflight = false; r.last = 0; r.gen = 0; }

  function flightsPath() {
    const q = new URLSearchParams({ limit: '200' });
    if (state.filter.status) q.set('status', state.filter.status);
    if (state.filter.stage) q.set('stage', state.filter.stage);
    return 'flights?' + q;
  }

  async function load(name) {
    const r = resources[name];
    const path = r.path();
    if (!path || r.inflight || state.locked) return;
    r.inflight = true;
    r.last = Date.now();
    const gen = r.gen;
    let body;
    try {
      body = await api(path);
    } catch (e) {
      if (authFailure(e) || state.locked || e.token !== state.token) return;
      // A 4xx of the detail read is about the flight (gone, bad key), not the connection.
      if (r.fail && e.status >= 400 && e.status < 500) { ok(name); r.fail(e); } else failed(name, e);
      return;
    } finally {
      r.inflight = false;
    }
    if (state.locked) return; // answered for a token that is no longer in use
    if (gen !== r.gen) { load(name); return; } // the query changed meanwhile: read again
    ok(name);
    r.apply(body); // a rendering bug surfaces as an uncaught error, not as a connection problem
  }

  // refresh marks resources as due and fetches them now (after an action or a filter change).
  function refresh(...names) {
    for (const n of names) {
      const r = resources[n];
      if (r.inflight) r.gen++;
      r.last = 0;
      load(n);
    }
  }

  function tick() {
    if (state.paused || state.locked || document.hidden) return;
    const now = Date.now();
    for (const [name, r] of Object.entries(resources)) {
      if (!r.inflight && now - r.last >= r.every - 50) load(name);
    }
  }

  function ok(name) {
    state.everOk = true;
    if (state.failing.delete(name) || state.failing.size === 0) renderConnection();
    setText($('updated'), 'updated ' + fmtClock(new Date()));
  }
  function failed(name, e) {
    state.failing.set(name, (e.status ? 'HTTP ' + e.status + ': ' : '') + e.message);
    renderConnection();
  }

  function renderConnection() {
    const banner = $('conn-error');
    const down = state.failing.size > 0;
    banner.hidden = !down;
    if (down) {
      // One line per distinct error, naming the reads that got it.
      const byMsg = new Map();
      for (const [name, msg] of state.failing) byMsg.set(msg, [...(byMsg.get(msg) || []), name]);
      setText($('conn-error-detail'), [...byMsg].map(([msg, names]) => names.join(', ') + ': ' + msg).join(' · '));
    }
    const live = $('live');
    let st = 'live', label = 'Live';
    if (state.locked) { st = 'locked'; label = 'Token needed'; }
    else if (state.paused) { st = 'paused'; label = 'Paused'; }
    else if (down) { st = 'offline'; label = 'Offline'; }
    else if (!state.everOk) { st = 'connecting'; label = 'Connecting'; }
    live.dataset.state = st;
    setText($('live-label'), label);
    document.body.classList.toggle('stale', down);
  }

  function setPaused(p) {
    state.paused = p;
    const b = $('pause');
    b.setAttribute('aria-pressed', String(p));
    setText(b, p ? 'Resume' : 'Pause');
    renderConnection();
    if (!p) tick();
  }

  // ---- token --------------------------------------------------------------------------------

  // authMessage says why a token was not accepted, in words a person can act on.
  function authMessage(e) {
    if (e.status === 401 && e.code === 'token_required') return 'This API needs a token (401).';
    if (e.status === 401) {
      return 'Token refused (401): it matches neither FLIGHTDECK_UI_READ_TOKEN nor FLIGHTDECK_UI_TOKEN of this consumer.';
    }
    if (e.status === 429) return 'Too many wrong tokens from this address (429): ' + e.message + '.';
    if (e.status === 403) return 'Refused (403): ' + e.message + '.';
    return 'Could not check the token: ' + (e.status ? 'HTTP ' + e.status + ': ' : '') + e.message;
  }

  // authFailure handles a refusal of the token itself (401, or 403 because no token is
  // configured on the node): the form comes back with the reason. Other errors are left to
  // the caller.
  function authFailure(e) {
    const auth = e.status === 401 || (e.status === 403 && e.code === 'no_token_configured');
    if (!auth) return false;
    if (e.token === state.token) lock(authMessage(e)); // else a request of a token since replaced
    return true;
  }

  // lock forgets the token and shows the token form, with message when there is one.
  function lock(message) {
    state.token = '';
    sessionStorage.removeItem(TOKEN_KEY);
    state.locked = true;
    state.canAct = false;
    state.failing.clear();
    for (const r of Object.values(resources)) r.gen++;
    $('auth').hidden = false;
    const err = $('auth-error');
    setText(err, message || '');
    err.hidden = !message;
    const input = $('auth-token');
    input.value = '';
    input.focus();
    renderConnection();
    renderActionButtons();
    renderTokenButton();
  }

  // unlock uses token from now on; node is the node read that accepted it.
  function unlock(token, node) {
    state.token = token;
    sessionStorage.setItem(TOKEN_KEY, token);
    state.locked = false;
    $('auth').hidden = true;
    $('auth-error').hidden = true;
    for (const s of state.actionsState.values()) s.error = '';
    renderNode(node);
    renderConnection();
    refresh(...Object.keys(resources));
  }

  // tryToken checks token with a read of the node; the form shows why when it fails.
  async function tryToken(token) {
    const btn = $('auth-submit');
    btn.disabled = true;
    try {
      const node = await api('node', { token });
      unlock(token, node);
    } catch (e) {
      lock(authMessage(e));
    } finally {
      btn.disabled = false;
    }
  }

  function renderTokenButton() {
    const b = $('token-button');
    const access = state.locked ? '' : state.canAct ? 'act' : 'read';
    if (b.dataset.access !== access) b.dataset.access = access;
    setText(b, state.locked ? 'Token' : 'Token: ');
    b.title = state.locked ? 'enter the dashboard token'
      : state.canAct ? 'this tab uses the action token; click to use another one'
        : 'this tab uses the read-only token; click to enter the action token';
  }

  // ---- node ---------------------------------------------------------------------------------

  function renderNode(body) {
    const actions = !!(body && body.actions);
    const canAct = !!(body && body.canAct);
    const st = (body && body.status) || null;
    if (actions !== state.actions || canAct !== state.canAct) {
      state.actions = actions;
      state.canAct = canAct;
      renderActionButtons();
    }
    renderTokenButton();
    const node = $('node');
    $('node-breaker').hidden = !st;
    if (!st) { // the handler has no Node func: only the name placeholder
      node.dataset.state = 'unknown';
      setText($('node-name'), '—');
      return;
    }
    state.nodeName = st.name || '';
    state.stageModes = st.stages || {};
    node.dataset.state = st.draining ? 'draining' : st.started ? 'running' : 'starting';
    setText($('node-name'), st.name || '—');
    const br = $('node-breaker');
    br.dataset.breaker = st.breaker || '';
    setText(br, 'breaker ' + (st.breaker || '—'));
    br.title = {
      closed: 'coordination breaker closed: Redis answers',
      'half-open': 'coordination breaker half-open: probing Redis',
      open: 'coordination breaker open: no coordination commands are sent',
    }[st.breaker] || '';
    const dr = $('node-draining');
    dr.hidden = !st.draining && st.started !== false;
    setText(dr, st.draining ? 'draining' : 'starting');
    dr.dataset.kind = st.draining ? 'draining' : 'starting';
    setText($('node-running'), fmtInt(st.runningOwners));
    const sp = $('node-spooled');
    setText(sp, fmtInt(st.spooled));
    setClass(sp, 'warn', st.spooled > 0);
    for (const card of $('stages').children) updateStageMode(card);
  }

  // ---- overview: stages, consumers, counts ----------------------------------------------------

  function renderOverview(ov) {
    if (!ov) return;
    const gen = parseTime(ov.generatedAt);
    if (gen) state.skewMs = gen.getTime() - Date.now();
    state.counts = ov.flightsByStatus || {};
    state.stages = (ov.stages || []).map((s) => s.name);
    renderCounts();
    renderStageFilter();
    renderStages(ov.stages || []);
    renderConsumers(ov.consumers || []);
  }

  function renderCounts() {
    let total = 0;
    for (const s of STATUSES) total += state.counts[s] || 0;
    for (const el of document.querySelectorAll('#status-filter [data-count]')) {
      const s = el.dataset.count;
      const n = s ? state.counts[s] || 0 : total;
      setText(el, fmtInt(n));
      setClass(el, 'zero', n === 0);
    }
  }

  function renderStageFilter() {
    const sel = $('stage-filter');
    const have = [...sel.options].slice(1).map((o) => o.value);
    if (have.join('\n') === state.stages.join('\n')) return;
    const cur = sel.value;
    sel.replaceChildren(h('option', { value: '' }, 'All stages'), ...state.stages.map((s) => h('option', { value: s }, s)));
    sel.value = state.stages.includes(cur) ? cur : '';
  }

  function renderStages(stages) {
    const grid = $('stages');
    $('stages-empty').hidden = stages.length > 0;
    reconcile(grid, stages, (s) => s.name, makeStageCard, updateStageCard);
  }

  function metric(label, cls, title) {
    const v = h('div', { class: 'metric-value num' }, '—');
    const el = h('div', { class: 'metric ' + (cls || ''), title }, h('div', { class: 'metric-label' }, label), v);
    return { el, v };
  }

  function makeStageCard(s) {
    const c = {};
    c.mode = h('span', { class: 'badge mode', title: 'coordination mode on this node' });
    c.tput = metric('rate', 'big', 'throughput: terminal events per second over the last minute');
    c.events = metric('events 1m', 'big', 'terminal events in the last 60 s');
    c.p50 = metric('p50', 'big', 'median end-to-end latency (queue wait + run) of the last minute');
    c.p99 = metric('p99', 'big', '99th percentile end-to-end latency of the last minute');
    c.backlog = metric('backlog', '', 'task entries not yet delivered to any consumer');
    c.pending = metric('pending', '', 'task entries consumers hold (running or waiting to run)');
    c.parked = metric('parked', '', 'task entries parked on running flights until their outcome');
    c.dlq = metric('DLQ', '', 'dead-letter queue length');
    c.streams = metric('streams', '', 'task stream / result stream length');
    c.bar = h('div', { class: 'outcome-bar', title: 'terminal statuses of the last minute' });
    c.barSegs = {};
    for (const st of TERMINAL) {
      c.barSegs[st] = h('span', { class: 'seg', data: { status: st } });
      c.bar.append(c.barSegs[st]);
    }
    const short = { SUCCEEDED: 'OK', FAILED: 'Failed', CANCELLED: 'Cancelled', EXPIRED: 'Expired' };
    const head = h('tr', null, h('th', null, ''), ...TERMINAL.map((st) => h('th', { class: 'num', title: st },
      h('span', { class: 'dot-status', data: { status: st } }), short[st])));
    c.cells = {};
    const rows = SHARED.map((sh) => {
      c.cells[sh] = {};
      return h('tr', null, h('th', { class: 'shared-name' }, sh), ...TERMINAL.map((st) => {
        const td = h('td', { class: 'num zero', data: { outcome: sh + '/' + st } }, '0');
        c.cells[sh][st] = td;
        return td;
      }));
    });
    c.total = h('span', { class: 'muted small' });
    const card = h('article', { class: 'stage-card', data: { stage: s.name } },
      h('header', { class: 'stage-head' }, h('h3', { class: 'mono' }, s.name), c.mode),
      h('div', { class: 'metrics big-row' }, c.tput.el, c.events.el, c.p50.el, c.p99.el),
      h('div', { class: 'metrics small-row' }, c.backlog.el, c.pending.el, c.parked.el, c.dlq.el, c.streams.el),
      h('div', { class: 'outcomes' },
        h('div', { class: 'outcomes-head' }, h('span', null, 'outcomes'), c.total),
        c.bar,
        h('table', { class: 'outcome-table' }, h('thead', null, head), h('tbody', null, rows))));
    card._c = c;
    return card;
  }

  function updateStageMode(card) {
    const mode = state.stageModes[card.dataset.stage];
    const el = card._c.mode;
    setText(el, mode || 'not consumed here');
    el.dataset.mode = mode || '';
  }

  function updateStageCard(card, s) {
    const c = card._c;
    updateStageMode(card);
    setText(c.tput.v, fmtRate(s.perSecond) + '/s');
    setText(c.events.v, fmtInt(s.eventsLastMinute));
    setText(c.p50.v, s.eventsLastMinute ? fmtDur(s.p50Ms) : '—');
    setText(c.p99.v, s.eventsLastMinute ? fmtDur(s.p99Ms) : '—');
    setText(c.backlog.v, fmtInt(s.backlog));
    setClass(c.backlog.el, 'warn', s.backlog > 0);
    setText(c.pending.v, fmtInt(s.pending));
    setText(c.parked.v, fmtInt(s.parked || 0));
    setText(c.dlq.v, fmtInt(s.dlqLen));
    setClass(c.dlq.el, 'bad', s.dlqLen > 0);
    setText(c.streams.v, fmtInt(s.taskStreamLen) + ' / ' + fmtInt(s.resultStreamLen));
    const out = s.outcomes || {};
    const byStatus = {};
    let total = 0;
    for (const sh of SHARED) {
      for (const st of TERMINAL) {
        const n = out[sh + '/' + st] || 0;
        byStatus[st] = (byStatus[st] || 0) + n;
        total += n;
        const td = c.cells[sh][st];
        setText(td, fmtInt(n));
        setClass(td, 'zero', n === 0);
      }
    }
    // Outcomes with a shared value this page does not know still count in the bar.
    for (const [k, n] of Object.entries(out)) {
      const [sh, st] = k.split('/');
      if (!SHARED.includes(sh) && TERMINAL.includes(st)) { byStatus[st] += n; total += n; }
    }
    setText(c.total, total ? fmtInt(total) + ' events' : 'no events in the last minute');
    setClass(c.bar, 'empty-bar', total === 0);
    for (const st of TERMINAL) {
      const pct = total ? (100 * byStatus[st]) / total : 0;
      const seg = c.barSegs[st];
      const w = pct.toFixed(2) + '%';
      if (seg.style.width !== w) seg.style.width = w; // CSSOM, allowed by the CSP
      seg.title = st + ': ' + (byStatus[st] || 0);
    }
  }

  function renderConsumers(list) {
    setText($('consumers-count'), list.length ? fmtInt(list.length) : '');
    $('consumers-empty').hidden = list.length > 0;
    reconcile($('consumers').tBodies[0], list, (c) => c.name, makeConsumerRow, updateConsumerRow);
  }

  function makeConsumerRow(c) {
    const cells = {
      name: h('td', { class: 'mono' }),
      state: h('td'),
      beat: h('td', { class: 'num' }),
      pending: h('td', { class: 'chips' }),
    };
    cells.badge = h('span', { class: 'badge' });
    cells.state.append(cells.badge);
    cells.nameText = h('span');
    cells.self = h('span', { class: 'tag', title: 'the node serving this page' }, 'this node');
    cells.name.append(cells.nameText, cells.self);
    const tr = h('tr', { data: { consumer: c.name } }, cells.name, cells.state, cells.beat, cells.pending);
    tr._c = cells;
    return tr;
  }

  function updateConsumerRow(tr, c) {
    const x = tr._c;
    setText(x.nameText, c.name);
    x.self.hidden = c.name !== state.nodeName;
    const st = c.lastBeatAgeMs < 0 ? 'gone' : c.alive ? 'alive' : 'dead';
    tr.dataset.alive = String(!!c.alive);
    setText(x.badge, st);
    x.badge.dataset.liveness = st;
    x.badge.title = st === 'gone' ? 'no liveness entry: its pending entries are claimable' : '';
    setText(x.beat, c.lastBeatAgeMs < 0 ? '—' : fmtDur(c.lastBeatAgeMs) + ' ago');
    const entries = Object.entries(c.pending || {}).filter(([, n]) => n > 0).sort();
    const sig = JSON.stringify(entries);
    if (x.pending.dataset.sig !== sig) {
      x.pending.dataset.sig = sig;
      x.pending.replaceChildren(...(entries.length ? entries.map(([stage, n]) =>
        h('span', { class: 'chip', data: { stage } }, h('span', { class: 'chip-k' }, stage), h('span', { class: 'chip-v num' }, fmtInt(n))))
        : [h('span', { class: 'muted' }, 'none')]));
    }
  }

  // ---- flights ------------------------------------------------------------------------------

  function renderFlights(list) {
    state.flights = Array.isArray(list) ? list : [];
    drawFlights();
  }

  function drawFlights() {
    const q = state.filter.q.trim().toLowerCase();
    const shown = q ? state.flights.filter((f) => [f.key, f.ownerId, f.taskId, f.tenant, f.stage, f.error]
      .some((v) => v && String(v).toLowerCase().includes(q))) : state.flights;
    setText($('flights-count'), shown.length === state.flights.length ? fmtInt(shown.length)
      : fmtInt(shown.length) + ' of ' + fmtInt(state.flights.length));
    $('flights-empty').hidden = shown.length > 0;
    setText($('flights-empty'), state.flights.length || state.filter.status || state.filter.stage
      ? 'No flights match the filter.' : 'No flights in Redis right now.');
    reconcile($('flights').tBodies[0], shown, (f) => f.key, makeFlightRow, updateFlightRow);
  }

  function makeFlightRow(f) {
    const x = {};
    x.keyText = h('span', { class: 'mono key' });
    x.err = h('div', { class: 'row-error' });
    x.key = h('td', { class: 'key-cell' }, x.keyText, x.err);
    x.stage = h('td', { class: 'mono dim' });
    x.tenant = h('td');
    x.statusBadge = h('span', { class: 'badge status' });
    x.status = h('td', null, x.statusBadge);
    x.owner = h('td', { class: 'mono' });
    x.token = h('td', { class: 'num mono dim' });
    x.attempts = h('td', { class: 'num' });
    x.hb = h('td', { class: 'num' });
    x.progress = h('td', { class: 'num' });
    x.expires = h('td', { class: 'num' });
    x.parked = h('td', { class: 'num' });
    x.btn = h('button', { type: 'button', class: 'btn small danger', data: { action: 'cancel', key: f.key } }, 'Cancel');
    x.actErr = h('div', { class: 'action-error', data: { role: 'action-error' } });
    x.act = h('td', { class: 'act' }, x.btn, x.actErr);
    const tr = h('tr', { class: 'clickable', tabindex: '0', data: { key: f.key } },
      x.key, x.stage, x.tenant, x.status, x.owner, x.token, x.attempts, x.hb, x.progress, x.expires, x.parked, x.act);
    tr._c = x;
    return tr;
  }

  function updateFlightRow(tr, f) {
    const x = tr._c;
    const active = f.status === 'PENDING' || f.status === 'RUNNING';
    tr.dataset.status = f.status;
    tr.dataset.parked = String(f.parked || 0);
    setClass(tr, 'selected', state.detailKey === f.key);
    setClass(tr, 'finished', !active);
    setText(x.keyText, shortKey(f.key, f.stage, f.tenant));
    setAttr(x.keyText, 'title', f.key);
    const err = errorText(f.errorType, f.errorCode, f.error);
    setText(x.err, err ? trunc(err, 120) : '');
    setClass(x.err, 'soft', f.status === 'CANCELLED');
    setAttr(x.err, 'title', err || null);
    x.err.hidden = !err;
    setText(x.stage, f.stage);
    setText(x.tenant, f.tenant);
    setStatusBadge(x.statusBadge, f.status);
    setText(x.owner, f.ownerId || '—');
    setAttr(x.owner, 'title', f.taskId ? 'owner task ' + f.taskId : null);
    setText(x.token, f.token ? String(f.token) : '—');
    setText(x.attempts, fmtInt(f.attempts));
    // Heartbeat and progress ages only mean something while the flight runs.
    ageCell(x.hb, active ? f.heartbeatAgeMs : -1, 3000, 5000);
    ageCell(x.progress, active ? f.progressAgeMs : -1, 15000, 60000);
    setText(x.expires, f.expiresInMs >= 0 ? fmtDur(f.expiresInMs) : '—');
    setClass(x.expires, 'warn', f.expiresInMs >= 0 && f.expiresInMs < 2000);
    setText(x.parked, f.parked ? fmtInt(f.parked) : '—');
    setClass(x.parked, 'strong', f.parked > 0);
    x.btn.hidden = !active;
    updateActionButton(x.btn, x.actErr, 'cancel:' + f.key, 'Cancel');
  }

  function ageCell(td, ms, warn, bad) {
    setText(td, ms >= 0 ? fmtDur(ms) : '—');
    setClass(td, 'warn', ms >= warn && ms < bad);
    setClass(td, 'bad', ms >= bad);
  }

  function setStatusBadge(el, status) {
    setText(el, status || '—');
    if (el.dataset.status !== status) el.dataset.status = status || '';
  }

  // ---- events -------------------------------------------------------------------------------

  function renderEvents(list) {
    list = Array.isArray(list) ? list : [];
    setText($('events-count'), list.length ? fmtInt(list.length) : '');
    $('events-empty').hidden = list.length > 0;
    const first = state.eventsSeen === null;
    const seen = state.eventsSeen || new Set();
    reconcile($('events').tBodies[0], list, (e) => e.event.stage + '/' + e.id, (e) => {
      const tr = makeEventRow(e);
      if (!first && !seen.has(e.event.stage + '/' + e.id)) tr.classList.add('fresh');
      return tr;
    }, () => {});
    state.eventsSeen = new Set(list.map((e) => e.event.stage + '/' + e.id));
  }

  function makeEventRow(ev) {
    const e = ev.event;
    const when = parseTime(e.finishedAt) || new Date(Number(ev.id.split('-')[0]));
    const status = h('span', { class: 'badge status' });
    setStatusBadge(status, e.status);
    const err = errorText('', e.errorCode, e.error);
    const keyOrErr = err
      ? h('td', { class: e.status === 'CANCELLED' ? 'soft-text' : 'err-text', title: err }, trunc(err, 90))
      : h('td', { class: 'mono dim key', title: e.requestKey || '' }, e.requestKey ? shortKey(e.requestKey, e.stage, e.tenant) : '—');
    const tr = h('tr', { data: { taskId: e.taskId, status: e.status, shared: e.shared || '', key: e.requestKey || '' } },
      h('td', { class: 'num mono dim', title: when.toISOString() }, fmtClock(when)),
      h('td', { class: 'mono', title: e.taskId }, trunc(e.taskId, 28)),
      h('td', { class: 'mono dim' }, e.stage),
      h('td', null, status),
      h('td', null, h('span', { class: 'shared', data: { shared: e.shared || '' } }, e.shared || '—')),
      h('td', { class: 'num mono dim' }, e.ownerToken ? String(e.ownerToken) : '—'),
      h('td', { class: 'mono' }, e.consumer || '—'),
      h('td', { class: 'num' }, fmtDur(e.queuedMs)),
      h('td', { class: 'num' }, e.shared === 'owner' || e.runMs ? fmtDur(e.runMs) : '—'),
      keyOrErr);
    if (e.requestKey) {
      tr.classList.add('clickable');
      tr.tabIndex = 0;
    }
    return tr;
  }

  // ---- dead letters ---------------------------------------------------------------------------

  function renderDLQ(list) {
    list = Array.isArray(list) ? list : [];
    setText($('dlq-count'), list.length ? fmtInt(list.length) : '');
    $('dlq-empty').hidden = list.length > 0;
    reconcile($('dlq').tBodies[0], list, (d) => d.stage + '/' + d.id, makeDLQRow, updateDLQRow);
  }

  function makeDLQRow(d) {
    const x = {};
    const when = new Date(Number(String(d.id).split('-')[0]));
    x.btn = h('button', { type: 'button', class: 'btn small', data: { action: 'requeue', stage: d.stage, id: d.id } }, 'Requeue');
    x.actErr = h('div', { class: 'action-error', data: { role: 'action-error' } });
    const payload = h('td', { class: 'payload', title: 'click to expand' }, h('code', { class: 'mono' }, d.payload || '(empty)'));
    payload.addEventListener('click', () => payload.classList.toggle('expanded'));
    const tr = h('tr', { data: { stage: d.stage, id: d.id, uuid: d.uuid || '' } },
      h('td', { class: 'entry' },
        h('div', { class: 'mono' }, d.stage),
        h('div', { class: 'muted small' }, h('span', { title: 'entry ' + d.id }, fmtClock(when)),
          d.consumer ? h('span', { class: 'mono' }, ' · ' + d.consumer) : null)),
      h('td', { class: 'reason-cell' }, h('span', { class: 'badge reason' }, d.reason || '—'),
        d.detail ? h('div', { class: 'detail', title: d.detail }, d.detail) : null),
      payload,
      h('td', { class: 'act' }, x.btn, x.actErr));
    tr._c = x;
    return tr;
  }

  function updateDLQRow(tr, d) {
    updateActionButton(tr._c.btn, tr._c.actErr, 'requeue:' + d.stage + '/' + d.id, 'Requeue');
  }

  // ---- flight detail --------------------------------------------------------------------------

  function openDetail(key) {
    if (!key) return;
    state.detailKey = key;
    state.detailSig = '';
    $('detail-key').textContent = key;
    $('detail-body').replaceChildren(h('div', { class: 'muted pad' }, 'Loading…'));
    setStatusBadge($('detail-status'), '');
    $('detail-cancel').dataset.key = key;
    $('detail-cancel').hidden = true;
    $('flight-detail').hidden = false;
    $('backdrop').hidden = false;
    document.body.classList.add('drawer-open');
    for (const tr of $('flights').tBodies[0].children) setClass(tr, 'selected', tr.dataset.key === key);
    refresh('detail');
  }

  function closeDetail() {
    state.detailKey = null;
    $('flight-detail').hidden = true;
    $('backdrop').hidden = true;
    document.body.classList.remove('drawer-open');
    for (const tr of $('flights').tBodies[0].children) setClass(tr, 'selected', false);
  }

  function detailFailed(e) {
    if (!state.detailKey) return;
    if (e.status === 404) {
      setStatusBadge($('detail-status'), 'GONE');
      $('detail-cancel').hidden = true;
      state.detailSig = '404';
      $('detail-body').replaceChildren(h('div', { class: 'notice' },
        'This flight is no longer in Redis: its meta expired (failure or result TTL) or was never written.'));
      return;
    }
    let n = $('detail-notice');
    if (!n) {
      n = h('div', { class: 'notice bad', id: 'detail-notice' });
      $('detail-body').prepend(n);
    }
    setText(n, 'Could not read the flight: ' + e.message);
  }

  function renderDetail(d) {
    if (!state.detailKey || !d || !d.meta) return;
    const m = d.meta;
    const active = m.Status === 'PENDING' || m.Status === 'RUNNING';
    setStatusBadge($('detail-status'), m.Status);
    const btn = $('detail-cancel');
    btn.hidden = !active;
    btn.dataset.key = state.detailKey;
    updateActionButton(btn, $('detail-error'), 'cancel:' + state.detailKey, 'Cancel flight');
    // Rebuild only when the stored data changed (ages are recomputed each time anyway),
    // so selection and scroll position in the panel survive refreshes.
    const sig = JSON.stringify(d) + '|' + Math.floor(Date.now() / 1000);
    if (sig === state.detailSig) return;
    const body = $('detail-body');
    const scroll = body.scrollTop;
    state.detailSig = sig;
    const now = Date.now() + state.skewMs;
    const at = (s) => {
      const t = parseTime(s);
      if (!t) return '—';
      const diff = t.getTime() - now;
      return fmtClock(t) + '  (' + (diff >= 0 ? 'in ' + fmtDur(diff) : fmtDur(-diff) + ' ago') + ')';
    };
    const dur = (ns) => (ns > 0 ? fmtDur(ns / 1e6) : '—');
    const kv = (pairs) => h('dl', { class: 'kv-grid' }, pairs.filter(Boolean).flatMap(([k, v, cls]) => {
      const none = v == null || v === '' || v === '—';
      return [h('dt', null, k), h('dd', { class: none ? 'none' : cls || '' }, none ? '—' : String(v))];
    }));
    const sections = [];
    sections.push(h('section', null, h('h3', null, 'Flight'), kv([
      ['stage', m.Stage, 'mono'], ['tenant', m.Tenant], ['session', m.SessionID, 'mono'],
      m.RequestKey && m.RequestKey !== state.detailKey ? ['request key', m.RequestKey, 'mono wrap'] : null,
      ['owner', m.OwnerID, 'mono'], ['owner task', m.TaskID, 'mono'], ['fencing token', m.OwnerToken || '', 'mono'],
      ['attempts', m.Attempts], ['retryable', m.Status === 'FAILED' ? String(!!m.Retryable) : ''],
      ['progress', m.Progress], ['result ref', m.ResultRef, 'mono wrap'],
    ])));
    sections.push(h('section', null, h('h3', null, 'Timing'), kv([
      ['created', at(m.CreatedAt), 'mono'], ['updated', at(m.UpdatedAt), 'mono'],
      ['heartbeat', at(m.HeartbeatAt), 'mono'], ['progress at', at(m.ProgressAt), 'mono'],
      ['expires', active ? at(m.ExpireAt) : '—', 'mono'],
      ['meta TTL', dur(m.MetaTTL)], ['result TTL', dur(m.ResultTTL)], ['fence TTL', dur(m.FenceTTL)],
    ])));
    if (m.ErrorType || m.ErrorCode || m.Error) {
      sections.push(h('section', null, h('h3', null, 'Error'), kv([
        ['type', m.ErrorType, 'mono'], ['code', m.ErrorCode, 'mono'], ['message', m.Error, 'wrap err-text'],
      ])));
    }
    const parked = m.Parked || [];
    sections.push(h('section', { id: 'detail-parked' }, h('h3', null, 'Parked followers ', h('span', { class: 'count' }, String(parked.length))),
      parked.length
        ? h('table', { class: 'grid compact' }, h('thead', null, h('tr', null, h('th', null, 'task'), h('th', { class: 'num' }, 'parked for'))),
          h('tbody', null, parked.map((id) => {
            const t = parseTime((m.ParkedAt || {})[id]);
            return h('tr', { data: { taskId: id } }, h('td', { class: 'mono' }, id), h('td', { class: 'num' }, t ? fmtDur(now - t.getTime()) : '—'));
          })))
        : h('div', { class: 'muted' }, active ? 'No follower is waiting on this flight.' : 'None: every parked task was answered.')));
    sections.push(h('section', { id: 'detail-result' }, h('h3', null, 'Result'),
      d.result ? h('pre', { class: 'code' }, prettyJSON(d.result)) : h('div', { class: 'muted' }, m.Status === 'SUCCEEDED' ? 'Result expired or stored elsewhere.' : 'No result stored.')));
    const fields = Object.entries(m.Fields || {}).sort(([a], [b]) => a.localeCompare(b));
    sections.push(h('section', null, h('h3', null, 'Raw meta fields'),
      h('table', { class: 'grid compact raw' }, h('tbody', null, fields.map(([k, v]) =>
        h('tr', null, h('th', { class: 'mono' }, k), h('td', { class: 'mono wrap' }, v)))))));
    body.replaceChildren(...sections);
    body.scrollTop = scroll;
  }

  function prettyJSON(s) {
    try { return JSON.stringify(JSON.parse(s), null, 2); } catch { return s; }
  }

  // ---- actions ------------------------------------------------------------------------------

  function actionState(id) {
    let s = state.actionsState.get(id);
    if (!s) { s = { confirm: false, busy: false, error: '', timer: 0 }; state.actionsState.set(id, s); }
    return s;
  }

  function canAct() { return state.actions && state.canAct && !state.locked; }

  function updateActionButton(btn, errEl, id, label) {
    const s = state.actionsState.get(id) || {};
    btn.disabled = !canAct() || !!s.busy;
    setText(btn, s.busy ? 'Working…' : s.confirm ? 'Confirm' : label);
    setClass(btn, 'confirming', !!s.confirm);
    btn.title = !state.actions ? 'actions are disabled on this node (no FLIGHTDECK_UI_TOKEN)'
      : !state.canAct ? 'this tab uses the read-only token: click Token and enter FLIGHTDECK_UI_TOKEN to act'
        : s.confirm ? 'click again to confirm' : '';
    if (errEl) {
      setText(errEl, s.error || '');
      errEl.hidden = !s.error;
    }
  }

  function renderActionButtons() {
    for (const tr of $('flights').tBodies[0].children) {
      if (tr._c) updateActionButton(tr._c.btn, tr._c.actErr, 'cancel:' + tr.dataset.key, 'Cancel');
    }
    for (const tr of $('dlq').tBodies[0].children) {
      if (tr._c) updateActionButton(tr._c.btn, tr._c.actErr, 'requeue:' + tr.dataset.stage + '/' + tr.dataset.id, 'Requeue');
    }
    if (state.detailKey) updateActionButton($('detail-cancel'), $('detail-error'), 'cancel:' + state.detailKey, 'Cancel flight');
  }

  function actionMessage(e) {
    if (e.status === 401) return 'Token refused (401): enter it again.';
    if (e.status === 403) return 'Not allowed (403): ' + e.message;
    if (e.status === 429) return 'Too many wrong tokens (429): ' + e.message;
    if (e.status === 409) return 'Conflict: ' + e.message;
    if (e.status === 404) return 'Not found: ' + e.message;
    return e.message || 'request failed';
  }

  async function post(path, body) {
    try {
      return await api(path, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify(body),
      });
    } catch (e) {
      if (e.status === 401) authFailure(e);
      throw e;
    }
  }

  async function cancelFlight(key) {
    const id = 'cancel:' + key;
    const s = actionState(id);
    if (s.busy || !canAct()) return;
    if (!s.confirm) {
      s.confirm = true;
      s.error = '';
      clearTimeout(s.timer);
      s.timer = setTimeout(() => { s.confirm = false; renderActionButtons(); }, CONFIRM_MS);
      renderActionButtons();
      return;
    }
    clearTimeout(s.timer);
    s.confirm = false;
    s.busy = true;
    s.error = '';
    renderActionButtons();
    try {
      const r = await post('cancel', { key, reason: 'cancelled from the dashboard' });
      const n = (r && r.answered) || 0;
      const head = r && r.already ? 'Already cancelled ' : 'Cancelled ';
      toast(head + shortKey(key) + (n ? ': answered ' + n + ' parked task' + (n === 1 ? '' : 's') : ''), 'ok');
    } catch (e) {
      s.error = actionMessage(e);
    } finally {
      s.busy = false;
      renderActionButtons();
      refresh('flights', 'overview', 'events', 'detail');
    }
  }

  async function requeue(stage, entryID) {
    const id = 'requeue:' + stage + '/' + entryID;
    const s = actionState(id);
    if (s.busy || !canAct()) return;
    s.busy = true;
    s.error = '';
    renderActionButtons();
    try {
      const r = await post('requeue', { stage, id: entryID });
      toast('Requeued ' + entryID + ' to ' + stage + (r && r.id ? ' as ' + r.id : ''), 'ok');
      state.actionsState.delete(id);
    } catch (e) {
      s.error = actionMessage(e);
    } finally {
      s.busy = false;
      renderActionButtons();
      refresh('dlq', 'overview');
    }
  }

  function toast(msg, kind) {
    const el = h('div', { class: 'toast ' + (kind || ''), role: 'status' }, msg);
    $('toasts').append(el);
    setTimeout(() => el.classList.add('leaving'), 4000);
    setTimeout(() => el.remove(), 4400);
  }

  // ---- keyed rows -----------------------------------------------------------------------------

  // reconcile makes parent's children match items in order, reusing the element of each key.
  function reconcile(parent, items, keyOf, make, update) {
    const old = new Map();
    for (const el of parent.children) if (el.dataset.rowKey != null) old.set(el.dataset.rowKey, el);
    const keep = new Set();
    let cursor = parent.firstElementChild;
    for (const it of items) {
      const k = keyOf(it);
      if (keep.has(k)) continue;
      keep.add(k);
      let el = old.get(k);
      if (!el) {
        el = make(it);
        el.dataset.rowKey = k;
      }
      update(el, it);
      if (el !== cursor) parent.insertBefore(el, cursor);
      else cursor = cursor.nextElementSibling;
    }
    for (const [k, el] of old) if (!keep.has(k)) el.remove();
  }

  // ---- wiring -------------------------------------------------------------------------------

  function applyTheme(t) {
    if (t === 'light' || t === 'dark') document.documentElement.dataset.theme = t;
    else delete document.documentElement.dataset.theme;
  }

  function init() {
    applyTheme(localStorage.getItem(THEME_KEY));
    $('theme').addEventListener('click', () => {
      const cur = document.documentElement.dataset.theme
        || (matchMedia('(prefers-color-scheme: light)').matches ? 'light' : 'dark');
      const next = cur === 'dark' ? 'light' : 'dark';
      localStorage.setItem(THEME_KEY, next);
      applyTheme(next);
    });

    $('auth-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      const token = $('auth-token').value.trim();
      if (!token) {
        const err = $('auth-error');
        setText(err, 'Enter a token.');
        err.hidden = false;
        return;
      }
      tryToken(token);
    });
    $('token-button').addEventListener('click', () => lock(''));

    $('pause').addEventListener('click', () => setPaused(!state.paused));

    $('status-filter').addEventListener('click', (ev) => {
      const b = ev.target.closest('button[data-status]');
      if (!b) return;
      state.filter.status = b.dataset.status;
      for (const x of $('status-filter').querySelectorAll('button')) x.setAttribute('aria-pressed', String(x === b));
      refresh('flights');
    });
    $('stage-filter').addEventListener('change', (ev) => {
      state.filter.stage = ev.target.value;
      refresh('flights');
    });
    $('flight-search').addEventListener('input', (ev) => {
      state.filter.q = ev.target.value;
      drawFlights();
    });

    // One delegated handler per table: actions first, then row clicks open the detail panel.
    document.addEventListener('click', (ev) => {
      const act = ev.target.closest('button[data-action]');
      if (act) {
        ev.stopPropagation();
        if (act.dataset.action === 'cancel') cancelFlight(act.dataset.key);
        else if (act.dataset.action === 'requeue') requeue(act.dataset.stage, act.dataset.id);
        return;
      }
      const row = ev.target.closest('#flights tbody tr[data-key], #events tbody tr.clickable');
      if (row && !ev.target.closest('.payload')) openDetail(row.dataset.key);
    });
    document.addEventListener('keydown', (ev) => {
      if (state.locked) return; // the token form has the keyboard
      if (ev.key === 'Escape' && state.detailKey) { closeDetail(); return; }
      const inField = ev.target.closest('input, select, textarea, button');
      if (ev.key === 'Enter' && !inField) {
        const row = ev.target.closest('#flights tbody tr[data-key], #events tbody tr.clickable');
        if (row) openDetail(row.dataset.key);
      }
      if (ev.key === ' ' && !inField && !ev.target.closest('tr')) {
        ev.preventDefault();
        setPaused(!state.paused);
      }
    });
    $('detail-close').addEventListener('click', closeDetail);
    $('backdrop').addEventListener('click', closeDetail);
    document.addEventListener('visibilitychange', () => { if (!document.hidden) tick(); });

    renderConnection();
    renderActionButtons();
    setInterval(tick, 200);
    // A token kept from earlier in this tab is checked like a typed one; without one the
    // form asks for it, and nothing is read before.
    const kept = state.token;
    if (kept) tryToken(kept); else lock('');
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', init);
  else init();
})();
