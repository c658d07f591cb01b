// Hostile clients against one `rkv serve` while honest greedy clients run (issue 31): every input
// that once took the server down or exhausted it, sent over raw sockets. The server must never
// die, every honest client must get byte-for-byte the text it gets alone, /health must answer 200
// within 1 s throughout, the server's RSS after the run must be within 1.5x of before, and every
// hostile request must get the status docs/SERVER.md ("What hostile input gets") documents.
//
// Run by ctest (ServerClients.HostileClients): node --test tests/server/hostile_clients.mjs
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { connect } from 'node:net';
import { after, before, test } from 'node:test';
import { postJson, sleep, sseEvents, startServer, testPrompts } from './lib.mjs';

const HEADER_TIMEOUT_S = 3;
const MAX_TOKENS = 120;
const SLOWLORIS = 130;

let server;

before(async () => {
  server = await startServer({ args: ['--header-timeout', String(HEADER_TIMEOUT_S), '--kv-memory', '64MiB'] });
});
after(async () => {
  if (!server) return;
  const { code, signal } = await server.stop();
  assert.deepEqual({ code, signal }, { code: 0, signal: null }, `clean exit on SIGTERM; stderr:\n${server.stderr()}`);
});

const rssKiB = () => {
  const status = readFileSync(`/proc/${server.child.pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+) kB/.exec(status)[1]);
};

// Opens a connection, writes `chunks` (strings or Buffers; functions are awaited between writes),
// half-closes unless `keepOpen`, and resolves with everything the server sent until it closed
// (or `timeoutMs` passed): { text, error }.
function raw(chunks, { timeoutMs = 10_000, keepOpen = false } = {}) {
  return new Promise((resolve) => {
    const socket = connect(server.port, '127.0.0.1');
    const received = [];
    let error = null;
    let done = false;
    const finish = () => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      socket.destroy();
      resolve({ text: Buffer.concat(received).toString('latin1'), error });
    };
    const timer = setTimeout(finish, timeoutMs);
    socket.on('data', (d) => received.push(d));
    socket.on('error', (e) => {
      error = e.code || String(e);
      finish();
    });
    socket.on('close', finish);
    socket.on('connect', async () => {
      for (const c of chunks) {
        if (done) return;
        if (typeof c === 'function') await c(socket);
        else socket.write(c);
      }
      if (!keepOpen && !done) socket.end();
    });
  });
}

const statusOf = (text) => {
  const m = /^HTTP\/1\.1 (\d{3}) /.exec(text);
  return m ? Number(m[1]) : 0;
};
const statuses = (text) => [...text.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map((m) => Number(m[1]));
const bodyOf = (text) => JSON.parse(text.slice(text.indexOf('\r\n\r\n') + 4));

const post = (path, body, extra = '') => {
  const bytes = Buffer.isBuffer(body) ? body : Buffer.from(body, 'latin1');
  return [
    Buffer.concat([
      Buffer.from(`POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n${extra}Content-Length: ${bytes.length}\r\nConnection: close\r\n\r\n`),
      bytes,
    ]),
  ];
};

// A body with a raw 0xFF byte where `marker` is.
const withFF = (json) => Buffer.concat(json.split('@@').flatMap((part, i) => (i ? [Buffer.from([0xff]), Buffer.from(part)] : [Buffer.from(part)])));

// The hostile inputs and what each must get: status, and the error's param where one is named.
const HOSTILE = [
  { name: 'GET /%ff', send: () => ['GET /%ff HTTP/1.1\r\nHost: x\r\n\r\n'], status: 400 },
  { name: '0xFF in prompt', send: () => post('/v1/completions', withFF('{"prompt": "1:a@@"}')), status: 400, param: 'prompt' },
  { name: '0xFF in a stop string', send: () => post('/v1/completions', withFF('{"prompt": "1:a", "stop": "@@"}')), status: 400, param: 'stop' },
  { name: '0xFF in a role', send: () => post('/v1/chat/completions', withFF('{"messages": [{"role": "@@", "content": "a"}]}')), status: 400, param: 'messages[0].role' },
  { name: '0xFF in model', send: () => post('/v1/completions', withFF('{"prompt": "1:a", "model": "@@"}')), status: 400, param: 'model' },
  { name: '0xFF in kv.method', send: () => post('/v1/completions', withFF('{"prompt": "1:a", "kv": {"method": "@@"}}')), status: 400, param: 'kv.method' },
  { name: "0xFF in /tokenize's content", send: () => post('/tokenize', withFF('{"content": "@@"}')), status: 400, param: 'content' },
  { name: 'think_only as a string', send: () => post('/v1/completions', '{"prompt": "1:a", "kv": {"method": "rkv", "think_only": "yes"}}'), status: 400, param: 'kv.think_only' },
  {
    name: 'two different Content-Length headers',
    send: () => ['POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 16\r\nContent-Length: 17\r\n\r\n{"content": "a"}'],
    status: 400,
  },
  { name: 'Transfer-Encoding: gzip', send: () => ['POST /tokenize HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\nxx'], status: 501 },
  { name: 'a NUL byte in Authorization', send: () => ['GET /v1/models HTTP/1.1\r\nAuthorization: Bearer a\0b\r\n\r\n'], status: 400 },
  { name: '100 KiB of headers', send: () => [`GET /health HTTP/1.1\r\nX-Big: ${'a'.repeat(100 << 10)}\r\n\r\n`], status: 431 },
  { name: 'a malformed request line', send: () => ['GET\r\n\r\n'], status: 400 },
  {
    name: 'a chunked body of 256 MiB',
    // Chunks of 1 MiB until the server answers; it must answer long before the end.
    send: () => [
      'POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n',
      async (socket) => {
        const chunk = Buffer.concat([Buffer.from('100000\r\n'), Buffer.alloc(1 << 20, 0x61), Buffer.from('\r\n')]);
        let answered = false;
        socket.once('data', () => (answered = true));
        for (let i = 0; i < 256 && !answered && !socket.destroyed; ++i) {
          if (!socket.write(chunk)) await new Promise((r) => { socket.once('drain', r); socket.once('close', r); setTimeout(r, 2000); });
        }
        assert.ok(answered || socket.destroyed, 'the server answered before the 256 MiB were sent');
      },
    ],
    status: 413,
  },
];

test('hostile clients beside honest ones', { timeout: 240_000 }, async () => {
  const prompts = testPrompts(4);
  const honest = (i, stream) => ({ prompt: prompts[i % prompts.length], temperature: 0, max_tokens: MAX_TOKENS, stream });
  // What each honest request gives alone.
  const alone = [];
  for (let i = 0; i < prompts.length; ++i) {
    const r = await postJson(`${server.url}/v1/completions`, honest(i, false));
    assert.equal(r.status, 200, r.text);
    alone.push(r.json.choices[0].text);
  }
  const rssBefore = rssKiB();

  // /health every 100 ms, each answer within 1 s.
  let watching = true;
  const health = { checks: 0, worstMs: 0, failures: [] };
  const watcher = (async () => {
    while (watching) {
      const t0 = Date.now();
      const status = await fetch(`${server.url}/health`, { signal: AbortSignal.timeout(1000) })
        .then((r) => r.status)
        .catch((e) => String(e));
      const ms = Date.now() - t0;
      health.checks += 1;
      health.worstMs = Math.max(health.worstMs, ms);
      if (status !== 200 || ms > 1000) health.failures.push({ status, ms });
      await sleep(100);
    }
  })();

  // Honest clients, streaming and not, for as long as the hostile ones run.
  let hostileDone = false;
  const honestResults = [];
  const honestClients = [0, 1, 2, 3].map(async (c) => {
    for (let round = 0; !hostileDone || round < 2; ++round) {
      const i = c + round;
      const stream = (c + round) % 2 === 1;
      const response = await fetch(`${server.url}/v1/completions`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify(honest(i, stream)),
        signal: AbortSignal.timeout(120_000),
      });
      assert.equal(response.status, 200);
      let text = '';
      if (stream) {
        for await (const event of sseEvents(response.body)) {
          if (event === '[DONE]') break;
          text += JSON.parse(event).choices[0].text;
        }
      } else {
        text = (await response.json()).choices[0].text;
      }
      honestResults.push({ i, stream, ok: text === alone[i % prompts.length] });
    }
  });

  // Slowloris: connections that send a header line every second and never finish.
  const slow = Array.from({ length: SLOWLORIS }, () =>
    raw(
      [
        'GET /health HTTP/1.1\r\n',
        ...Array.from({ length: 30 }, () => async (socket) => {
          await sleep(1000);
          if (!socket.destroyed) socket.write('X-Slow: 1\r\n');
        }),
      ],
      { timeoutMs: (HEADER_TIMEOUT_S + 5) * 1000, keepOpen: true },
    ),
  );

  // Each hostile input, and a burst of 32 connections at once (the listen backlog).
  const results = [];
  for (const h of HOSTILE) {
    const r = await raw(h.send(), { timeoutMs: 30_000 });
    results.push({ h, r });
  }
  const burst = await Promise.all(Array.from({ length: 32 }, () => raw(['GET /health HTTP/1.1\r\nConnection: close\r\n\r\n'])));
  // Three pipelined requests on one connection get three answers, in order.
  const pipelined = await raw([
    'GET /health HTTP/1.1\r\n\r\nPOST /tokenize HTTP/1.1\r\nContent-Length: 16\r\n\r\n{"content": "a"}GET /nothing HTTP/1.1\r\nConnection: close\r\n\r\n',
  ]);
  // Large requests that are all refused must not ratchet memory up: 12 prompts of 15 MiB.
  const big = [];
  for (let i = 0; i < 12; ++i) {
    big.push(await raw(post('/v1/completions', JSON.stringify({ prompt: 'a'.repeat(15 << 20) })), { timeoutMs: 30_000 }));
  }
  const slowResults = await Promise.all(slow);
  hostileDone = true;
  await Promise.all(honestClients);
  watching = false;
  await watcher;

  assert.ok(server.alive(), `the server died:\n${server.stderr()}`);
  for (const { h, r } of results) {
    assert.equal(statusOf(r.text), h.status, `${h.name}: got ${r.text.slice(0, 300)} (${r.error})`);
    const error = bodyOf(r.text).error;
    assert.ok(typeof error.message === 'string' && error.message.length > 0, h.name);
    if (h.param) assert.equal(error.param, h.param, `${h.name}: ${JSON.stringify(error)}`);
  }
  for (const b of burst) assert.equal(statusOf(b.text), 200, `burst: ${b.text.slice(0, 100)} (${b.error})`);
  assert.deepEqual(statuses(pipelined.text), [200, 200, 404], pipelined.text);
  for (const b of big) assert.equal(statusOf(b.text), 400, b.text.slice(0, 300));
  for (const s of slowResults) assert.equal(statusOf(s.text), 408, `slowloris: ${s.text.slice(0, 200)} (${s.error})`);
  assert.ok(honestResults.length >= 8, `honest requests: ${honestResults.length}`);
  for (const h of honestResults) assert.ok(h.ok, `honest request ${h.i} (stream ${h.stream}) differs from alone`);
  assert.deepEqual(health.failures, [], `/health: ${JSON.stringify(health)}`);
  assert.ok(health.checks > 20, `/health checked ${health.checks} times`);
  // Memory is given back (measured once the allocator has had its moment).
  await sleep(200);
  const rssAfter = rssKiB();
  // Under a sanitizer the allocator is the sanitizer's, which keeps freed blocks in quarantine
  // by design (256 MiB under ASan): there the figure is printed, not held to the bound.
  if (!process.env.RKV_SANITIZED) {
    assert.ok(rssAfter <= 1.5 * rssBefore, `RSS ${rssBefore} KiB before, ${rssAfter} KiB after`);
  }
  console.log(`hostile clients: /health ${health.checks} checks, worst ${health.worstMs} ms; RSS ${rssBefore} -> ${rssAfter} KiB; ${honestResults.length} honest requests identical`);
});
