// Flightdeck dashboard: dead letters (requeue one, or select several or all of a stage to
// requeue or purge them) and the queued tasks no consumer has started yet. See app.js for the
// helpers it uses.
(() => {
  'use strict';

  const FD = window.Flightdeck;
  const { h, $, setText, fmtInt, fmtDur, fmtClock, trunc, state, reconcile, updateActionButton } = FD;

  const selected = new Set(); // "<stage>/<id>" of the selected dead letters
  let shown = [];             // the dead letters listed now, newest first

  // ---- dead letters ---------------------------------------------------------------------------

  function renderDLQ(list) {
    shown = Array.isArray(list) ? list : [];
    const keys = new Set(shown.map((d) => d.stage + '/' + d.id));
    for (const k of selected) if (!keys.has(k)) selected.delete(k);
    setText($('dlq-count'), shown.length ? fmtInt(shown.length) : '');
    $('dlq-empty').hidden = shown.length > 0;
    reconcile($('dlq').tBodies[0], shown, (d) => d.stage + '/' + d.id, makeDLQRow, updateDLQRow);
    renderStageSelect();
    updateBulk();
  }

  function makeDLQRow(d) {
    const x = {};
    const when = new Date(Number(String(d.id).split('-')[0]));
    x.check = h('input', { type: 'checkbox', class: 'dlq-check', 'aria-label': 'select ' + d.id });
    x.check.addEventListener('change', () => {
      const k = d.stage + '/' + d.id;
      if (x.check.checked) selected.add(k); else selected.delete(k);
      updateBulk();
    });
    x.btn = h('button', { type: 'button', class: 'btn small', data: { action: 'requeue', stage: d.stage, id: d.id } }, 'Requeue');
    x.actErr = h('div', { class: 'action-error', data: { role: 'action-error' } });
    const payload = h('td', { class: 'payload', title: 'click to expand' }, h('code', { class: 'mono' }, d.payload || '(empty)'));
    payload.addEventListener('click', () => payload.classList.toggle('expanded'));
    const tr = h('tr', { data: { stage: d.stage, id: d.id, uuid: d.uuid || '' } },
      h('td', { class: 'check' }, x.check),
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
    tr._c.check.checked = selected.has(d.stage + '/' + d.id);
    tr._c.check.disabled = !FD.canAct();
    updateActionButton(tr._c.btn, tr._c.actErr, 'requeue:' + d.stage + '/' + d.id, 'Requeue');
  }

  function renderStageSelect() {
    const sel = $('dlq-stage');
    const have = [...sel.options].map((o) => o.value);
    if (have.join('\n') === state.stages.join('\n')) return;
    const cur = sel.value;
    sel.replaceChildren(...state.stages.map((s) => h('option', { value: s }, s)));
    if (state.stages.includes(cur)) sel.value = cur;
  }

  // updateBulk redraws the bulk toolbar: what is selected, and the buttons.
  function updateBulk() {
    const n = selected.size;
    setText($('dlq-selected'), n ? fmtInt(n) + ' selected' : '');
    const all = $('dlq-all');
    all.checked = n > 0 && n === shown.length;
    all.indeterminate = n > 0 && n < shown.length;
    all.disabled = !FD.canAct() || shown.length === 0;
    const stage = $('dlq-stage').value;
    const ofStage = shown.some((d) => d.stage === stage);
    const bulk = [
      ['dlq-requeue-selected', 'dlq:requeue:selected', 'Requeue selected', n > 0],
      ['dlq-purge-selected', 'dlq:purge:selected', 'Purge selected', n > 0],
      ['dlq-requeue-all', 'dlq:requeue:all', 'Requeue all', ofStage],
      ['dlq-purge-all', 'dlq:purge:all', 'Purge all', ofStage],
    ];
    for (const [el, id, label, enabled] of bulk) {
      const btn = $(el);
      updateActionButton(btn, $('dlq-bulk-error'), id, label);
      if (!enabled) btn.disabled = true;
    }
    const err = [...state.actionsState].find(([k, s]) => k.startsWith('dlq:') && s.error);
    setText($('dlq-bulk-error'), err ? err[1].error : '');
    $('dlq-bulk-error').hidden = !err;
  }

  function updateDLQButtons() {
    for (const tr of $('dlq').tBodies[0].children) if (tr._c) updateDLQRow(tr, tr.dataset);
    updateBulk();
  }

  async function requeue(stage, entryID) {
    const id = 'requeue:' + stage + '/' + entryID;
    if (FD.actionState(id).busy || !FD.canAct()) return;
    await FD.runAction(id, async () => {
      const r = await FD.post('requeue', { stage, id: entryID });
      FD.toast('Requeued ' + entryID + ' to ' + stage + (r && r.id ? ' as ' + r.id : ''), 'ok');
    }, 'dlq', 'overview', 'queued');
  }

  // bulk requeues or purges (op) the selected dead letters, or all of the chosen stage up to
  // the newest one listed; purges, and requeues of all, ask for a second click.
  async function bulk(op, scope) {
    const id = 'dlq:' + op + ':' + scope;
    if (FD.actionState(id).busy || !FD.canAct()) return;
    if ((op === 'purge' || scope === 'all') && !FD.confirmed(id)) return;
    const bodies = [];
    if (scope === 'all') {
      const stage = $('dlq-stage').value;
      const newest = shown.find((d) => d.stage === stage);
      if (!newest) return;
      bodies.push({ stage, all: true, upTo: newest.id });
    } else {
      const byStage = new Map();
      for (const k of selected) {
        const i = k.indexOf('/');
        const stage = k.slice(0, i);
        byStage.set(stage, [...(byStage.get(stage) || []), k.slice(i + 1)]);
      }
      for (const [stage, ids] of byStage) bodies.push({ stage, ids });
    }
    await FD.runAction(id, async () => {
      let done = 0, remaining = 0;
      for (const b of bodies) {
        const r = await FD.post('dlq/' + op, b);
        done += (r && r.done) || 0;
        remaining += (r && r.remaining) || 0;
      }
      selected.clear();
      FD.toast((op === 'purge' ? 'Purged ' : 'Requeued ') + fmtInt(done) + ' dead letter' + (done === 1 ? '' : 's')
        + (remaining ? '; ' + fmtInt(remaining) + ' left: run it again' : ''), 'ok');
    }, 'dlq', 'overview', 'queued');
  }

  // ---- queued tasks ---------------------------------------------------------------------------

  function renderQueued(list) {
    list = Array.isArray(list) ? list : [];
    setText($('queued-count'), list.length ? fmtInt(list.length) : '');
    $('queued-empty').hidden = list.length > 0;
    reconcile($('queued').tBodies[0], list, (q) => q.stream + '/' + q.id, makeQueuedRow, updateQueuedRow);
  }

  function makeQueuedRow(q) {
    const x = { age: h('td', { class: 'num' }) };
    const payload = h('td', { class: 'payload', title: 'click to expand' }, h('code', { class: 'mono' }, q.payload || '(empty)'));
    payload.addEventListener('click', () => payload.classList.toggle('expanded'));
    const tr = h('tr', { data: { stage: q.stage, id: q.id, taskId: q.taskId || '' } },
      h('td', { class: 'mono' }, q.stage),
      h('td', { class: 'mono dim', title: q.stream }, q.id),
      x.age,
      h('td', { class: 'mono', title: q.taskId || '' }, q.taskId ? trunc(q.taskId, 28) : '—'),
      h('td', null, q.tenant || '—'),
      payload);
    tr._c = x;
    return tr;
  }

  function updateQueuedRow(tr, q) {
    setText(tr._c.age, fmtDur(q.ageMs));
  }

  FD.resource('dlq', { every: 2500, path: () => 'dlq?n=50', apply: renderDLQ });
  FD.resource('queued', { every: 2500, path: () => 'queued?n=20', apply: renderQueued });
  FD.hooks.actions.push(updateDLQButtons);
  FD.hooks.init.push(() => {
    $('dlq-panel').addEventListener('click', (ev) => {
      const b = ev.target.closest('button');
      if (!b) return;
      if (b.dataset.action === 'requeue') requeue(b.dataset.stage, b.dataset.id);
      else if (b.dataset.bulk) bulk(b.dataset.bulk, b.dataset.scope);
    });
    $('dlq-all').addEventListener('change', (ev) => {
      selected.clear();
      if (ev.target.checked) for (const d of shown) selected.add(d.stage + '/' + d.id);
      updateDLQButtons();
    });
    $('dlq-stage').addEventListener('change', updateBulk);
  });
})();
