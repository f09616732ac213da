// Flightdeck dashboard: the last hour per stage, from the fleet's per-minute stats in Redis:
// throughput, outcomes and end-to-end latency (p50, p99), drawn as plain SVG. See app.js for
// the helpers it uses.
(() => {
  'use strict';

  const FD = window.Flightdeck;
  const { h, $, setText, fmtInt, fmtDur, fmtClock, reconcile, TERMINAL } = FD;

  const SVG = 'http://www.w3.org/2000/svg';
  const W = 600, H = 100; // the charts' view box; they stretch to their box

  function svg(tag, attrs, ...children) {
    const el = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) if (v != null) el.setAttribute(k, String(v));
    for (const c of children) if (c != null) el.append(c);
    return el;
  }
  const title = (text) => svg('title', null, text);

  // statusOf reads "<shared>_<status>" outcome keys.
  function statusOf(outcome) {
    const i = outcome.lastIndexOf('_');
    return i < 0 ? '' : outcome.slice(i + 1);
  }

  // niceMax rounds a chart's maximum up to 1, 2 or 5 times a power of ten.
  function niceMax(v) {
    if (!(v > 0)) return 1;
    const p = 10 ** Math.floor(Math.log10(v));
    for (const m of [1, 2, 5, 10]) if (v <= m * p) return m * p;
    return 10 * p;
  }

  function minuteLabel(m) {
    return fmtClock(new Date(m.minute * 1000)).slice(0, 5);
  }

  // chart builds one chart box: a title with the axis maximum, the SVG, and its time axis.
  function chart(name, label, max, fmt, body, minutes, legend) {
    const first = minutes[0], last = minutes[minutes.length - 1];
    return h('figure', { class: 'chart', data: { chart: name } },
      h('figcaption', null, h('span', { class: 'chart-title' }, label),
        legend || null, h('span', { class: 'chart-max muted small', title: 'top of the chart' }, fmt(max))),
      svg('svg', { class: 'chart-svg chart-' + name, viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: 'none',
        role: 'img', 'aria-label': label }, ...body),
      h('div', { class: 'chart-axis muted small' }, h('span', null, first ? minuteLabel(first) : ''),
        h('span', null, last ? minuteLabel(last) + ' (now)' : '')));
  }

  function legendOf(items) {
    return h('span', { class: 'chart-legend' }, items.map(([cls, text]) =>
      h('span', { class: 'legend-item' }, h('span', { class: 'legend-swatch ' + cls }), text)));
  }

  // throughput: terminal events per minute, one bar each.
  function throughputChart(minutes) {
    const bw = W / minutes.length;
    const max = niceMax(Math.max(0, ...minutes.map((m) => m.total)));
    const bars = minutes.map((m, i) => (m.total > 0
      ? svg('rect', { class: 'bar', x: (i * bw + bw * 0.1).toFixed(2), width: (bw * 0.8).toFixed(2),
        y: (H - (H * m.total) / max).toFixed(2), height: ((H * m.total) / max).toFixed(2) },
      title(minuteLabel(m) + ': ' + fmtInt(m.total) + ' events (' + (m.total / 60).toFixed(2) + '/s)'))
      : null));
    return chart('throughput', 'throughput /min', max, fmtInt, bars, minutes);
  }

  // outcomes: per minute, each terminal status's share of the events, stacked.
  function outcomesChart(minutes) {
    const bw = W / minutes.length;
    const body = [];
    minutes.forEach((m, i) => {
      if (!m.total) return;
      const by = {};
      for (const [o, n] of Object.entries(m.outcomes || {})) {
        const st = statusOf(o);
        if (TERMINAL.includes(st)) by[st] = (by[st] || 0) + n;
      }
      let y = H;
      for (const st of TERMINAL) {
        if (!by[st]) continue;
        const hgt = (H * by[st]) / m.total;
        y -= hgt;
        body.push(svg('rect', { class: 'seg', 'data-status': st, x: (i * bw + bw * 0.1).toFixed(2),
          width: (bw * 0.8).toFixed(2), y: y.toFixed(2), height: hgt.toFixed(2) },
        title(minuteLabel(m) + ': ' + st + ' ' + fmtInt(by[st]) + ' of ' + fmtInt(m.total))));
      }
    });
    const legend = legendOf(TERMINAL.map((st) => ['status-' + st.toLowerCase(), st.toLowerCase()]));
    return chart('outcomes', 'outcomes', 100, (v) => v + '%', body, minutes, legend);
  }

  // latency: p50 and p99 of each minute with data, as lines (a dot where a minute stands
  // alone).
  function latencyChart(minutes) {
    const bw = W / minutes.length;
    const max = niceMax(Math.max(0, ...minutes.map((m) => (m.count > 0 ? m.p99Ms : 0))));
    const body = [];
    for (const q of ['p50', 'p99']) {
      let run = [];
      const flush = () => {
        if (run.length > 1) {
          body.push(svg('polyline', { class: 'line ' + q, points: run.map((p) => p.join(',')).join(' '),
            'vector-effect': 'non-scaling-stroke' }));
        }
        run = [];
      };
      minutes.forEach((m, i) => {
        if (!(m.count > 0)) { flush(); return; }
        const v = m[q + 'Ms'];
        const pt = [(i * bw + bw / 2).toFixed(2), (H - (H * v) / max).toFixed(2)];
        run.push(pt);
        body.push(svg('circle', { class: 'dot ' + q, cx: pt[0], cy: pt[1], r: 1.5, 'vector-effect': 'non-scaling-stroke' },
          title(minuteLabel(m) + ': ' + q + ' ' + fmtDur(v) + ' (' + fmtInt(m.count) + ' tasks)')));
      });
      flush();
    }
    const legend = legendOf([['p50', 'p50'], ['p99', 'p99']]);
    return chart('latency', 'end-to-end latency', max, fmtDur, body, minutes, legend);
  }

  function renderHistory(list) {
    list = Array.isArray(list) ? list : [];
    $('history-empty').hidden = list.length > 0;
    reconcile($('history'), list, (s) => s.stage, makeHistoryRow, updateHistoryRow);
  }

  function makeHistoryRow(s) {
    const row = h('article', { class: 'history-row', data: { stage: s.stage } },
      h('header', { class: 'history-head' }, h('h3', { class: 'mono' }, s.stage), h('span', { class: 'muted small history-sum' })),
      h('div', { class: 'history-charts' }));
    return row;
  }

  function updateHistoryRow(row, s) {
    const minutes = s.minutes || [];
    const sig = JSON.stringify(minutes);
    if (row.dataset.sig === sig) return;
    row.dataset.sig = sig;
    const total = minutes.reduce((a, m) => a + m.total, 0);
    row.dataset.minutesWithData = String(minutes.filter((m) => m.total > 0 || m.count > 0).length);
    setText(row.querySelector('.history-sum'), total ? fmtInt(total) + ' events in the last ' + minutes.length + ' min'
      : 'no events in the last ' + minutes.length + ' min');
    row.querySelector('.history-charts').replaceChildren(throughputChart(minutes), outcomesChart(minutes), latencyChart(minutes));
  }

  FD.resource('history', { every: 10000, path: () => 'history?minutes=60', apply: renderHistory });
})();
