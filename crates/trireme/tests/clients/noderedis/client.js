// node-redis 5 with its defaults (its cluster client, discovering slots from the node it is
// given) against a Trireme cluster: strings, many commands in flight at once (node-redis
// pipelines them on each connection), MULTI/EXEC on keys of one slot, and a sorted set.
//
// Usage: node client.js HOST:PORT
//
// Prints one JSON line of what it saw and exits 0 only if every check held.
import { createCluster } from 'redis';

const [host, port] = process.argv[2].split(':');
const cluster = createCluster({ rootNodes: [{ url: `redis://${host}:${port}` }] });
const failures = [];
const check = (what, ok, detail) => {
  if (!ok) failures.push(`${what}: ${JSON.stringify(detail)}`);
};

await cluster.connect();
check('set', (await cluster.set('node:k', 'v')) === 'OK', 'not OK');
check('get', (await cluster.get('node:k')) === 'v', 'wrong value');
check('get missing is null', (await cluster.get('node:missing')) === null, 'not null');
check('append', (await cluster.append('node:k', 'w')) === 2, 'wrong length');
check('getdel', (await cluster.getDel('node:k')) === 'vw', 'wrong value');

// 200 INCRs in flight at once over 8 keys: node-redis pipelines them.
const incrs = await Promise.all(
  Array.from({ length: 200 }, (_, i) => cluster.incr(`node:counter:${i % 8}`)),
);
check('incrs in flight', Math.max(...incrs) === 25, Math.max(...incrs));

// A transaction on keys of one slot.
const replies = await cluster
  .multi()
  .set('{node}a', '1')
  .incr('{node}a')
  .get('{node}a')
  .exec();
check('multi/exec', JSON.stringify(replies) === JSON.stringify(['OK', 2, '2']), replies);

// A sorted set: a leaderboard read back with scores.
check('zAdd', (await cluster.zAdd('node:board', [
  { score: 2, value: 'b' }, { score: 1.5, value: 'a' }, { score: 3, value: 'c' },
])) === 3, 'wrong count');
const board = await cluster.zRangeWithScores('node:board', 0, -1, { REV: true });
check('zRangeWithScores', JSON.stringify(board) === JSON.stringify([
  { value: 'c', score: 3 }, { value: 'b', score: 2 }, { value: 'a', score: 1.5 },
]), board);
check('zScore', (await cluster.zScore('node:board', 'a')) === 1.5, 'wrong score');
await cluster.del('node:board');

await cluster.close();
console.log(JSON.stringify({ failures, incrs: incrs.length, replies }));
process.exit(failures.length === 0 ? 0 : 1);
