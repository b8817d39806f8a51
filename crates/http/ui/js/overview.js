// Overview: the cluster (name, epoch, metadata leader), anything that needs attention, and
// every node with its labels, version, health, uptime, disk, memory, replicas and leaders,
// with the operations on nodes (drain, cancel a drain, remove a dead node).

import {ApiError, every, fromNode, json} from './api.js';
import {bytes, confirmAction, duration, el, fill, message, syncRows} from './dom.js';

/**
 * Every node's own summary (`/v1/ui/node`), by node name, asked of each node at once: the
 * node serving the page through this page's own origin, the others at their advertised
 * addresses. A node that does not answer has `{error}`.
 */
export async function gatherNodes(status) {
  const summaries = new Map();
  await Promise.all(status.nodes
    .filter((n) => n.state !== 'removed' && n.http)
    .map(async (n) => {
      try {
        summaries.set(n.name, await fromNode(n, status.node, '/v1/ui/node'));
      } catch (e) {
        summaries.set(n.name, {error: e.message});
      }
    }));
  return summaries;
}

/** Why a node's summary says it is not healthy, in words (the rule of /v1/health). */
function unhealthy(summary) {
  if (!summary.storage_ok) return 'its storage failed a sync, so it refuses writes until restarted';
  if (!summary.all_shards_led) {
    return 'the metadata group, or a shard it holds a voter of, has no leader it knows of';
  }
  return 'it is stopping';
}

/** What needs attention, in words. */
export function warnings(status, summaries) {
  const out = [];
  if (!status.meta_leader) out.push('The metadata group has no leader: no placement change can be made.');
  const active = status.nodes.filter((n) => n.state === 'active').map((n) => n.name);
  const wanted = Math.min(status.replication_factor, active.length);
  for (const shard of status.shards) {
    const on = shard.replicas.filter((r) => active.includes(r)).length;
    if (on < wanted) {
      out.push(`Shard ${shard.shard} has ${on} of ${wanted} voters on active nodes (below its replication factor).`);
    }
  }
  for (const node of status.nodes) {
    if (node.state === 'removed') continue;
    if (!node.linked) out.push(`Node ${node.name} is unreachable from ${status.node} (no peer link).`);
    const summary = summaries.get(node.name);
    if (!summary) continue;
    if (summary.error) {
      out.push(`Node ${node.name} did not answer this browser: ${summary.error}`);
      continue;
    }
    if (!summary.healthy) out.push(`Node ${node.name} reports itself unavailable: ${unhealthy(summary)}.`);
    const free = summary.disk_free_bytes;
    const floor = summary.disk_min_free_bytes;
    if (free !== null && floor > 0 && free < 2 * floor) {
      out.push(`Node ${node.name}'s disk is filling: ${bytes(free)} free; writes stop below ${bytes(floor)}.`);
    }
  }
  return out;
}

const HEADINGS = ['Node', 'State', 'Region', 'Zone', 'Rack', 'Version', 'Health', 'Uptime', 'Disk',
  'Data on disk', 'Memory', 'Replicas', 'Leaders', 'Operations'];

export function render(container, {access}) {
  const heading = el('h1', {}, 'Overview');
  const cluster = el('div', {id: 'cluster'});
  const warningBox = el('div', {id: 'warnings'});
  const nodes = el('div', {id: 'nodes'});
  const result = el('div', {id: 'ops-result'});
  container.append(heading, cluster, warningBox, result, nodes);
  // The table is made once and its rows updated in place (keyed by node), so a button
  // that has the keyboard focus keeps it across refreshes.
  const caption = el('caption');
  const body = el('tbody');
  const table = el('table', {id: 'node-table'}, caption,
    el('thead', {}, el('tr', {}, HEADINGS.map((h) => el('th', {scope: 'col'}, h)))), body);
  /** The latest status, which the operations' buttons read when they are pressed. */
  const latest = {status: null};
  let marked = false;

  const refresh = async () => {
    let status;
    try {
      status = await json('/v1/cluster/status');
    } catch (e) {
      fill(cluster, message('error', e.message));
      table.remove();
      return;
    }
    const summaries = await gatherNodes(status);
    latest.status = status;
    const self = summaries.get(status.node);
    const name = self && !self.error ? self.cluster : '';
    fill(document.getElementById('cluster-name'), name ? `cluster ${name}` : '');
    fill(cluster, el('dl', {class: 'facts'},
      el('dt', {}, 'Cluster'), el('dd', {id: 'fact-cluster'}, name || '-'),
      el('dt', {}, 'Epoch'), el('dd', {id: 'fact-epoch'}, String(status.epoch)),
      el('dt', {}, 'Metadata leader'), el('dd', {}, status.meta_leader ?? 'none'),
      el('dt', {}, 'Cluster version'), el('dd', {}, String(status.cluster_version)),
      el('dt', {}, 'Replication factor'), el('dd', {}, String(status.replication_factor)),
      el('dt', {}, 'Shards'), el('dd', {}, String(status.shards.length)),
      el('dt', {}, 'In progress'),
      el('dd', {}, `${status.moves.length} replica move(s), ${status.splits.length} split(s)`),
      el('dt', {}, 'Answered by'), el('dd', {}, status.node)));
    const found = warnings(status, summaries);
    fill(warningBox, found.length === 0
      ? message('ok', 'No warnings: every shard at its replication factor, every node linked and healthy.')
      : el('section', {'aria-labelledby': 'warnings-title'},
        el('h2', {id: 'warnings-title'}, `Warnings (${found.length})`),
        el('ul', {class: 'warnings'}, found.map((w) => el('li', {}, w)))));
    fill(caption, `Nodes (${status.nodes.length})`);
    syncRows(body, nodeRows(status, summaries, access, latest, result, refresh));
    if (!table.isConnected) nodes.append(table);
    if (!marked) {
      marked = true;
      performance.mark('overview-rendered');
    }
  };
  return every(2000, refresh);
}

function nodeRows(status, summaries, access, latest, result, refresh) {
  const byName = [...status.nodes].sort((a, b) => a.name.localeCompare(b.name, 'en', {numeric: true}));
  return byName.map((node) => {
    const s = summaries.get(node.name);
    const ok = s && !s.error;
    const health = node.state === 'removed' ? '-'
      : !ok ? 'no answer' : s.healthy ? 'ok' : 'unavailable';
    const version = node.version ? `${node.version.build}/${node.version.protocol}` : '-';
    let state = node.state;
    if (node.drain) state += ` (${node.drain.replicas_left} replica(s) left to move)`;
    return {key: node.name, cells: [
      el('span', {class: 'node-name'}, node.name),
      state,
      ok && s.region ? s.region : '-',
      ok && s.zone ? s.zone : '-',
      ok && s.rack ? s.rack : '-',
      version,
      el('span', {class: `health ${health === 'ok' ? 'good' : health === '-' ? '' : 'bad'}`}, health),
      ok ? duration(s.uptime_secs) : '-',
      ok ? (s.disk_free_bytes === null ? 'unknown' : `${bytes(s.disk_free_bytes)} free`) : '-',
      ok ? bytes(s.log_bytes + s.table_bytes) : '-',
      ok ? bytes(s.memory_rss_bytes) : '-',
      String(node.replicas),
      ok ? String(s.leaders) : '-',
      access.operator_write ? nodeActions(node.name, node.state, latest, result, refresh) : '',
    ]};
  });
}

/** The node's buttons. What a button says when pressed is read from the latest status then. */
function nodeActions(name, state, latest, result, refresh) {
  const path = (what) => `/v1/cluster/nodes/${encodeURIComponent(name)}/${what}`;
  const buttons = [];
  if (state === 'active') {
    buttons.push(el('button', {
      type: 'button', class: 'danger', 'aria-label': `Drain ${name}`, 'data-action': 'drain',
      onclick: () => {
        const status = latest.status;
        const node = status.nodes.find((n) => n.name === name);
        const others = status.nodes.filter((n) => n.state === 'active' && n.name !== name).length;
        return operate(result, refresh, `Drain ${name}?`,
          `Node ${name}'s ${node ? node.replicas : 'every'} replica(s) move to the other ${others} active node(s), ` +
          'its leaderships and metadata vote are handed over, then it is marked removed and stops by ' +
          'itself (exit status 3). Its data directory cannot be used again. A drain can be cancelled ' +
          'until it finishes.',
          'Drain', path('remove'), removal);
      },
    }, 'Drain'));
  }
  if (state === 'draining') {
    buttons.push(el('button', {
      type: 'button', 'aria-label': `Cancel the drain of ${name}`, 'data-action': 'cancel-drain',
      onclick: () => operate(result, refresh, `Cancel the drain of ${name}?`,
        `Node ${name} becomes active again and keeps the replicas it still holds; moves away ` +
        'from it that are still catching up are given up.',
        'Cancel the drain', path('cancel-drain'), removal),
    }, 'Cancel drain'));
  }
  if (state !== 'removed') {
    buttons.push(el('button', {
      type: 'button', class: 'danger', 'aria-label': `Remove ${name} by force`, 'data-action': 'force',
      onclick: () => operate(result, refresh, `Remove ${name} by force?`,
        `Only for a node that is gone for good: ${name} is marked removed at once, without ` +
        'handing anything over, and each shard it held gets a new replica built from the others. ' +
        'Shards that had lost their quorum with it cannot be repaired this way. Its name can ' +
        'never be used again.',
        'Remove by force', `${path('remove')}?force=true`, removal),
    }, 'Remove…'));
  }
  return el('span', {class: 'buttons'}, buttons);
}

/** A removal's answer: the server's message, and the shards left without a quorum. */
function removal(answer) {
  const lost = answer.lost_quorum ?? [];
  const said = /[.!]$/.test(answer.message) ? answer.message : `${answer.message}.`;
  return [said, lost.length === 0 ? ''
    : el('span', {class: 'lost-quorum', id: 'lost-quorum', 'data-shards': lost.join(',')},
      ` Shards left without a quorum: ${lost.join(', ')}.`)];
}

/**
 * Asks for confirmation, then POSTs `path`; shows the server's own message either way (a
 * refusal is the server's decision, in its words). `describe` turns an answer into what is
 * shown (by default its `message`).
 */
export async function operate(result, refresh, title, text, action, path, describe) {
  if (!(await confirmAction(title, text, action))) return;
  try {
    const answer = await json(path, {method: 'POST', timeoutMs: 30000});
    const said = describe ? describe(answer)
      : answer && answer.message ? answer.message : `${action}: done`;
    fill(result, message('ok', said));
  } catch (e) {
    const status = e instanceof ApiError && e.status ? ` (HTTP ${e.status})` : '';
    fill(result, message('error', `Refused${status}: ${e.message}`));
  }
  refresh();
}
