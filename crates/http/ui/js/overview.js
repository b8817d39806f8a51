// Overview: the cluster (name, epoch, metadata leader), anything that needs attention, and
// every node with its labels, version, health, uptime, disk, memory, replicas and leaders,
// with the operations on nodes (drain, cancel a drain, remove a dead node).

import {ApiError, every, fromNode, json} from './api.js';
import {bytes, confirmAction, duration, el, fill, message, table} from './dom.js';

/** The node summaries of the last round, by node name, for the shards view too. */
export async function gatherNodes(status) {
  const summaries = new Map();
  await Promise.all(status.nodes
    .filter((n) => n.state !== 'removed' && n.http)
    .map(async (n) => {
      try {
        summaries.set(n.name, await fromNode(n.http, '/v1/ui/node'));
      } catch (e) {
        summaries.set(n.name, {error: e.message});
      }
    }));
  return summaries;
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
    if (!summary.healthy) {
      const why = !summary.storage_ok ? 'its storage failed a sync' : 'a shard it holds has no leader';
      out.push(`Node ${node.name} reports itself unavailable: ${why}.`);
    }
    const free = summary.disk_free_bytes;
    const floor = summary.disk_min_free_bytes;
    if (free !== null && floor > 0 && free < 2 * floor) {
      out.push(`Node ${node.name}'s disk is filling: ${bytes(free)} free; writes stop below ${bytes(floor)}.`);
    }
  }
  return out;
}

export function render(container, {access}) {
  const heading = el('h1', {}, 'Overview');
  const cluster = el('div', {id: 'cluster'});
  const warningBox = el('div', {id: 'warnings'});
  const nodes = el('div', {id: 'nodes'});
  const result = el('div', {id: 'ops-result'});
  container.append(heading, cluster, warningBox, result, nodes);
  let marked = false;

  const refresh = async () => {
    let status;
    try {
      status = await json('/v1/cluster/status');
    } catch (e) {
      fill(cluster, message('error', e.message));
      return;
    }
    const summaries = await gatherNodes(status);
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
    fill(nodes, nodeTable(status, summaries, access, result, refresh));
    if (!marked) {
      marked = true;
      performance.mark('overview-rendered');
    }
  };
  return every(2000, refresh);
}

function nodeTable(status, summaries, access, result, refresh) {
  const byName = [...status.nodes].sort((a, b) => a.name.localeCompare(b.name, 'en', {numeric: true}));
  const rows = byName.map((node) => {
    const s = summaries.get(node.name);
    const ok = s && !s.error;
    const health = node.state === 'removed' ? '-'
      : !ok ? 'no answer' : s.healthy ? 'ok' : 'unavailable';
    const version = node.version ? `${node.version.build}/${node.version.protocol}` : '-';
    let state = node.state;
    if (node.drain) state += ` (${node.drain.replicas_left} replica(s) left to move)`;
    return [
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
      access.operator_write ? nodeActions(node, status, result, refresh) : '',
    ];
  });
  return table(`Nodes (${status.nodes.length})`,
    ['Node', 'State', 'Region', 'Zone', 'Rack', 'Version', 'Health', 'Uptime', 'Disk',
      'Data on disk', 'Memory', 'Replicas', 'Leaders', 'Operations'],
    rows, {id: 'node-table'});
}

function nodeActions(node, status, result, refresh) {
  const buttons = [];
  const others = status.nodes.filter((n) => n.state === 'active' && n.name !== node.name).length;
  if (node.state === 'active') {
    buttons.push(el('button', {
      type: 'button', class: 'danger', 'aria-label': `Drain ${node.name}`, 'data-action': 'drain',
      onclick: () => operate(result, refresh, `Drain ${node.name}?`,
        `Node ${node.name}'s ${node.replicas} replica(s) move to the other ${others} active node(s), ` +
        'its leaderships and metadata vote are handed over, then it is marked removed and stops by ' +
        'itself (exit status 3). Its data directory cannot be used again. A drain can be cancelled ' +
        'until it finishes.',
        'Drain', `/v1/cluster/nodes/${encodeURIComponent(node.name)}/remove`),
    }, 'Drain'));
  }
  if (node.state === 'draining') {
    buttons.push(el('button', {
      type: 'button', 'aria-label': `Cancel the drain of ${node.name}`, 'data-action': 'cancel-drain',
      onclick: () => operate(result, refresh, `Cancel the drain of ${node.name}?`,
        `Node ${node.name} becomes active again and keeps the replicas it still holds; moves away ` +
        'from it that are still catching up are given up.',
        'Cancel the drain', `/v1/cluster/nodes/${encodeURIComponent(node.name)}/cancel-drain`),
    }, 'Cancel drain'));
  }
  if (node.state !== 'removed') {
    buttons.push(el('button', {
      type: 'button', class: 'danger', 'aria-label': `Remove ${node.name} by force`, 'data-action': 'force',
      onclick: () => operate(result, refresh, `Remove ${node.name} by force?`,
        `Only for a node that is gone for good: ${node.name} is marked removed at once, without ` +
        'handing anything over, and each shard it held gets a new replica built from the others. ' +
        'Shards that had lost their quorum with it cannot be repaired this way. Its name can ' +
        'never be used again.',
        'Remove by force', `/v1/cluster/nodes/${encodeURIComponent(node.name)}/remove?force=true`),
    }, 'Remove…'));
  }
  return el('span', {class: 'buttons'}, buttons);
}

/**
 * Asks for confirmation, then POSTs `path`; shows the server's own message either way (a
 * refusal is the server's decision, in its words).
 */
export async function operate(result, refresh, title, text, action, path) {
  if (!(await confirmAction(title, text, action))) return;
  try {
    const answer = await json(path, {method: 'POST', timeoutMs: 30000});
    const said = answer && answer.message ? answer.message : `${action}: done`;
    fill(result, message('ok', said));
  } catch (e) {
    const status = e instanceof ApiError && e.status ? ` (HTTP ${e.status})` : '';
    fill(result, message('error', `Refused${status}: ${e.message}`));
  }
  refresh();
}
