// scenario.mjs - what the node client scripts (ioredis.mjs, noderedis.mjs)
// share: waiting for a condition, and running the scenario named on the
// command line (one JSON line {"ok": true, ...} on success; throws otherwise).

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Wait (up to 5 s) until PRED resolves truthy; WHAT names it in the error.
export async function until(pred, what) {
  for (let i = 0; i < 200; i++) {
    if (await pred()) return;
    await sleep(25);
  }
  throw new Error(`timed out waiting for ${what}`);
}

// Run SCENARIOS[process.argv[2]] and exit 0 after printing its result.
export async function runScenario(scenarios) {
  const name = process.argv[2];
  if (!scenarios[name]) throw new Error(`unknown scenario ${name}`);
  const out = await scenarios[name]();
  console.log(JSON.stringify({ ok: true, scenario: name, ...out }));
  process.exit(0);
}
