// mixedbench.mjs PORT [BATCHES] - one ioredis client sends batches of 200
// commands alternating EVALSHA and GET (all written before any reply is
// read, as an application awaiting Promise.all does) to PORT. Prints the
// median milliseconds per batch, over BATCHES (default 50) after a warm-up.
// Driven by tools/bench.sh (section 9); asserts nothing but the replies.
import Redis from 'ioredis';

const port = Number(process.argv[2]);
const batches = Number(process.argv[3] || 50);
const script = "return redis.call('INCR', KEYS[1])";

const c = new Redis({ host: '127.0.0.1', port, maxRetriesPerRequest: 1 });
const sha = await c.script('LOAD', script);

async function batch() {
  const ops = [];
  for (let i = 0; i < 200; i++)
    ops.push(i % 2 === 0 ? c.evalsha(sha, 1, 'mixed:n') : c.get('mixed:n'));
  const got = await Promise.all(ops);
  for (let i = 1; i < 200; i += 2)
    if (Number(got[i]) !== Number(got[i - 1]))
      throw new Error(`GET after the INCR script saw ${got[i]}, the script ${got[i - 1]}`);
}

for (let i = 0; i < 10; i++) await batch();
const ms = [];
for (let i = 0; i < batches; i++) {
  const t0 = process.hrtime.bigint();
  await batch();
  ms.push(Number(process.hrtime.bigint() - t0) / 1e6);
}
ms.sort((a, b) => a - b);
console.log(ms[Math.floor(ms.length / 2)].toFixed(3));
await c.quit();
