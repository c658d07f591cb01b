// Graceful drain and the load-balancer agent of `rkv serve` (docs/DEPLOY.md): on SIGTERM new
// completions and /health get 503 (code draining), the agent says "drain", every accepted request
// runs to its end and the server exits 0; a second SIGTERM, or --drain-timeout, ends what is left
// with the shutting_down error instead.
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { test } from 'node:test';
import { postJson, sleep, startServer } from './lib.mjs';

// The cap holds one long full-cache request at a time (an 1800-token one is 5.4 MiB, a 600-token
// one 1.8 MiB), so six of them queue. Under a sanitizer (RKV_SANITIZED) they are a third as long.
const SANITIZED = Boolean(process.env.RKV_SANITIZED);
const ARGS = ['--kv-memory', SANITIZED ? '2MiB' : '8MiB', '--agent-port', '0'];
const LONG = { prompt: '1:a\n', temperature: 0, max_tokens: SANITIZED ? 600 : 1800, ignore_eos: true };

const agentSays = (port) =>
  new Promise((resolve, reject) => {
    const s = connect(port, '127.0.0.1');
    let out = '';
    s.on('data', (d) => (out += d));
    s.on('close', () => resolve(out));
    s.on('error', reject);
  });

const waitInFlight = async (url, n) => {
  for (let i = 0; i < 500; ++i) {
    const text = await (await fetch(`${url}/metrics`)).text();
    const m = /^rkv_requests_in_flight (\d+)/m.exec(text);
    if (m && Number(m[1]) >= n) return;
    await sleep(10);
  }
  throw new Error(`fewer than ${n} requests in flight`);
};

test('SIGTERM drains: new requests get 503, accepted ones finish, exit 0', { timeout: 120_000 }, async () => {
  const server = await startServer({ args: ARGS });
  assert.match(await agentSays(server.agentPort), /^ready up (\d+)%\n$/);
  const accepted = Array.from({ length: 6 }, () => postJson(`${server.url}/v1/completions`, LONG, { timeoutMs: 110_000 }));
  await waitInFlight(server.url, 6);
  server.child.kill('SIGTERM');
  await sleep(100);
  const refused = await postJson(`${server.url}/v1/completions`, { prompt: '1:a\n', max_tokens: 4 });
  assert.equal(refused.status, 503);
  assert.equal(refused.json.error.code, 'draining');
  assert.equal(refused.headers.get('retry-after'), '1');
  const health = await fetch(`${server.url}/health`);
  assert.equal(health.status, 503);
  assert.equal((await health.json()).status, 'draining');
  assert.equal(await agentSays(server.agentPort), 'drain\n');
  for (const r of await Promise.all(accepted)) {
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.usage.completion_tokens, LONG.max_tokens);
    assert.equal(r.json.choices[0].finish_reason, 'length');
  }
  // The drained server exits on its own. A client can hold its whole answer a moment before the
  // server counts the request done, so a SIGTERM here would be a second signal.
  const { code, signal } = await server.awaitExit();
  assert.deepEqual({ code, signal }, { code: 0, signal: null });
  assert.match(server.stderr(), /drained: every accepted request was answered/);
});

for (const how of ['a second SIGTERM', '--drain-timeout']) {
  test(`${how} ends the requests still running with shutting_down`, { timeout: 120_000 }, async () => {
    const server = await startServer({ args: how === '--drain-timeout' ? [...ARGS, '--drain-timeout', '0.3'] : ARGS });
    const accepted = Array.from({ length: 6 }, () => postJson(`${server.url}/v1/completions`, LONG, { timeoutMs: 110_000 }));
    await waitInFlight(server.url, 6);
    server.child.kill('SIGTERM');
    if (how === 'a second SIGTERM') {
      await sleep(300);
      server.child.kill('SIGTERM');
    }
    const results = await Promise.all(accepted);
    // The first may have finished; at least the queued ones end with the error object (the status
    // line was sent already, so it comes as the body).
    const ended = results.filter((r) => r.json && r.json.error);
    assert.ok(ended.length >= 1, JSON.stringify(results.map((r) => r.text.slice(0, 80))));
    for (const r of ended) assert.equal(r.json.error.code, 'shutting_down');
    const { code, signal } = await server.stop();
    assert.deepEqual({ code, signal }, { code: 0, signal: null });
    assert.match(server.stderr(), how === '--drain-timeout' ? /the drain timeout passed/ : /a second signal/);
  });
}
