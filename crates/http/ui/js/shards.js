// Shards: which slots each shard owns, where its replicas are (the leader marked, each
// follower's lag), the moves and splits in progress (in snapshot bytes while the shard's leader
// sends one, otherwise in log entries), a picture of it all, and per shard the
// history of its placement as the node serving the page saw it.

import {every, json} from './api.js';
import {bytes, el, fill, message, svgEl, syncRows} from './dom.js';
import {gatherNodes, operate} from './overview.js';

const SLOTS = 16384;

/**
 * Puts the cluster's status and every node's own view of its replicas together: the shards,
 * and the snapshots each shard's leader is sending ("shard/target" -> {sent, total}).
 */
function combine(status, summaries) {
  const leaderOf = new Map();
  const lagOf = new Map(); // "shard/node" -> entries behind
  const sentBy = []; // [leader, transfer]
  for (const [name, s] of summaries) {
    if (s.error) continue;
    for (const [shard, role] of s.roles) if (role === 'Leader') leaderOf.set(shard, name);
    for (const led of s.lag) {
      lagOf.set(`${led.shard}/${name}`, 0);
      for (const [follower, lag] of led.followers) lagOf.set(`${led.shard}/${follower}`, lag);
    }
    // A node of a build before the field sends none.
    for (const t of s.snapshots ?? []) sentBy.push([name, t]);
  }
  const sending = new Map();
  for (const [name, t] of sentBy) {
    if (leaderOf.get(t.shard) === name) {
      sending.set(`${t.shard}/${t.target}`, {sent: Number(t.sent), total: Number(t.total)});
    }
  }
  const moves = new Map(status.moves.map((m) => [m.shard, m]));
  const splits = new Map(status.splits.map((s) => [s.shard, s]));
  const shards = status.shards.map((shard) => ({
    shard: shard.shard,
    slots: shard.slots,
    leader: leaderOf.get(shard.shard) ?? shard.leader ?? null,
    replicas: shard.replicas.map((name) => ({name, lag: lagOf.get(`${shard.shard}/${name}`)})),
    move: moves.get(shard.shard) ?? null,
    split: splits.get(shard.shard) ?? null,
  }));
  return {shards, sending};
}

export function render(container, {access}) {
  const heading = el('h1', {}, 'Shards');
  const filter = el('select', {id: 'shard-filter'}, el('option', {value: ''}, 'every node'));
  const controls = el('form', {class: 'controls', onsubmit: (e) => e.preventDefault()},
    el('label', {for: 'shard-filter'}, 'Show the shards with a replica on'), filter);
  const summary = el('p', {id: 'shard-summary'});
  const progress = el('div', {id: 'in-progress'});
  const picture = el('figure', {id: 'shard-picture'});
  const caption = el('figcaption', {}, 'Top band: the slot range of each shard. One lane per node: ' +
    'dark where it leads the shard, light where it follows, outlined where a replica is on its way. ' +
    'Select a shard (in the picture or the table) to see its replicas and history.');
  const list = el('div', {id: 'shard-list'});
  const detail = el('section', {id: 'shard-detail', 'aria-live': 'polite'});
  const result = el('div', {id: 'ops-result'});
  container.append(heading, controls, summary, progress, result, detail, picture, list);
  // The table is made once and its rows updated in place, keyed by shard: a focused
  // button keeps the focus across refreshes, and unchanged rows cost nothing.
  const body = el('tbody');
  list.append(el('table', {id: 'shard-table'},
    el('caption', {}, 'Shards: slots, leader, replicas with their lag (log entries behind the leader)'),
    el('thead', {}, el('tr', {}, ['Shard', 'Slots', 'Leader', 'Replicas', 'Moving']
      .map((h) => el('th', {scope: 'col'}, h)))),
    body));
  /** The last round: the status and the shards put together; read by every handler. */
  let last = null;
  let marked = false;
  let nodeNames = [];
  let drawn = '';

  const select = (id) => {
    const shard = last && last.shards.find((s) => s.shard === id);
    if (shard) showDetail(detail, shard, access, result, refresh);
  };

  const draw = () => {
    if (!last) return;
    const started = performance.now();
    const {status, shards, sending} = last;
    const only = filter.value;
    const shown = only ? shards.filter((s) => s.replicas.some((r) => r.name === only)) : shards;
    fill(summary, `${shown.length} of ${shards.length} shards, epoch ${status.epoch}, ` +
      `answered by ${status.node}.`);
    fill(progress, inProgress(status, sending));
    const lanes = nodeNames.filter((n) => status.nodes.some((s) => s.name === n && s.state !== 'removed'));
    // The picture is drawn again only when what it shows changed.
    const key = JSON.stringify([lanes, shown.map((s) => [s.shard, s.slots, s.leader, s.replicas, s.move?.to])]);
    if (key !== drawn) {
      drawn = key;
      picture.replaceChildren(svg(shown, lanes), caption);
    }
    syncRows(body, shardRows(shown, select));
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
    last = {status, ...combine(status, summaries)};
    draw();
  };
  filter.addEventListener('change', draw);
  picture.addEventListener('click', (event) => {
    const target = event.target.closest('[data-shard]');
    if (target) select(Number(target.dataset.shard));
  });
  return every(2000, refresh);
}

/** The moves and splits in progress; `sending` as `combine` makes it. */
function inProgress(status, sending) {
  if (status.moves.length === 0 && status.splits.length === 0) {
    return message('note', 'No replica moves or splits in progress.');
  }
  const items = [];
  for (const mv of status.moves) {
    const [last, matched] = mv.progress ?? [null, null];
    const snapshot = sending.get(`${mv.shard}/${mv.to}`);
    let bar;
    let words;
    if (snapshot && snapshot.total > 0) {
      const sent = Math.min(snapshot.sent, snapshot.total);
      bar = el('progress', {max: snapshot.total, value: sent,
        'aria-label': `shard ${mv.shard} move progress`, 'data-unit': 'bytes'});
      words = `${bytes(sent)} of ${bytes(snapshot.total)} sent (snapshot)`;
    } else if (last !== null && matched !== null && last > 0) {
      bar = el('progress', {max: last, value: Math.min(matched, last),
        'aria-label': `shard ${mv.shard} move progress`, 'data-unit': 'entries'});
      words = `${matched} of ${last} log entries`;
    } else if (last !== null) {
      bar = el('progress', {'aria-label': `shard ${mv.shard} move progress`});
      words = `waiting for a snapshot (leader at entry ${last})`;
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
  return el('section', {'aria-labelledby': 'progress-title'},
    el('h2', {id: 'progress-title'}, `In progress (${items.length})`),
    el('ul', {}, items));
}

/**
 * The picture: a band of slots coloured by shard, and under it one lane per node showing the
 * slot ranges it holds (dark: it leads; light: it follows; outlined: a replica on its way
 * there). Made element by element, names as text and every number through Number(), so
 * nothing another node answered is read as markup.
 */
function svg(shards, nodes) {
  const width = 1000;
  const lane = 14;
  const top = 26;
  const height = top + 18 + nodes.length * lane + 4;
  const x = (slot) => (Number(slot) / SLOTS) * width;
  const span = (s) => [x(s.slots[0]).toFixed(2), Math.max(x(Number(s.slots[1]) + 1) - x(s.slots[0]), 0.5).toFixed(2)];
  const picture = svgEl('svg', {viewBox: `0 0 ${width + 60} ${height}`, role: 'img', 'aria-labelledby': 'pic-title'},
    svgEl('title', {id: 'pic-title'}, `Slot ranges of ${shards.length} shards and the nodes holding their replicas`),
    svgEl('text', {x: 0, y: 10, class: 'axis'}, 'slot 0'),
    svgEl('text', {x: width, y: 10, class: 'axis', 'text-anchor': 'end'}, '16383'));
  for (const s of shards) {
    const id = Number(s.shard);
    const [x0, w] = span(s);
    picture.append(svgEl('rect', {'data-shard': id, x: x0, y: 14, width: w, height: 10,
      fill: `hsl(${(id * 47) % 360} 60% 55%)`},
    svgEl('title', {}, `shard ${id}: slots ${Number(s.slots[0])}–${Number(s.slots[1])}`)));
  }
  nodes.forEach((name, i) => {
    const y = top + 18 + i * lane;
    picture.append(svgEl('text', {x: width + 4, y: y + 9, class: 'lane'}, name),
      svgEl('line', {x1: 0, x2: width, y1: y + 11, y2: y + 11, class: 'lane-line'}));
  });
  const laneOf = new Map(nodes.map((n, i) => [n, i]));
  for (const s of shards) {
    const id = Number(s.shard);
    const [x0, w] = span(s);
    for (const r of s.replicas) {
      const i = laneOf.get(r.name);
      if (i === undefined) continue;
      const cls = r.name === s.leader ? 'leader' : 'follower';
      const lag = r.lag === undefined ? '' : `, lag ${Number(r.lag)}`;
      picture.append(svgEl('rect', {'data-shard': id, class: cls, x: x0, y: top + 18 + i * lane, width: w, height: 10},
        svgEl('title', {}, `shard ${id} on ${r.name} (${cls}${lag})`)));
    }
    if (s.move && laneOf.has(s.move.to)) {
      picture.append(svgEl('rect', {'data-shard': id, class: 'incoming', x: x0,
        y: top + 18 + laneOf.get(s.move.to) * lane, width: w, height: 10},
      svgEl('title', {}, `shard ${id} moving to ${s.move.to}`)));
    }
  }
  return picture;
}

function shardRows(shards, select) {
  return shards.map((s) => {
    const replicas = s.replicas.map((r) => {
      const leader = r.name === s.leader;
      const lag = leader ? 'leader' : r.lag === undefined ? 'lag unknown' : `lag ${r.lag}`;
      return el('span', {class: leader ? 'replica leader' : 'replica'}, `${r.name} (${lag})`);
    });
    const moving = s.move ? `${s.move.from ?? 'new'} → ${s.move.to} (${s.move.phase})`
      : s.split ? `splitting at ${s.split.at_slot}` : '';
    return {key: s.shard, cells: [
      el('button', {type: 'button', class: 'link', 'data-shard': s.shard, onclick: () => select(s.shard),
        'aria-label': `Shard ${s.shard} details`}, `Shard ${s.shard}`),
      `${s.slots[0]}–${s.slots[1]}`,
      s.leader ?? 'unknown',
      el('span', {}, replicas),
      moving,
    ]};
  });
}

/** The split's answer, in words. */
function splitDone(answer) {
  return el('span', {id: 'split-result', 'data-child': answer.child, 'data-at': answer.at_slot},
    `Split decided: shard ${answer.shard} keeps slots ${answer.slots[0]}–${answer.at_slot - 1}, ` +
    `new shard ${answer.child} takes slots ${answer.at_slot}–${answer.slots[1]} on the same replicas ` +
    '(the rebalancer then moves them like any others).');
}

async function showDetail(detail, shard, access, result, refresh) {
  const split = access.operator_write ? el('button', {
    type: 'button', class: 'danger', id: 'split-shard',
    onclick: async () => {
      // The slot range as the cluster has it now, not as the page last drew it: the page
      // names the slot it splits at, so a range changed meanwhile cannot be cut elsewhere
      // than the confirmation said (the server refuses a slot outside the range).
      let now;
      try {
        now = (await json('/v1/cluster/status')).shards.find((s) => s.shard === shard.shard);
      } catch (e) {
        return fill(result, message('error', e.message));
      }
      if (!now) return fill(result, message('error', `There is no shard ${shard.shard} any more.`));
      const [lo, hi] = now.slots;
      if (lo === hi) return fill(result, message('error', `Shard ${shard.shard} has one slot: it cannot be split.`));
      const mid = Math.floor((lo + hi + 1) / 2);
      return operate(result, refresh, `Split shard ${shard.shard}?`,
        `Shard ${shard.shard} (slots ${lo}–${hi}) is cut in two at slot ${mid} ` +
        `(the middle of its range): a new shard takes slots ${mid}–${hi} on the same ` +
        'replicas, and the rebalancer then moves its replicas like any others. The shard\'s writes ' +
        'wait while its replicas move the keys over (about a second per 100 MB).',
        'Split', `/v1/cluster/shards/${shard.shard}/split?at=${mid}`, splitDone);
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
      'Each node keeps its own, in memory only, and loses it when it restarts. When the node ' +
      'applied several epochs at once, a change names them all: the steps between were not seen.';
    const epochs = (e) => (e.from_epoch < e.epoch ? `epochs ${e.from_epoch}–${e.epoch}, applied together` : `epoch ${e.epoch}`);
    fill(box, el('h3', {}, 'History'), el('p', {class: 'note'}, note),
      history.events.length === 0 ? el('p', {}, 'No changes since then.')
        : el('ol', {id: 'history-events'}, history.events.map((e) => el('li', {'data-kind': e.kind},
          `${new Date(e.at_ms).toLocaleTimeString()} (${epochs(e)}): ${e.text}`))));
  } catch (e) {
    fill(box, message('error', e.message));
  }
}
