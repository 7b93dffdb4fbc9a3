// noderedis.mjs SCENARIO - node-redis (default options: RESP3) against
// sluice on $SLUICE_PORT; $REDIS_PORT is the Redis behind it, for checks
// made directly. Prints one JSON line {"ok": true, ...}; throws otherwise.
// Driven by tests/integration/test_resp3.py.
import assert from 'node:assert/strict';
import { createClient, BasicClientSideCache } from 'redis';

import { runScenario, until } from './scenario.mjs';

const url = `redis://127.0.0.1:${process.env.SLUICE_PORT}`;
const direct = `redis://127.0.0.1:${process.env.REDIS_PORT}`;

async function connect(opts = {}) {
  const c = createClient({ url, ...opts });
  c.on('error', (e) => { throw e; });
  await c.connect();
  return c;
}

const scenarios = {
  // Default options connect (HELLO 3) and RESP3 types come through.
  async types() {
    const c = await connect();
    await c.hSet('h', { f: 'v', g: 'w' });
    assert.deepEqual({ ...(await c.hGetAll('h')) }, { f: 'v', g: 'w' });
    const cfg = await c.configGet('maxmemory-policy');
    assert.equal(cfg['maxmemory-policy'], 'noeviction');
    await c.sAdd('s', ['a', 'b']);
    assert.deepEqual((await c.sMembers('s')).sort(), ['a', 'b']);
    await c.zAdd('z', { score: 1.5, value: 'm' });
    assert.equal(await c.zScore('z', 'm'), 1.5);
    assert.equal(await c.get('nokey'), null);
    assert.equal(await c.sendCommand(['EVAL', 'redis.setresp(3); return true', '0']), true);
    assert.equal(await c.sendCommand(['EVAL', 'redis.setresp(3); return false', '0']), false);
    // Raw replies keep their RESP3 shape: a map is an object, not a flat array.
    const raw = await c.sendCommand(['HGETALL', 'h']);
    assert.ok(!Array.isArray(raw), `HGETALL raw reply ${JSON.stringify(raw)}`);
    assert.equal(await c.clientId(), await c.sendCommand(['CLIENT', 'ID']));
    await c.close();
    return {};
  },

  // A subscribed RESP3 connection runs ordinary commands too.
  async pubsub() {
    const c = await connect();
    const sub = await connect();
    const got = [];
    await sub.subscribe('ch', (m, ch) => got.push([ch, m]));
    await sub.pSubscribe('p.*', (m, ch) => got.push([ch, m]));
    await c.set('k', 'v');
    assert.equal(await sub.get('k'), 'v');
    assert.equal(await sub.ping(), 'PONG');
    assert.equal(await c.publish('ch', 'one'), 1);
    assert.equal(await c.publish('p.x', 'two'), 1);
    await until(() => got.length === 2, 'two messages');
    assert.deepEqual(got, [['ch', 'one'], ['p.x', 'two']]);
    // Commands and messages interleaved on the subscribed connection.
    const gets = [];
    for (let i = 0; i < 50; i++) {
      gets.push(sub.incr('n'));
      c.publish('ch', `m${i}`);
    }
    assert.deepEqual(await Promise.all(gets), Array.from({ length: 50 }, (_, i) => i + 1));
    await until(() => got.length === 52, '50 more messages');
    assert.deepEqual(got.slice(2).map((x) => x[1]), Array.from({ length: 50 }, (_, i) => `m${i}`));
    await sub.unsubscribe('ch');
    await sub.pUnsubscribe('p.*');
    assert.equal(await c.publish('ch', 'gone'), 0);
    assert.equal(await sub.get('k'), 'v');
    await sub.close();
    await c.close();
    return {};
  },

  // Client-side caching: tracking on the client's own connection,
  // invalidations pushed in order with its replies.
  async cache() {
    const cache = new BasicClientSideCache({ ttl: 0, maxEntries: 0 });
    const c = await connect({ RESP: 3, clientSideCache: cache });
    const other = await connect();
    await other.set('ck', '1');
    assert.equal(await c.get('ck'), '1');
    assert.equal(await c.get('ck'), '1');
    assert.equal(cache.stats().hitCount, 1);
    await other.set('ck', '2');
    await until(() => cache.size() === 0, 'the invalidation');
    assert.equal(await c.get('ck'), '2');
    await c.close();
    await other.close();
    return { hits: cache.stats().hitCount };
  },

  // sluice's LOCK verbs in RESP3: token, nil (null), count.
  async lock() {
    const a = await connect();
    const b = await connect();
    const token = await a.sendCommand(['LOCK', 'lk', '5000']);
    assert.equal(typeof token, 'string');
    assert.equal(await b.sendCommand(['LOCK', 'lk', '5000']), null);
    assert.equal(await b.sendCommand(['LOCK', 'lk', '50', 'WAIT', '100']), null);
    assert.equal(await a.sendCommand(['RENEW', 'lk', '5000']), 'OK');
    assert.equal(await a.sendCommand(['UNLOCK', 'lk']), 0);
    assert.equal(typeof (await b.sendCommand(['LOCK', 'lk', '5000'])), 'string');
    await a.close();
    await b.close();
    return {};
  },

  // RESP2 and RESP3 clients at once get their own shapes, on separate
  // shared connections of sluice (Redis's CLIENT LIST says resp=2 / resp=3).
  async mixed() {
    const c3 = await connect();
    const c2 = await connect({ RESP: 2 });
    await c3.hSet('mh', { f: 'v' });
    const jobs = [];
    for (let i = 0; i < 200; i++) {
      jobs.push(c3.sendCommand(['HGETALL', 'mh']).then((r) => assert.ok(!Array.isArray(r))));
      jobs.push(c2.sendCommand(['HGETALL', 'mh']).then((r) => assert.deepEqual(r, ['f', 'v'])));
      jobs.push(c3.sendCommand(['GET', 'nokey']).then((r) => assert.equal(r, null)));
      jobs.push(c2.sendCommand(['GET', 'nokey']).then((r) => assert.equal(r, null)));
    }
    await Promise.all(jobs);
    // sluice's shared connections, as PROXY INFO names them.
    const info = String(await c2.sendCommand(['PROXY', 'INFO']));
    const shared = {};
    for (const m of info.matchAll(/^backend_(resp3_)?0:.*redis_id=(\d+)/gm)) shared[m[2]] = m[1] ? '3' : '2';
    const d = createClient({ url: direct, RESP: 2 });
    await d.connect();
    const list = await d.sendCommand(['CLIENT', 'LIST']);
    await d.close();
    const seen = {};
    for (const line of list.split('\n')) {
      const id = / ?id=(\d+) /.exec(' ' + line);
      if (id && shared[id[1]]) seen[id[1]] = / resp=(\d)/.exec(line)[1];
    }
    assert.deepEqual(seen, shared);
    assert.deepEqual(Object.values(shared).sort(), ['2', '3']);
    await c3.close();
    await c2.close();
    return {};
  },
};

await runScenario(scenarios);
