// Shards: which slots each shard owns, where its replicas are (the leader marked, each
// follower's lag), the moves and splits in progress, a picture of it all, and per shard the
// history of its placement as the node serving the page saw it.

import {every, json} from './api.js';
import {confirmAction, el, esc, fill, message} from './dom.js';
import {gatherNodes, operate} from './overview.js';

const SLOTS = 16384;

/** Puts the cluster's status and every node's own view of its replicas together. */
function combine(status, summaries) {
  const leaderOf = new Map();
  const lagOf = new Map(); // "shard/node" -> entries behind
  for (const [name, s] of summaries) {
    if (s.error) continue;
    for (const [shard, role] of s.roles) if (role === 'Leader') leaderOf.set(shard, name);
    for (const led of s.lag) {
      lagOf.set(`${led.shard}/${name}`, 0);
      for (const [follower, lag] of led.followers) lagOf.set(`${led.shard}/${follower}`, lag);
    }
  }
  const moves = new Map(status.moves.map((m) => [m.shard, m]));
  const splits = new Map(status.splits.map((s) => [s.shard, s]));
  return status.shards.map((shard) => ({
    shard: shard.shard,
    slots: shard.slots,
    leader: leaderOf.get(shard.shard) ?? shard.leader ?? null,
    replicas: shard.replicas.map((name) => ({name, lag: lagOf.get(`${shard.shard}/${name}`)})),
    move: moves.get(shard.shard) ?? null,
    split: splits.get(shard.shard) ?? null,
  }));
}

export function render(container, {access}) {
  const heading = el('h1', {}, 'Shards');
  const filter = el('select', {id: 'shard-filter'}, el('option', {value: ''}, 'every node'));
  const controls = el('form', {class: 'controls', onsubmit: (e) => e.preventDefault()},
    el('label', {for: 'shard-filter'}, 'Show the shards with a replica on'), filter);
  const summary = el('p', {id: 'shard-summary'});
  const progress = el('div', {id: 'in-progress'});
  const picture = el('figure', {id: 'shard-picture'});
  const list = el('div', {id: 'shard-list'});
  const detail = el('section', {id: 'shard-detail', 'aria-live': 'polite'});
  const result = el('div', {id: 'ops-result'});
  container.append(heading, controls, summary, progress, result, detail, picture, list);
  let last = null;
  let marked = false;
  let nodeNames = [];

  const draw = () => {
    if (!last) return;
    const started = performance.now();
    const {status, shards} = last;
    const only = filter.value;
    const shown = only ? shards.filter((s) => s.replicas.some((r) => r.name === only)) : shards;
    fill(summary, `${shown.length} of ${shards.length} shards, epoch ${status.epoch}, ` +
      `answered by ${status.node}.`);
    fill(progress, inProgress(status, shards));
    picture.innerHTML = svg(shown, nodeNames.filter((n) => status.nodes.some((s) => s.name === n && s.state !== 'removed')));
    fill(list, shardTable(shown, (s) => showDetail(detail, s, access, result, refresh)));
    const took = performance.now() - started;
    window.consoleTimings = {...(window.consoleTimings || {}), shardsRenderMs: took};
    if (!marked) {
      marked = true;
      performance.mark('shards-rendered');
    }
  };

  const refresh = async () => {
    let status;
    try {
      status = await json('/v1/cluster/status');
    } catch (e) {
      fill(summary, message('error', e.message));
      return;
    }
    const summaries = await gatherNodes(status);
    const names = status.nodes.map((n) => n.name).sort((a, b) => a.localeCompare(b, 'en', {numeric: true}));
    if (names.join() !== nodeNames.join()) {
      nodeNames = names;
      const chosen = filter.value;
      fill(filter, el('option', {value: ''}, 'every node'),
        names.map((n) => el('option', {value: n, selected: n === chosen}, n)));
    }
    last = {status, shards: combine(status, summaries)};
    draw();
  };
  filter.addEventListener('change', draw);
  picture.addEventListener('click', (event) => {
    const target = event.target.closest('[data-shard]');
    if (!target || !last) return;
    const shard = last.shards.find((s) => s.shard === Number(target.dataset.shard));
    if (shard) showDetail(detail, shard, access, result, refresh);
  });
  return every(2000, refresh);
}

function inProgress(status, shards) {
  if (status.moves.length === 0 && status.splits.length === 0) {
    return message('note', 'No replica moves or splits in progress.');
  }
  const items = [];
  for (const mv of status.moves) {
    const [last, matched] = mv.progress ?? [null, null];
    let bar;
    let words;
    if (last !== null && matched !== null && last > 0) {
      bar = el('progress', {max: last, value: Math.min(matched, last),
        'aria-label': `shard ${mv.shard} move progress`});
      words = `${matched} of ${last} log entries; bytes sent / total are not known (the node counts snapshot bytes for all transfers together, not per move)`;
    } else if (last !== null) {
      bar = el('progress', {'aria-label': `shard ${mv.shard} move progress`});
      words = `waiting for a snapshot (leader at entry ${last}); its size and the bytes sent are not known per move`;
    } else {
      bar = el('progress', {'aria-label': `shard ${mv.shard} move progress`});
      words = mv.phase === 'voter' ? 'caught up: becoming a voter' : 'no progress figures from the shard leader yet';
    }
    items.push(el('li', {class: 'move'},
      `Shard ${mv.shard}: ${mv.from ?? '(new replica)'} → ${mv.to}, ${mv.phase}, since ${new Date(mv.started_ms).toLocaleTimeString()}. `,
      bar, ' ', words));
  }
  for (const split of status.splits) {
    items.push(el('li', {class: 'split'},
      `Shard ${split.shard}: splitting at slot ${split.at_slot}; shard ${split.child} takes slots ${split.at_slot}–${split.slots[1]}. `,
      el('progress', {'aria-label': `shard ${split.shard} split progress`}),
      ' (a split is one log entry: no progress figures)'));
  }
  const known = new Set(shards.map((s) => s.shard));
  return el('section', {'aria-labelledby': 'progress-title'},
    el('h2', {id: 'progress-title'}, `In progress (${items.length})`),
    el('ul', {}, items),
    known.size === 0 ? '' : '');
}

/** The picture, as SVG markup: a band of slots coloured by shard, and under it one lane per
 * node showing the slot ranges it holds (dark: it leads; light: it follows; outlined: a
 * replica on its way there). Names are escaped; everything else is numbers. */
function svg(shards, nodes) {
  const width = 1000;
  const lane = 14;
  const top = 26;
  const height = top + 18 + nodes.length * lane + 4;
  const x = (slot) => (slot / SLOTS) * width;
  const parts = [];
  parts.push(`<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${width + 60} ${height}" role="img" aria-labelledby="pic-title">`);
  parts.push(`<title id="pic-title">Slot ranges of ${shards.length} shards and the nodes holding their replicas</title>`);
  parts.push(`<text x="0" y="10" class="axis">slot 0</text><text x="${width}" y="10" class="axis" text-anchor="end">16383</text>`);
  for (const s of shards) {
    const hue = (s.shard * 47) % 360;
    const w = Math.max(x(s.slots[1] + 1) - x(s.slots[0]), 0.5);
    parts.push(`<rect data-shard="${s.shard}" x="${x(s.slots[0]).toFixed(2)}" y="14" width="${w.toFixed(2)}" height="10" fill="hsl(${hue} 60% 55%)"><title>shard ${s.shard}: slots ${s.slots[0]}–${s.slots[1]}</title></rect>`);
  }
  nodes.forEach((name, i) => {
    const y = top + 18 + i * lane;
    parts.push(`<text x="${width + 4}" y="${y + 9}" class="lane">${esc(name)}</text>`);
    parts.push(`<line x1="0" x2="${width}" y1="${y + 11}" y2="${y + 11}" class="lane-line"/>`);
  });
  const laneOf = new Map(nodes.map((n, i) => [n, i]));
  for (const s of shards) {
    const x0 = x(s.slots[0]).toFixed(2);
    const w = Math.max(x(s.slots[1] + 1) - x(s.slots[0]), 0.5).toFixed(2);
    for (const r of s.replicas) {
      const i = laneOf.get(r.name);
      if (i === undefined) continue;
      const y = top + 18 + i * lane;
      const cls = r.name === s.leader ? 'leader' : 'follower';
      const lag = r.lag === undefined ? '' : `, lag ${r.lag}`;
      parts.push(`<rect data-shard="${s.shard}" class="${cls}" x="${x0}" y="${y}" width="${w}" height="10"><title>shard ${s.shard} on ${esc(r.name)} (${cls}${lag})</title></rect>`);
    }
    if (s.move && laneOf.has(s.move.to)) {
      const y = top + 18 + laneOf.get(s.move.to) * lane;
      parts.push(`<rect data-shard="${s.shard}" class="incoming" x="${x0}" y="${y}" width="${w}" height="10"><title>shard ${s.shard} moving to ${esc(s.move.to)}</title></rect>`);
    }
  }
  parts.push('</svg>');
  return parts.join('') +
    '<figcaption>Top band: the slot range of each shard. One lane per node: dark where it leads the shard, light where it follows, outlined where a replica is on its way. Select a shard to see its replicas and history.</figcaption>';
}

function shardTable(shards, onSelect) {
  const body = el('tbody');
  for (const s of shards) {
    const replicas = s.replicas.map((r) => {
      const leader = r.name === s.leader;
      const lag = leader ? 'leader' : r.lag === undefined ? 'lag unknown' : `lag ${r.lag}`;
      return el('span', {class: leader ? 'replica leader' : 'replica'}, `${r.name} (${lag})`);
    });
    const moving = s.move ? `${s.move.from ?? 'new'} → ${s.move.to} (${s.move.phase})`
      : s.split ? `splitting at ${s.split.at_slot}` : '';
    body.append(el('tr', {'data-shard': s.shard},
      el('td', {}, el('button', {type: 'button', class: 'link', onclick: () => onSelect(s),
        'aria-label': `Shard ${s.shard} details`}, `Shard ${s.shard}`)),
      el('td', {}, `${s.slots[0]}–${s.slots[1]}`),
      el('td', {}, s.leader ?? 'unknown'),
      el('td', {}, replicas),
      el('td', {}, moving)));
  }
  return el('table', {id: 'shard-table'},
    el('caption', {}, 'Shards: slots, leader, replicas with their lag (log entries behind the leader)'),
    el('thead', {}, el('tr', {}, ['Shard', 'Slots', 'Leader', 'Replicas', 'Moving']
      .map((h) => el('th', {scope: 'col'}, h)))),
    body);
}

async function showDetail(detail, shard, access, result, refresh) {
  const split = access.operator_write ? el('button', {
    type: 'button', class: 'danger', id: 'split-shard',
    onclick: () => {
      const mid = Math.floor((shard.slots[0] + shard.slots[1] + 1) / 2);
      return operate(result, refresh, `Split shard ${shard.shard}?`,
        `Shard ${shard.shard} (slots ${shard.slots[0]}–${shard.slots[1]}) is cut in two at slot ${mid} ` +
        `(the middle of its range): a new shard takes slots ${mid}–${shard.slots[1]} on the same ` +
        'replicas, and the rebalancer then moves its replicas like any others. The shard\'s writes ' +
        'wait while its replicas move the keys over (about a second per 100 MB).',
        'Split', `/v1/cluster/shards/${shard.shard}/split`);
    },
  }, `Split shard ${shard.shard}`) : '';
  fill(detail, el('h2', {}, `Shard ${shard.shard}`),
    el('p', {}, `Slots ${shard.slots[0]}–${shard.slots[1]}; leader ${shard.leader ?? 'unknown'}; ` +
      `replicas ${shard.replicas.map((r) => r.name).join(', ')}.`),
    split, el('div', {id: 'shard-history'}, 'Loading its history…'));
  const box = detail.querySelector('#shard-history');
  try {
    const history = await json(`/v1/ui/shards/${shard.shard}/history`);
    const since = new Date(history.since_ms).toLocaleString();
    const note = `History of moves as node ${history.node} applied them since it started (${since}). ` +
      'Each node keeps its own, in memory only, and loses it when it restarts.';
    fill(box, el('h3', {}, 'History'), el('p', {class: 'note'}, note),
      history.events.length === 0 ? el('p', {}, 'No changes since then.')
        : el('ol', {id: 'history-events'}, history.events.map((e) => el('li', {'data-kind': e.kind},
          `${new Date(e.at_ms).toLocaleTimeString()} (epoch ${e.epoch}): ${e.text}`))));
  } catch (e) {
    fill(box, message('error', e.message));
  }
}
