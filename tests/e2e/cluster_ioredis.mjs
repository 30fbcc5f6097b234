// An ioredis 5 Cluster session against a tally cluster, run by test_cluster_clients.py:
//   IOREDIS_DIR=<examples/node> TALLY_PORTS=p1,p2,p3 SESSION=<json> MODE=session|replicas \
//     node cluster_ioredis.mjs
// ioredis comes from examples/node/node_modules (npm ci there, `make deps`). The session's
// keys and amounts come from the test (SESSION: {incrby: [[key, amount], ...], same_slot:
// [k1, k2], cross_slot: [k1, k2]}). MODE=session: INCRBY, GET, MGET in one slot and across
// slots, MULTI/EXEC, CLUSTER KEYSLOT; MODE=replicas: GET of the incrby keys through a
// client with scaleReads "slave". Prints one JSON line with every reply (an error as
// {error: message}); the test judges them.
import { createRequire } from 'node:module';
import path from 'node:path';

const require = createRequire(path.join(process.env.IOREDIS_DIR, 'package.json'));
const Redis = require('ioredis');

const ports = process.env.TALLY_PORTS.split(',').map(Number);
const session = JSON.parse(process.env.SESSION);
const nodes = [{ host: '127.0.0.1', port: ports[0] }];
const options = { slotsRefreshTimeout: 5000, redisOptions: { commandTimeout: 10000 } };

// Bounded: the test waits for this process, so it must end.
setTimeout(() => {
  console.error('cluster_ioredis.mjs: still running after 60s');
  process.exit(3);
}, 60000).unref();

async function settle(promise) {
  try {
    return await promise;
  } catch (e) {
    return { error: e.message };
  }
}

const out = {};
if (process.env.MODE === 'replicas') {
  // Reads from replicas (READONLY on the standby connections).
  const replicas = new Redis.Cluster(nodes, { ...options, scaleReads: 'slave' });
  out.replica_get = [];
  for (const [key] of session.incrby) out.replica_get.push(await settle(replicas.get(key)));
  await replicas.quit();
  console.log(JSON.stringify(out));
  process.exit(0);
}

const cluster = new Redis.Cluster(nodes, options);
out.incrby = [];
for (const [key, amount] of session.incrby) {
  out.incrby.push(await settle(cluster.incrby(key, amount)));
}
out.get = [];
for (const [key] of session.incrby) out.get.push(await settle(cluster.get(key)));
out.mget = await settle(cluster.mget(...session.same_slot));
out.crossslot = await settle(cluster.mget(...session.cross_slot));
out.multi = await settle(cluster.multi()
  .incrby(session.same_slot[0], 10).incrby(session.same_slot[1], 20).exec());
out.keyslot = await settle(cluster.cluster('KEYSLOT', session.same_slot[0]));
await cluster.quit();
console.log(JSON.stringify(out));
