// Flightdeck dashboard: flights, the flight detail panel (with its attempts), recent events and
// the cancel action. See app.js for the helpers it uses.
(() => {
  'use strict';

  const FD = window.Flightdeck;
  const { h, $, setText, setAttr, setClass, fmtInt, fmtDur, fmtClock, shortKey, errorText, trunc, parseTime,
    state, reconcile, updateActionButton, refresh } = FD;

  function flightsPath() {
    const q = new URLSearchParams({ limit: '200' });
    if (state.filter.status) q.set('status', state.filter.status);
    if (state.filter.stage) q.set('stage', state.filter.stage);
    return 'flights?' + q;
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
      ? 'No flights match the filter.' : 'No flights of held tasks or recent events right now.');
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
    sections.push(attemptsSection(d.attempts || [], m.Status));
    if (d.archived || d.archiveError || d.claim) sections.push(archivedSection(d.archived, d.archiveError, d.claim, at));
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


  // archivedSection shows the key's row in the durable archive (what answers the key when
  // Redis no longer knows it) and its takeover claim (the token that refuses older owners).
  function archivedSection(a, err, claim, at) {
    const kids = [h('h3', null, 'Archived outcome')];
    if (err) kids.push(h('div', { class: 'err-text' }, 'archive unavailable: ' + err));
    if (a) {
      const badge = h('span', { class: 'badge status' });
      setStatusBadge(badge, a.status);
      kids.push(h('dl', { class: 'kv-grid' },
        h('dt', null, 'status'), h('dd', null, badge),
        h('dt', null, 'fencing token'), h('dd', { class: 'mono' }, String(a.token)),
        h('dt', null, 'attempts'), h('dd', null, String(a.attempts)),
        h('dt', null, 'finished'), h('dd', { class: 'mono' }, at(new Date(a.finishedAt).toISOString())),
        h('dt', null, 'kept until'), h('dd', { class: 'mono' + (a.expired ? ' none' : '') }, at(new Date(a.expiresAt).toISOString()) + (a.expired ? ' (expired)' : '')),
        h('dt', null, 'error'), h('dd', { class: 'wrap err-text' }, errorText(a.errorType, a.errorCode, a.error) || '—')));
      if (a.result) kids.push(h('pre', { class: 'code' }, prettyJSON(a.result)));
    }
    if (claim) {
      kids.push(h('dl', { class: 'kv-grid', id: 'detail-claim' },
        h('dt', null, 'takeover claim'), h('dd', { class: 'mono' }, String(claim.token)),
        h('dt', null, 'claimed'), h('dd', { class: 'mono' }, at(new Date(claim.claimedAt).toISOString())),
        h('dt', null, 'kept until'), h('dd', { class: 'mono' + (claim.expired ? ' none' : '') }, at(new Date(claim.expiresAt).toISOString()) + (claim.expired ? ' (expired)' : ''))));
    }
    return h('section', { id: 'detail-archived' }, ...kids);
  }

  // attemptsSection lists the flight's owner attempts, oldest first.
  function attemptsSection(list, status) {
    const at = (ms) => (ms > 0 ? fmtClock(new Date(ms)) : '—');
    return h('section', { id: 'detail-attempts' }, h('h3', null, 'Attempts ', h('span', { class: 'count' }, String(list.length))),
      list.length
        ? h('table', { class: 'grid compact' },
          h('thead', null, h('tr', null, ...['#', 'owner', 'token', 'start', 'end', 'took', 'outcome', 'error']
            .map((c, i) => h('th', { class: [0, 2, 5].includes(i) ? 'num' : '' }, c)))),
          h('tbody', null, list.map((a) => {
            const outcome = h('span', { class: 'badge status' });
            setStatusBadge(outcome, a.outcome);
            const err = errorText('', a.errorCode, a.error);
            return h('tr', { data: { attempt: String(a.attempt), outcome: a.outcome, token: String(a.token) } },
              h('td', { class: 'num' }, String(a.attempt)),
              h('td', { class: 'mono', title: a.taskId ? 'task ' + a.taskId : null }, a.owner || '—'),
              h('td', { class: 'num mono dim' }, a.token ? String(a.token) : '—'),
              h('td', { class: 'mono' }, at(a.startedAt)),
              h('td', { class: 'mono' }, at(a.endedAt)),
              h('td', { class: 'num' }, a.startedAt > 0 && a.endedAt >= a.startedAt ? fmtDur(a.endedAt - a.startedAt) : '—'),
              h('td', null, outcome),
              h('td', { class: 'err-text wrap', title: err || null }, err ? trunc(err, 160) : ''));
          })))
        : h('div', { class: 'muted' }, status ? 'No attempt recorded.' : '—'));
  }

  async function cancelFlight(key) {
    const id = 'cancel:' + key;
    if (!FD.confirmed(id)) return;
    await FD.runAction(id, async () => {
      const r = await FD.post('cancel', { key, reason: 'cancelled from the dashboard' });
      const n = (r && r.answered) || 0;
      const head = r && r.already ? 'Already cancelled ' : 'Cancelled ';
      FD.toast(head + shortKey(key) + (n ? ': answered ' + n + ' parked task' + (n === 1 ? '' : 's') : ''), 'ok');
    }, 'flights', 'overview', 'events', 'detail');
  }


  function updateFlightButtons() {
    for (const tr of $('flights').tBodies[0].children) {
      if (tr._c) updateActionButton(tr._c.btn, tr._c.actErr, 'cancel:' + tr.dataset.key, 'Cancel');
    }
    if (state.detailKey) updateActionButton($('detail-cancel'), $('detail-error'), 'cancel:' + state.detailKey, 'Cancel flight');
  }

  FD.resource('flights', { every: 1000, path: flightsPath, apply: renderFlights });
  FD.resource('events', { every: 1000, path: () => 'events?n=60', apply: renderEvents });
  FD.resource('detail', { every: 1000, path: () => state.detailKey && 'flight?key=' + encodeURIComponent(state.detailKey),
    apply: renderDetail, fail: detailFailed });
  FD.hooks.actions.push(updateFlightButtons);
  FD.hooks.init.push(() => {
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
    });
    $('detail-close').addEventListener('click', closeDetail);
    $('backdrop').addEventListener('click', closeDetail);
  });
})();
