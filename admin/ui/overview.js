// Flightdeck dashboard: the overview read (stages with their pause switch, consumers, flight
// counts). See app.js for the helpers it uses.
(() => {
  'use strict';

  const FD = window.Flightdeck;
  const { h, $, setText, setClass, fmtInt, fmtDur, fmtRate, fmtClock, parseTime, state, reconcile, STATUSES,
    TERMINAL, SHARED } = FD;

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
    const evict = ov.evictionPolicy && ov.evictionPolicy !== 'noeviction';
    $('eviction-warn').hidden = !evict;
    if (evict) setText($('eviction-policy'), ov.evictionPolicy);
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
    const est = ' (from the fleet\'s per-minute stats: this minute plus the part of the previous one within the last 60 s)';
    c.tput = metric('rate', 'big', 'throughput: tasks answered per second over the last minute' + est);
    c.events = metric('events 1m', 'big', 'tasks answered (terminal events) in the last 60 s' + est);
    c.p50 = metric('p50', 'big', 'median end-to-end latency (queue wait + run) of the last minute' + est);
    c.p99 = metric('p99', 'big', '99th percentile end-to-end latency of the last minute' + est);
    c.hour = metric('events 1h', 'hour', 'tasks answered in this minute and the 59 before it, from the fleet\'s per-minute stats');
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
    c.paused = h('span', { class: 'badge paused', hidden: true }, 'paused');
    c.pauseBtn = h('button', { type: 'button', class: 'btn small', data: { action: 'pause-stage', stage: s.name } }, 'Pause');
    c.actErr = h('div', { class: 'action-error', data: { role: 'action-error' } });
    const card = h('article', { class: 'stage-card', data: { stage: s.name, paused: 'false' } },
      h('header', { class: 'stage-head' }, h('h3', { class: 'mono' }, s.name), c.mode, c.paused,
        h('span', { class: 'stage-actions' }, c.pauseBtn, c.actErr)),
      h('div', { class: 'metrics big-row' }, c.tput.el, c.events.el, c.p50.el, c.p99.el),
      h('div', { class: 'metrics small-row' }, c.hour.el, c.backlog.el, c.pending.el, c.parked.el, c.dlq.el, c.streams.el),
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
    c.isPaused = !!s.paused;
    card.dataset.paused = String(c.isPaused);
    c.paused.hidden = !c.isPaused;
    c.paused.title = s.paused ? 'paused by ' + (s.paused.by || '?') + ' at ' + fmtClock(new Date(s.paused.at))
      + ': its consumers read no new tasks; running ones finish, parked ones are answered' : '';
    updatePauseButton(card);
    setText(c.tput.v, fmtRate(s.perSecond) + '/s');
    setText(c.events.v, fmtInt(s.eventsLastMinute));
    setText(c.p50.v, s.eventsLastMinute ? fmtDur(s.p50Ms) : '—');
    setText(c.p99.v, s.eventsLastMinute ? fmtDur(s.p99Ms) : '—');
    const hour = s.lastHour || {};
    setText(c.hour.v, fmtInt(hour.events || 0));
    c.hour.el.title = 'tasks answered in this minute and the 59 before it, from the fleet\'s per-minute stats'
      + (hour.events ? '; p50 ' + fmtDur(hour.p50Ms) + ', p99 ' + fmtDur(hour.p99Ms) : '');
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


  // ---- pause / resume -------------------------------------------------------------------------

  function updatePauseButton(card) {
    const c = card._c;
    FD.updateActionButton(c.pauseBtn, c.actErr, 'pause:' + card.dataset.stage, c.isPaused ? 'Resume' : 'Pause');
    if (!c.pauseBtn.title) {
      c.pauseBtn.title = c.isPaused ? 'resume the stage: its consumers read new tasks again'
        : 'pause the stage for the whole fleet: no new task starts; running ones finish';
    }
  }

  function togglePause(stage) {
    const card = [...$('stages').children].find((el) => el.dataset.stage === stage);
    if (!card || !FD.canAct()) return;
    const resume = card._c.isPaused;
    FD.runAction('pause:' + stage, async () => {
      await FD.post(resume ? 'resume' : 'pause', { stage });
      FD.toast((resume ? 'Resumed ' : 'Paused ') + stage, 'ok');
    }, 'overview', 'queued');
  }

  FD.resource('overview', { every: 1000, path: () => 'overview', apply: renderOverview });
  FD.hooks.node.push(() => { for (const card of $('stages').children) updateStageMode(card); });
  FD.hooks.actions.push(() => { for (const card of $('stages').children) if (card._c) updatePauseButton(card); });
  FD.hooks.init.push(() => {
    $('stages').addEventListener('click', (ev) => {
      const b = ev.target.closest('button[data-action="pause-stage"]');
      if (b) togglePause(b.dataset.stage);
    });
  });
})();
