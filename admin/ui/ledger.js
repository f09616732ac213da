// Flightdeck dashboard: the savings ledger of the last hour or day, from the fleet's stats
// hashes: what the model calls spent, what the tasks answered without a call of their own
// avoided, per stage and tenant. See app.js for the helpers it uses.
(() => {
  'use strict';

  const FD = window.Flightdeck;
  const { h, $, setText, setAttr, setClass, fmtInt, fmtClock, reconcile, refresh } = FD;

  const OTHERS = '*'; // the tenants a consumer counted together past its cap
  let windowName = 'hour'; // the window shown: hour or day; a reload starts with the hour

  // ---- formatting -------------------------------------------------------------------------

  // fmtUSD formats billionths of a dollar as dollars with 4 decimals: "$0.0140".
  function fmtUSD(nano) {
    if (nano == null || !Number.isFinite(nano)) return '—';
    const n = Math.max(0, Math.round(nano / 1e5)); // ten-thousandths of a dollar
    return '$' + Math.floor(n / 1e4) + '.' + String(n % 1e4).padStart(4, '0');
  }

  // fmtUSDExact formats billionths of a dollar with all 9 decimals, for titles.
  function fmtUSDExact(nano) {
    return nano == null || !Number.isFinite(nano) ? '' : '$' + (Math.max(0, nano) / 1e9).toFixed(9);
  }

  // fmtShare formats part of whole as a percentage with one decimal, or "—" without a whole.
  function fmtShare(part, whole) {
    return whole > 0 ? ((100 * (part || 0)) / whole).toFixed(1) + '%' : '—';
  }

  // tokens adds up the tokens a row's calls used; avoidedTokens, those its shared answers avoided.
  const tokens = (r) => (r.promptTokens || 0) + (r.completionTokens || 0);
  const avoidedTokens = (r) => (r.avoidedPromptTokens || 0) + (r.avoidedCompletionTokens || 0);

  // A row's cells after its name, in the order of the table's header in index.html: the
  // data-field of each, its number (0 dims the cell), its text (else fmtInt of the number)
  // and its title.
  const CELLS = [
    ['tasks', (r) => r.tasks],
    ['owner', (r) => r.owner],
    ['joined', (r) => r.joined],
    ['follower', (r) => r.follower],
    ['hit', (r) => r.hit],
    ['archive', (r) => r.archive],
    ['local', (r) => r.local],
    ['hitRate', (r) => r.shared, (r) => fmtShare(r.shared, r.tasks),
      (r) => fmtInt(r.shared || 0) + ' of ' + fmtInt(r.tasks || 0) + ' tasks answered without a model call of their own'],
    ['calls', (r) => r.calls],
    ['rateLimited', (r) => r.rateLimited],
    ['limiterWaits', (r) => r.limiterWaits],
    ['tokens', tokens, null,
      (r) => fmtInt(r.promptTokens || 0) + ' prompt + ' + fmtInt(r.completionTokens || 0) + ' completion'],
    ['avoidedTokens', avoidedTokens, null,
      (r) => fmtInt(r.avoidedPromptTokens || 0) + ' prompt + ' + fmtInt(r.avoidedCompletionTokens || 0) + ' completion'],
    ['spentUSD', (r) => r.spentNanoUSD, (r) => fmtUSD(r.spentNanoUSD), (r) => fmtUSDExact(r.spentNanoUSD)],
    ['avoidedUSD', (r) => r.avoidedNanoUSD, (r) => fmtUSD(r.avoidedNanoUSD), (r) => fmtUSDExact(r.avoidedNanoUSD)],
  ];

  // counted reports whether a ledger row counted anything: an answer or a model call.
  function counted(r) {
    return !!r && (r.tasks > 0 || r.calls > 0);
  }

  // ---- rendering --------------------------------------------------------------------------

  // renderLedger draws a ledger report: the fleet's figures and a row per stage and tenant.
  function renderLedger(rep) {
    if (!rep) return;
    const panel = $('savings-panel');
    setAttr(panel, 'data-window', rep.window || '');
    setClass(panel, 'switching', false);
    setText($('savings-range'), rangeText(rep));
    const t = rep.total || {};
    const any = counted(t);
    $('savings-empty').hidden = any;
    $('savings-body').hidden = !any;
    renderFigures(t);
    const rows = [];
    for (const s of rep.stages || []) {
      if (!counted(s.total)) continue;
      rows.push({ stage: s.stage, tenant: null, row: s.total });
      for (const r of s.tenants || []) rows.push({ stage: s.stage, tenant: r.tenant, row: r });
    }
    reconcile($('savings-table').tBodies[0], rows, (x) => JSON.stringify([x.stage, x.tenant]), makeLedgerRow, updateLedgerRow);
  }

  // rangeText says where the window starts: "· since 14:00", or "· since yesterday 15:00".
  function rangeText(rep) {
    if (!(rep.from > 0)) return '';
    const from = new Date(rep.from * 1000);
    const day = from.toDateString() === new Date().toDateString() ? '' : 'yesterday ';
    return '· since ' + day + fmtClock(from).slice(0, 5);
  }

  // renderFigures fills the headline figures of the whole fleet.
  function renderFigures(t) {
    setText($('savings-spent'), fmtUSD(t.spentNanoUSD || 0));
    setAttr($('savings-spent'), 'title', fmtUSDExact(t.spentNanoUSD || 0));
    setText($('savings-avoided'), fmtUSD(t.avoidedNanoUSD || 0));
    setAttr($('savings-avoided'), 'title', fmtUSDExact(t.avoidedNanoUSD || 0));
    setText($('savings-tokens'), fmtInt(tokens(t)));
    setText($('savings-avoided-tokens'), fmtInt(avoidedTokens(t)));
    setText($('savings-hit-rate'), fmtShare(t.shared, t.tasks));
    setAttr($('savings-hit-rate'), 'title', fmtInt(t.shared || 0) + ' of ' + fmtInt(t.tasks || 0) + ' tasks');
    setText($('savings-calls'), fmtInt(t.calls || 0));
    setText($('savings-rate-limited'), fmtInt(t.rateLimited || 0));
    setClass($('savings-rate-limited'), 'warn', t.rateLimited > 0);
    setText($('savings-limiter-waits'), fmtInt(t.limiterWaits || 0));
  }

  // makeLedgerRow builds a table row: a stage's total (tenant null) or one of its tenants.
  function makeLedgerRow(x) {
    const total = x.tenant == null;
    const name = h('td', { class: total ? 'mono' : 'tenant', data: { field: 'tenant' } });
    if (total) name.textContent = x.stage;
    else if (x.tenant === OTHERS) {
      name.textContent = 'other tenants';
      name.classList.add('others');
      name.title = 'tenants a consumer counted together, past the number of tenants it counts apart per stage';
    } else name.textContent = x.tenant;
    const cells = {};
    for (const [field] of CELLS) cells[field] = h('td', { class: 'num', data: { field } });
    const data = { stage: x.stage, row: total ? 'total' : 'tenant' };
    if (!total) data.tenant = x.tenant;
    const tr = h('tr', { class: total ? 'ledger-total' : 'ledger-tenant', data }, name, ...Object.values(cells));
    tr._c = cells;
    return tr;
  }

  // updateLedgerRow writes a row's figures.
  function updateLedgerRow(tr, x) {
    const r = x.row || {};
    for (const [field, value, text, title] of CELLS) {
      const td = tr._c[field];
      const v = value(r);
      setText(td, text ? text(r) : fmtInt(v || 0));
      setClass(td, 'zero', !(v > 0));
      setAttr(td, 'title', title ? title(r) : null);
    }
  }

  // ---- the window toggle ------------------------------------------------------------------

  // selectWindow shows the ledger of name (hour or day), read again at once.
  function selectWindow(name) {
    if (name === windowName || (name !== 'hour' && name !== 'day')) return;
    windowName = name;
    for (const b of $('savings-window').querySelectorAll('button[data-window]')) {
      b.setAttribute('aria-pressed', String(b.dataset.window === name));
    }
    setClass($('savings-panel'), 'switching', true);
    refresh('ledger');
  }

  FD.resource('ledger', { every: 10000, path: () => 'ledger?window=' + windowName, apply: renderLedger });
  FD.hooks.init.push(() => {
    $('savings-window').addEventListener('click', (ev) => {
      const b = ev.target.closest('button[data-window]');
      if (b) selectWindow(b.dataset.window);
    });
  });
})();
