// Flightdeck dashboard: vanilla JS, no build step. This file is the core (helpers, the API,
// polling, the token, the node, actions, wiring); the panels live in overview.js, flights.js,
// dlq.js and history.js, which register their reads and hooks on window.Flightdeck. It polls
// the JSON API under /ui/api/ (relative to this page), never stacks requests of one kind, and
// renders with keyed row updates so that rows, buttons and focus survive every refresh. No innerHTML with data:
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
  // What the panels hook in: init (wiring), node (a node read), actions (redraw buttons).
  const hooks = { init: [], node: [], actions: [] };

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
  // The panels add theirs with resource(name, {every, path, apply, fail}).
  const resources = {};
  function resource(name, spec) {
    resources[name] = Object.assign({ inflight: false, last: 0, gen: 0 }, spec);
  }
  resource('node', { every: 2500, path: () => 'node', apply: renderNode });

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
    if (e.status === 429) return 'Too many wrong tokens from this address or its network (429): ' + e.message + '.';
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
    for (const f of hooks.node) f(st);
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

  // renderActionButtons updates every action button (the panels' hooks.actions).
  function renderActionButtons() {
    for (const f of hooks.actions) f();
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

  // confirmed answers true on the second click of a two-click action (the first arms it for
  // CONFIRM_MS), false otherwise.
  function confirmed(id) {
    const s = actionState(id);
    if (s.busy || !canAct()) return false;
    if (!s.confirm) {
      s.confirm = true;
      s.error = '';
      clearTimeout(s.timer);
      s.timer = setTimeout(() => { s.confirm = false; renderActionButtons(); }, CONFIRM_MS);
      renderActionButtons();
      return false;
    }
    clearTimeout(s.timer);
    s.confirm = false;
    return true;
  }

  // runAction runs fn as the action id: busy while it runs, its error shown on its button.
  async function runAction(id, fn, ...after) {
    const s = actionState(id);
    s.busy = true;
    s.error = '';
    renderActionButtons();
    try {
      await fn();
      state.actionsState.delete(id);
    } catch (e) {
      s.error = actionMessage(e);
    } finally {
      s.busy = false;
      renderActionButtons();
      refresh(...after);
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


  // ---- the namespace the panels use --------------------------------------------------------

  window.Flightdeck = {
    h, $, setText, setAttr, setClass, fmtInt, fmtDur, fmtRate, fmtClock, shortKey, errorText, trunc, parseTime,
    state, api, resource, refresh, hooks, authFailure, actionState, canAct, updateActionButton,
    renderActionButtons, actionMessage, post, confirmed, runAction, toast, reconcile, STATUSES, TERMINAL, SHARED,
  };

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

    for (const f of hooks.init) f();
    document.addEventListener('keydown', (ev) => {
      if (state.locked) return; // the token form has the keyboard
      const inField = ev.target.closest('input, select, textarea, button');
      if (ev.key === ' ' && !inField && !ev.target.closest('tr')) {
        ev.preventDefault();
        setPaused(!state.paused);
      }
    });
    document.addEventListener('visibilitychange', () => { if (!document.hidden) tick(); });

    renderConnection();
    renderActionButtons();
    setInterval(tick, 200);
    // A token kept from earlier in this tab is checked like a typed one; without one the
    // form asks for it, and nothing is read before.
    const kept = state.token;
    if (kept) tryToken(kept); else lock('');
  }

  // The panels' scripts (deferred, after this one) register before DOMContentLoaded.
  if (document.readyState === 'complete') init();
  else document.addEventListener('DOMContentLoaded', init);
})();
