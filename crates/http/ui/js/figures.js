// Live figures: each node keeps one sample a second of the last 15 minutes
// (/v1/ui/figures); the page asks every node for what is new once a second, straight from
// the browser, and draws the cluster's totals and one chosen node's latencies.

import {every, fromNode, json} from './api.js';
import {el, fill, message, num} from './dom.js';

const KEEP = 15 * 60;

export function render(container) {
  const chooser = el('select', {id: 'figures-node'});
  const controls = el('form', {class: 'controls', onsubmit: (e) => e.preventDefault()},
    el('label', {for: 'figures-node'}, 'Latency of node'), chooser);
  const notes = el('div', {id: 'figures-notes'});
  const charts = {
    rate: chart('chart-rate', 'Requests per second, whole cluster (HTTP and RESP)'),
    work: chart('chart-work', 'Applies and fsyncs per second, whole cluster'),
    lag: chart('chart-lag', 'Largest replica lag, log entries, whole cluster'),
    latency: chart('chart-latency', 'p50 and p99 latency of the chosen node, milliseconds'),
  };
  const nodes = el('div', {id: 'figures-table'});
  container.append(el('h1', {}, 'Live figures'),
    el('p', {class: 'note'}, 'One sample a second from each node, kept 15 minutes in the node\'s memory; the console\'s own requests are left out.'),
    controls, notes, nodes, ...Object.values(charts).map((c) => c.figure));
  /** Samples by node name; the last sample number seen by node. */
  const series = new Map();
  let addresses = [];

  const refresh = async () => {
    // Which nodes there are changes rarely: ask every tenth round.
    if (addresses.length === 0 || Math.random() < 0.1) {
      try {
        const status = await json('/v1/cluster/status');
        addresses = status.nodes.filter((n) => n.state !== 'removed' && n.http).map((n) => [n.name, n.http]);
      } catch (e) {
        fill(notes, message('error', e.message));
        return;
      }
    }
    const failed = [];
    await Promise.all(addresses.map(async ([name, http]) => {
      const known = series.get(name) ?? [];
      const since = known.length ? known[known.length - 1].seq : 0;
      try {
        const answer = await fromNode(http, `/v1/ui/figures?since=${since}`);
        // A node that restarted numbers its samples from 1 again.
        const fresh = answer.samples.length && answer.samples[0].seq <= since ? answer.samples : known.concat(answer.samples);
        series.set(name, fresh.slice(-KEEP));
      } catch (e) {
        failed.push(`${name}: ${e.message}`);
      }
    }));
    fill(notes, failed.length ? message('error', `No figures from ${failed.join('; ')}`) : '');
    const names = [...series.keys()].sort();
    if ([...chooser.options].map((o) => o.value).join() !== names.join()) {
      const chosen = chooser.value;
      fill(chooser, names.map((n) => el('option', {value: n, selected: n === chosen}, n)));
    }
    draw();
  };

  const draw = () => {
    const totals = sumBySecond(series);
    fill(nodes, latestTable(series));
    charts.rate.draw(totals, [['HTTP', (t) => t.http], ['RESP', (t) => t.resp]]);
    charts.work.draw(totals, [['applies', (t) => t.applies], ['fsyncs', (t) => t.fsyncs]]);
    charts.lag.draw(totals, [['max lag', (t) => t.lag]]);
    const mine = (series.get(chooser.value) ?? []).map((s) => ({
      at: Math.round(s.at_ms / 1000), http50: s.http.p50_ms, http99: s.http.p99_ms,
      resp50: s.resp.p50_ms, resp99: s.resp.p99_ms,
    }));
    charts.latency.draw(mine, [
      ['HTTP p50', (t) => t.http50], ['HTTP p99', (t) => t.http99],
      ['RESP p50', (t) => t.resp50], ['RESP p99', (t) => t.resp99]]);
  };
  chooser.addEventListener('change', draw);
  return every(1000, refresh);
}

/** Adds the nodes' samples up second by second (the lag: the largest). */
function sumBySecond(series) {
  const bySecond = new Map();
  for (const samples of series.values()) {
    for (const s of samples) {
      const at = Math.round(s.at_ms / 1000);
      const t = bySecond.get(at) ?? {at, http: 0, resp: 0, applies: 0, fsyncs: 0, lag: 0};
      t.http += s.http.rps;
      t.resp += s.resp.rps;
      t.applies += s.applies;
      t.fsyncs += s.fsyncs;
      t.lag = Math.max(t.lag, s.max_lag);
      bySecond.set(at, t);
    }
  }
  return [...bySecond.values()].sort((a, b) => a.at - b.at);
}

function latestTable(series) {
  const rows = [...series.entries()].sort(([a], [b]) => a.localeCompare(b)).map(([name, samples]) => {
    const s = samples[samples.length - 1];
    if (!s) return el('tr', {}, el('td', {}, name), el('td', {colspan: 10}, 'no sample yet'));
    return el('tr', {'data-node': name},
      [name, num(s.http.rps), num(s.http.p50_ms, 2), num(s.http.p99_ms, 2), num(s.resp.rps),
        num(s.resp.p50_ms, 2), num(s.resp.p99_ms, 2), num(s.applies), num(s.fsyncs),
        String(s.max_lag), String(samples.length)].map((c) => el('td', {}, c)));
  });
  return el('table', {id: 'figures-latest'},
    el('caption', {}, 'Last second on each node'),
    el('thead', {}, el('tr', {}, ['Node', 'HTTP req/s', 'HTTP p50 ms', 'HTTP p99 ms', 'RESP cmd/s',
      'RESP p50 ms', 'RESP p99 ms', 'Applies/s', 'Fsyncs/s', 'Max lag', 'Samples']
      .map((h) => el('th', {scope: 'col'}, h)))),
    el('tbody', {}, rows));
}

const COLOURS = ['#1f6feb', '#d1242f', '#1a7f37', '#9a6700'];

/** A line chart on a canvas, with its figures also in words for screen readers. */
function chart(id, title) {
  const canvas = el('canvas', {id, width: 900, height: 160, role: 'img', 'aria-label': title});
  const legend = el('p', {class: 'legend'});
  const figure = el('figure', {class: 'chart'}, el('figcaption', {}, title), canvas, legend);
  const draw = (points, lines) => {
    const ctx = canvas.getContext('2d');
    const {width, height} = canvas;
    ctx.clearRect(0, 0, width, height);
    const pad = 40;
    const last = points.length ? points[points.length - 1].at : 0;
    const first = last - KEEP;
    let max = 0;
    for (const p of points) for (const [, f] of lines) max = Math.max(max, f(p) ?? 0);
    max = max > 0 ? max * 1.1 : 1;
    ctx.strokeStyle = '#888';
    ctx.fillStyle = '#555';
    ctx.font = '11px sans-serif';
    ctx.strokeRect(pad, 5, width - pad - 5, height - 25);
    ctx.fillText(num(max, 1), 2, 14);
    ctx.fillText('0', 2, height - 20);
    ctx.fillText('15 min ago', pad, height - 6);
    ctx.fillText('now', width - 30, height - 6);
    const x = (at) => pad + ((at - first) / KEEP) * (width - pad - 5);
    const y = (v) => 5 + (1 - v / max) * (height - 25);
    const words = [];
    lines.forEach(([name, f], i) => {
      ctx.strokeStyle = COLOURS[i % COLOURS.length];
      ctx.beginPath();
      let drawing = false;
      for (const p of points) {
        const v = f(p);
        if (v === null || v === undefined) {
          drawing = false;
          continue;
        }
        if (drawing) ctx.lineTo(x(p.at), y(v));
        else ctx.moveTo(x(p.at), y(v));
        drawing = true;
      }
      ctx.stroke();
      const now = points.length ? f(points[points.length - 1]) : null;
      words.push(`${name}: ${num(now, 2)}`);
    });
    canvas.setAttribute('aria-label', `${title}. Now: ${words.join(', ')}`);
    fill(legend, lines.map(([name], i) => el('span', {class: `key key-${i}`}, name)), ' — now ', words.join(', '));
  };
  return {figure, draw};
}
