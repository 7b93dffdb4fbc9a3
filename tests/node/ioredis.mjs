// ioredis.mjs SCENARIO - ioredis 6 (RESP3 by default) against sluice on
// $SLUICE_PORT. Prints one JSON line {"ok": true, ...}; throws otherwise.
// Driven by tests/integration/test_resp3.py.
import assert from 'node:assert/strict';
import Redis from 'ioredis';

import { runScenario, until } from './scenario.mjs';

const port = Number(process.env.SLUICE_PORT);

function connect(opts = {}) {
  return new Redis({ host: '127.0.0.1', port, maxRetriesPerRequest: 1, ...opts });
}

const scenarios = {
  // Default options speak RESP3 (HELLO 3 answered, no fallback); with
  // replyMapping 'resp3' maps and doubles keep their RESP3 shapes.
  async types() {
    const plain = connect();
    const hello = await plain.call('HELLO');
    assert.equal(hello.proto ?? hello[hello.indexOf('proto') + 1], 3);
    await plain.quit();
    const c = connect({ replyMapping: 'resp3' });
    await c.hset('ih', 'f', 'v');
    assert.deepEqual({ ...(await c.call('HGETALL', 'ih')) }, { f: 'v' });
    const cfg = await c.call('CONFIG', 'GET', 'maxmemory-policy');
    assert.ok(!Array.isArray(cfg), `CONFIG GET ${JSON.stringify(cfg)}`);
    assert.equal(cfg['maxmemory-policy'], 'noeviction');
    await c.zadd('z', 2.5, 'm');
    assert.equal(await c.call('ZSCORE', 'z', 'm'), 2.5);
    assert.equal(await c.get('nokey'), null);
    assert.deepEqual((await c.smembers('s')), []);
    await c.quit();
    return {};
  },

  // A subscribed connection runs GET/SET, as RESP3 allows.
  async pubsub() {
    const pub = connect();
    const sub = connect();
    const got = [];
    sub.on('message', (ch, m) => got.push([ch, m]));
    await sub.subscribe('ch');
    assert.equal(await sub.set('k', 'v'), 'OK');
    assert.equal(await sub.get('k'), 'v');
    assert.equal(await pub.publish('ch', 'hi'), 1);
    await until(() => got.length === 1, 'the message');
    assert.deepEqual(got, [['ch', 'hi']]);
    await sub.unsubscribe('ch');
    assert.equal(await sub.get('k'), 'v');
    await sub.quit();
    await pub.quit();
    return {};
  },
};

await runScenario(scenarios);
