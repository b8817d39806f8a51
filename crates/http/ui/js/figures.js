// Live figures: each node keeps one sample a second of the last 15 minutes
// (/v1/ui/figures); the page asks every node for what is new once a second, straight from
// the browser, each node on its own loop (so one that does not answer holds no other back),
// and draws the cluster's totals and one chosen node's latencies.

import {every, fromNode, json} from './api.js';
import {el, fill, message, num} from './dom.js';

/** Seconds drawn: what a node keeps. */
const KEEP = 15 * 60;
/** A sample stands for the time since the one before it, but for no more than this. */
const COVERS_MS = 1500;
/** A node whose newest sample is this far behind the others' holds the totals back no more. */
const BEHIND_MS = 5000;

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
  const table = el('div', {id: 'figures-table'});
  container.append(el('h1', {}, 'Live figures'),
    el('p', {class: 'note'}, 'One sample a second from each node, kept 15 minutes in the node\'s memory. ' +
      'Left out of the latencies: the console\'s own requests (/ui, /v1/ui/...) and the long polls ' +
      '(Consul blocking queries, BLPOP and the other blocking pops), whose time is the wait their client asked for.'),
    controls, notes, table, ...Object.values(charts).map((c) => c.figure));

  /** Per node name: its address, its series (boot_ms) and samples, its last error, its loop. */
  const nodes = new Map();
  let servedBy = '';
  let statusError = '';

  let drawPending = false;
  const redraw = () => {
    if (drawPending) return;
    drawPending = true;
    setTimeout(() => {
      drawPending = false;
      draw();
    }, 50);
  };

  const poll = (name) => async () => {
    const n = nodes.get(name);
    if (!n) return;
    const last = n.samples.length ? n.samples[n.samples.length - 1].seq : 0;
    const query = n.boot === null ? `since=${last}` : `since=${last}&boot=${n.boot}`;
    try {
      const answer = await fromNode(n.node, servedBy, `/v1/ui/figures?${query}`);
      // Another series (the node restarted and numbers from 1 again): start over with it.
      n.samples = answer.boot_ms === n.boot ? n.samples.concat(answer.samples) : answer.samples;
      if (n.samples.length > KEEP) n.samples = n.samples.slice(-KEEP);
      n.boot = answer.boot_ms;
      n.error = '';
    } catch (e) {
      n.error = e.message;
    }
    redraw();
  };

  // Which nodes there are changes rarely: asked every 10 s, each node polled on its own.
  const stopStatus = every(10000, async () => {
    let status;
    try {
      status = await json('/v1/cluster/status');
    } catch (e) {
      statusError = e.message;
      redraw();
      return;
    }
    statusError = '';
    servedBy = status.node;
    const wanted = new Map(status.nodes.filter((n) => n.state !== 'removed' && n.http).map((n) => [n.name, n]));
    for (const [name, n] of nodes) {
      if (!wanted.has(name)) {
        n.stop();
        nodes.delete(name);
      }
    }
    for (const [name, node] of wanted) {
      const known = nodes.get(name);
      if (known) {
        known.node = node;
        continue;
      }
      const n = {node, boot: null, samples: [], error: '', stop: () => {}};
      nodes.set(name, n);
      n.stop = every(1000, poll(name));
    }
    redraw();
  });

  const draw = () => {
    const failed = [...nodes].filter(([, n]) => n.error).map(([name, n]) => `${name}: ${n.error}`);
    if (statusError) failed.unshift(`the cluster status: ${statusError}`);
    fill(notes, failed.length ? message('error', `No figures from ${failed.join('; ')}`) : '');
    const names = [...nodes.keys()].sort((a, b) => a.localeCompare(b, 'en', {numeric: true}));
    if ([...chooser.options].map((o) => o.value).join() !== names.join()) {
      const chosen = chooser.value;
      fill(chooser, names.map((n) => el('option', {value: n, selected: n === chosen}, n)));
    }
    const totals = sumBySecond([...nodes.values()].map((n) => n.samples));
    fill(table, latestTable(names.map((name) => [name, nodes.get(name)])));
    charts.rate.draw(totals, [['HTTP', (t) => t.http], ['RESP', (t) => t.resp]]);
    charts.work.draw(totals, [['applies', (t) => t.applies], ['fsyncs', (t) => t.fsyncs]]);
    charts.lag.draw(totals, [['max lag', (t) => t.lag]]);
    const mine = (nodes.get(chooser.value)?.samples ?? []).map((s) => ({
      at: s.at_ms / 1000, http50: s.http.p50_ms, http99: s.http.p99_ms,
      resp50: s.resp.p50_ms, resp99: s.resp.p99_ms,
    }));
    charts.latency.draw(mine, [
      ['HTTP p50', (t) => t.http50], ['HTTP p99', (t) => t.http99],
      ['RESP p50', (t) => t.resp50], ['RESP p99', (t) => t.resp99]]);
  };
  chooser.addEventListener('change', draw);
  return () => {
    stopStatus();
    for (const n of nodes.values()) n.stop();
    nodes.clear();
  };
}

/**
 * The cluster's totals, one point per whole second (the lag: the largest). Nodes sample
 * each at its own phase within the second, so each node's value at a second is that of the
 * sample covering it (a sample covers the time since the one before, at most COVERS_MS).
 * Seconds are drawn only up to the oldest of the nodes' newest samples, so the last point
 * is not a sum of only the nodes that have answered so far; a node far behind the others
 * (down, or not answering) does not hold the rest back.
 */
export function sumBySecond(allSeries) {
  const series = allSeries.filter((s) => s.length > 0);
  if (series.length === 0) return [];
  const newest = series.map((s) => s[s.length - 1].at_ms);
  const latest = Math.max(...newest);
  const end = Math.floor(Math.min(...newest.filter((at) => at >= latest - BEHIND_MS)) / 1000);
  const earliest = Math.floor((Math.min(...series.map((s) => s[0].at_ms)) - COVERS_MS) / 1000);
  const cursors = series.map(() => 0);
  const out = [];
  for (let second = Math.max(earliest, end - KEEP + 1); second <= end; second += 1) {
    const at = second * 1000;
    const point = {at: second, http: 0, resp: 0, applies: 0, fsyncs: 0, lag: 0, nodes: 0};
    series.forEach((samples, j) => {
      let i = cursors[j];
      while (i < samples.length && samples[i].at_ms < at) i += 1;
      cursors[j] = i;
      const s = samples[i];
      if (!s) return;
      const from = Math.max(i > 0 ? samples[i - 1].at_ms : -Infinity, s.at_ms - COVERS_MS);
      if (at <= from) return;
      point.http += s.http.rps;
      point.resp += s.resp.rps;
      point.applies += s.applies;
      point.fsyncs += s.fsyncs;
      point.lag = Math.max(point.lag, s.max_lag);
      point.nodes += 1;
    });
    if (point.nodes > 0) out.push(point);
  }
  return out;
}

function latestTable(entries) {
  const rows = entries.map(([name, n]) => {
    const s = n.samples[n.samples.length - 1];
    if (!s) {
      return el('tr', {'data-node': name}, el('td', {}, name),
        el('td', {colspan: 10}, n.error ? `no answer: ${n.error}` : 'no sample yet'));
    }
    return el('tr', {'data-node': name, 'data-boot': n.boot, 'data-seq': s.seq},
      [name, num(s.http.rps), num(s.http.p50_ms, 2), num(s.http.p99_ms, 2), num(s.resp.rps),
        num(s.resp.p50_ms, 2), num(s.resp.p99_ms, 2), num(s.applies), num(s.fsyncs),
        String(s.max_lag), String(n.samples.length)].map((c) => el('td', {}, c)));
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
      let previous = null;
      for (const p of points) {
        const v = f(p);
        // A gap in the seconds (no node had a sample) breaks the line.
        if (v === null || v === undefined || (previous !== null && p.at - previous > 2)) drawing = false;
        previous = p.at;
        if (v === null || v === undefined) continue;
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
