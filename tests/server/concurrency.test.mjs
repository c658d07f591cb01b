// 64 concurrent clients against one `rkv serve` whose KV memory cap fits only a few of them at
// once: a mix of endpoints, KV methods and budgets, streaming and not, with some clients sending
// malformed bodies and some hanging up mid-stream. The server must stay up, keep its KV bytes
// under the cap, cancel the abandoned requests, free every slot, and give every request the
// same greedy text it gives that request alone.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import OpenAI from 'openai';
import { postJson, readMetrics, sleep, sseEvents, startServer, testPrompts } from './lib.mjs';

// Half under a sanitizer (CMake sets RKV_SANITIZED there): every (method, streaming, chat) mix and
// both kinds of misbehaving client still occur.
const CLIENTS = process.env.RKV_SANITIZED ? 32 : 64;
const MAX_TOKENS = 600;
const REQUEST_TIMEOUT_MS = 150_000;  // per request; the whole test is bounded by its own timeout
// A fullkv slot for ~80 prompt tokens + 600 is ~2 MiB and a compressed one 0.5-0.9 MiB (3 KiB an
// entry for this model): 4 MiB holds one or two fullkv requests, or a handful of compressed ones.
const KV_MEMORY = '4MiB';
const METHODS = ['fullkv', 'rkv', 'snapkv', 'streamingllm', 'h2o', 'gkv'];
const BUDGETS = [48, 96, 160];
// A tenth of the clients misbehave: every 10th one, alternately a malformed body and a stream
// abandoned after a few chunks.
const MALFORMED = [
  '{"prompt": "1:a\\n", "max_tokens": 600',  // truncated JSON
  JSON.stringify({ prompt: '1:a\n', max_tokens: '600' }),  // wrong type
  JSON.stringify({ messages: [{ role: 'user', content: '1:a\n' }], kv: { method: 'rkv', budget: 8 } }),  // budget <= window
];
const ABORT_AFTER_CHUNKS = 3;

// The server of the describe block running now (one at a time: node:test runs them in order).
let server;

function withServer(args) {
  before(async () => {
    server = await startServer({ args });
  });
  after(async () => {
    if (!server) return;
    const { code, signal } = await server.stop();
    assert.deepEqual({ code, signal }, { code: 0, signal: null }, `clean exit on SIGTERM; stderr:\n${server.stderr()}`);
    server = undefined;
  });
}

// What client `i` does. Deterministic, so that the mix is the same on every run and every
// (method, streaming) pair occurs.
function plan(i, prompt) {
  if (i % 10 === 9) {
    const misbehaving = Math.floor(i / 10);
    if (misbehaving % 2 === 0) {
      const body = MALFORMED[(misbehaving / 2) % MALFORMED.length];
      const path = body.includes('messages') ? '/v1/chat/completions' : '/v1/completions';
      return { kind: 'malformed', path, body };
    }
    // A long generation (no end-of-sequence): still running when the client hangs up.
    return {
      kind: 'abort',
      path: '/v1/completions',
      body: { prompt, temperature: 0, max_tokens: 1500, ignore_eos: true, stream: true, kv: { method: 'rkv', budget: 96 } },
    };
  }
  const method = METHODS[i % METHODS.length];
  const kv = method === 'fullkv' ? { method } : { method, budget: BUDGETS[Math.floor(i / METHODS.length) % BUDGETS.length] };
  const stream = Math.floor(i / 2) % 2 === 0;
  const chat = Math.floor(i / 4) % 2 === 0;
  const body = { temperature: 0, max_tokens: MAX_TOKENS, kv };
  if (chat) body.messages = [{ role: 'user', content: prompt }];
  else body.prompt = prompt;
  if (stream) {
    body.stream = true;
    if (i % 3 === 0) body.stream_options = { include_usage: true };
  }
  return { kind: 'normal', path: chat ? '/v1/chat/completions' : '/v1/completions', body, chat, stream };
}

// Sends a normal request; returns { status, text, finish, kv, usage, error }.
async function send({ path, body, chat, stream }) {
  if (!stream) {
    const r = await postJson(`${server.url}${path}`, body, { timeoutMs: REQUEST_TIMEOUT_MS });
    if (r.status !== 200) return { status: r.status, error: r.text };
    const [choice] = r.json.choices;
    return {
      status: 200,
      text: chat ? choice.message.content : choice.text,
      finish: choice.finish_reason,
      kv: r.json.kv,
      usage: r.json.usage,
    };
  }
  const response = await fetch(`${server.url}${path}`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
  });
  if (response.status !== 200) return { status: response.status, error: await response.text() };
  const result = { status: 200, text: '', finish: null, kv: null, usage: null, done: false };
  for await (const data of sseEvents(response.body)) {
    assert.equal(result.done, false, 'nothing after [DONE]');
    if (data === '[DONE]') {
      result.done = true;
      continue;
    }
    const chunk = JSON.parse(data);
    if (chunk.usage) result.usage = chunk.usage;
    for (const choice of chunk.choices) {
      result.text += (chat ? choice.delta.content : choice.text) ?? '';
      if (choice.finish_reason) {
        assert.equal(result.finish, null, 'one finish_reason');
        result.finish = choice.finish_reason;
        result.kv = chunk.kv;
      }
    }
  }
  assert.ok(result.done, 'the stream ended with [DONE]');
  return result;
}

// Opens a stream, reads a few chunks and hangs up. Returns the number of chunks read.
async function abandon({ path, body }) {
  const controller = new AbortController();
  const response = await fetch(`${server.url}${path}`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify(body),
    signal: AbortSignal.any([controller.signal, AbortSignal.timeout(REQUEST_TIMEOUT_MS)]),
  });
  assert.equal(response.status, 200);
  let chunks = 0;
  try {
    for await (const data of sseEvents(response.body)) {
      assert.notEqual(data, '[DONE]', 'the stream must not finish before the client hangs up');
      if (++chunks === ABORT_AFTER_CHUNKS) {
        controller.abort();  // closes the connection
        break;
      }
    }
  } catch (error) {
    if (!controller.signal.aborted) throw error;
  }
  return chunks;
}

const malformed = ({ path, body }) => postJson(`${server.url}${path}`, body, { timeoutMs: REQUEST_TIMEOUT_MS });

// Polls /metrics every ~100 ms until stop() and keeps what the test asserts on.
function watchMetrics() {
  const seen = { samples: 0, overCap: [], maxWaiting: 0, maxRunning: 0, errors: [] };
  let running = true;
  const loop = (async () => {
    while (running) {
      try {
        const m = await readMetrics(server.url, { timeoutMs: 5_000 });
        seen.samples++;
        const inUse = m.get('rkv_kv_bytes_in_use');
        const cap = m.get('rkv_kv_bytes_cap');
        if (!(inUse <= cap)) seen.overCap.push({ inUse, cap });
        seen.maxWaiting = Math.max(seen.maxWaiting, m.get('rkv_requests_waiting'));
        seen.maxRunning = Math.max(seen.maxRunning, m.get('rkv_requests_running'));
      } catch (error) {
        seen.errors.push(String(error));
      }
      await sleep(100);
    }
  })();
  return {
    seen,
    stop: async () => {
      running = false;
      await loop;
    },
  };
}

describe('burst', () => {
  withServer(['--kv-memory', KV_MEMORY, '--queue-limit', '100']);

  test(`${CLIENTS} concurrent clients: cap respected, cancellations, same greedy output as alone`, { timeout: 240_000 }, async (t) => {
    const prompts = testPrompts(CLIENTS);
    assert.equal(prompts.length, CLIENTS);
    const plans = prompts.map((prompt, i) => plan(i, prompt));
    const initial = await readMetrics(server.url);

    const watcher = watchMetrics();
    const started = Date.now();
    const outcomes = await Promise.allSettled(
      plans.map((p) => (p.kind === 'normal' ? send(p) : p.kind === 'abort' ? abandon(p) : malformed(p))),
    );
    const burstSeconds = (Date.now() - started) / 1000;
    await watcher.stop();
    const { seen } = watcher;
    t.diagnostic(`burst: ${burstSeconds.toFixed(1)} s, ${seen.samples} metrics samples, ` +
      `most running ${seen.maxRunning}, most waiting ${seen.maxWaiting}`);

    assert.ok(server.alive(), `the server died during the burst:\n${server.stderr()}`);
    const failures = outcomes
      .map((o, i) => (o.status === 'rejected' ? `client ${i} (${plans[i].kind}): ${o.reason?.stack ?? o.reason}` : null))
      .filter(Boolean);
    assert.deepEqual(failures, []);

    // Every well-formed request succeeded; every malformed one got a 4xx OpenAI error object.
    for (const [i, p] of plans.entries()) {
      const value = outcomes[i].value;
      if (p.kind === 'normal') {
        assert.equal(value.status, 200, `client ${i}: ${value.error}`);
        assert.ok(['stop', 'length'].includes(value.finish), `client ${i}: finish_reason ${value.finish}`);
        assert.ok(value.text.length > 0, `client ${i}: empty text`);
        assert.equal(value.kv.method, p.body.kv.method);
      } else if (p.kind === 'malformed') {
        assert.ok(value.status >= 400 && value.status < 500, `client ${i}: HTTP ${value.status}`);
        assert.notEqual(value.status, 429, 'no 429: the queue limit is above the client count');
        assert.equal(typeof value.json?.error?.message, 'string', `client ${i}: ${value.text}`);
      } else {
        assert.equal(value, ABORT_AFTER_CHUNKS, `client ${i} read ${value} chunks before hanging up`);
      }
    }

    // The cap held at every sample, and it did make requests wait (else this test proves little).
    assert.ok(seen.samples >= 10, `only ${seen.samples} metrics samples`);
    assert.deepEqual(seen.errors, [], 'GET /metrics failed during the burst');
    assert.deepEqual(seen.overCap, [], 'rkv_kv_bytes_in_use went over rkv_kv_bytes_cap');
    assert.ok(seen.maxWaiting > 0, 'no request ever waited: the cap is too loose for this test');
    assert.ok(seen.maxRunning > 1, 'never more than one request running: no batching');

    // The abandoned requests are cancelled and their slots freed within a few engine steps.
    let m;
    for (let tries = 0; ; tries++) {
      m = await readMetrics(server.url);
      if (m.get('rkv_requests_running') === 0 && m.get('rkv_requests_waiting') === 0) break;
      assert.ok(tries < 100, 'requests still running 10 s after every client finished or hung up');
      await sleep(100);
    }
    const delta = (name) => m.get(name) - initial.get(name);
    const aborted = plans.filter((p) => p.kind === 'abort').length;
    const normal = plans.filter((p) => p.kind === 'normal').length;
    assert.equal(delta('rkv_requests_cancelled_total'), aborted, 'one cancellation per client that hung up');
    assert.equal(delta('rkv_requests_rejected_invalid_total'), plans.length - normal - aborted);
    assert.equal(delta('rkv_requests_rejected_busy_total'), 0);
    assert.equal(m.get('rkv_kv_bytes_in_use'), 0, 'every KV slot freed');
    assert.ok(m.get('rkv_kv_bytes_peak') > 0);
    assert.ok(m.get('rkv_kv_bytes_peak') <= m.get('rkv_kv_bytes_cap'), 'peak KV bytes over the cap');

    // Each successful request again, alone: the same greedy text, finish reason and KV work.
    const referenceStarted = Date.now();
    const mismatches = [];
    for (const [i, p] of plans.entries()) {
      if (p.kind !== 'normal') continue;
      const burst = outcomes[i].value;
      const alone = await send(p);
      assert.equal(alone.status, 200, `client ${i} alone: ${alone.error}`);
      const where = `client ${i} (${p.chat ? 'chat' : 'completions'}, ${p.stream ? 'stream' : 'whole'}, ${JSON.stringify(p.body.kv)})`;
      if (alone.text !== burst.text) {
        let at = 0;
        while (alone.text[at] === burst.text[at]) at++;
        mismatches.push(`${where}: texts differ from character ${at} (burst ${burst.text.length} chars, alone ${alone.text.length})`);
      }
      if (alone.finish !== burst.finish) mismatches.push(`${where}: finish ${burst.finish} in the burst, ${alone.finish} alone`);
      if (alone.kv.compressions !== burst.kv.compressions || alone.kv.kv_bytes !== burst.kv.kv_bytes) {
        mismatches.push(`${where}: kv ${JSON.stringify(burst.kv)} in the burst, ${JSON.stringify(alone.kv)} alone`);
      }
      if (burst.usage && alone.usage && burst.usage.completion_tokens !== alone.usage.completion_tokens) {
        mismatches.push(`${where}: ${burst.usage.completion_tokens} tokens in the burst, ${alone.usage.completion_tokens} alone`);
      }
    }
    t.diagnostic(`${normal} reference requests alone: ${((Date.now() - referenceStarted) / 1000).toFixed(1)} s`);
    assert.deepEqual(mismatches, []);

    // Still healthy, nothing left running, and it still serves. (A client has its whole answer a
    // moment before the engine retires the request, so the gauges are polled, as above.)
    assert.equal((await fetch(`${server.url}/health`)).status, 200);
    await waitForMetrics((x) => x.get('rkv_requests_running') === 0 && x.get('rkv_kv_bytes_in_use') === 0,
      'the last request to retire and free its KV slot');
    const last = await postJson(`${server.url}/v1/completions`, { prompt: prompts[0], temperature: 0, max_tokens: 50 });
    assert.equal(last.status, 200);
    assert.equal(last.json.usage.completion_tokens, 50);
    assert.ok(server.alive());
  });
});

// Polls /metrics until `ready(metrics)`; fails after `timeoutMs`.
async function waitForMetrics(ready, what, timeoutMs = 10_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const m = await readMetrics(server.url);
    if (ready(m)) return m;
    assert.ok(Date.now() < deadline, `timed out waiting for ${what}`);
    await sleep(10);
  }
}

describe('queue limit', () => {
  withServer(['--kv-memory', '8MiB', '--parallel', '1', '--queue-limit', '2']);

  test('beyond --queue-limit waiting requests: 429 with Retry-After; the queued ones are served', { timeout: 240_000 }, async () => {
    // Generations of 2000 tokens (about a second each in the release build, 13 s under ASan) so
    // that the queue stays full while the extra requests arrive. The three run one after another,
    // so each request's own timeout is the suite's generous one.
    const long = (i, stream = false) =>
      fetch(`${server.url}/v1/completions`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ prompt: `${i}:a\n`, temperature: 0, max_tokens: 2000, ignore_eos: true, stream }),
        signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
      }).then(async (r) => ({ status: r.status, headers: r.headers, text: await r.text() }));
    const initial = await readMetrics(server.url);

    const running = long(1);
    await waitForMetrics((m) => m.get('rkv_requests_running') === 1, 'the first request to run');
    const queued = [long(2), long(3, true)];
    await waitForMetrics((m) => m.get('rkv_requests_waiting') === 2, 'two requests waiting');

    // The queue is full: one more (streaming or not) is turned away at once.
    const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'none', maxRetries: 0, timeout: 10_000 });
    const [plain, streamed, sdk] = await Promise.allSettled([
      long(4),
      long(5, true),
      client.completions.create({ model: 'rkv', prompt: '6:a\n', max_tokens: 5 }),
    ]);
    for (const rejected of [plain.value, streamed.value]) {
      assert.equal(rejected.status, 429, rejected.text.slice(0, 200));
      assert.match(rejected.headers.get('retry-after') ?? '', /^[1-9][0-9]*$/, 'Retry-After: whole seconds');
      assert.match(rejected.headers.get('content-type'), /^application\/json\b/);
      assert.equal(typeof JSON.parse(rejected.text).error.message, 'string');
    }
    assert.equal(sdk.status, 'rejected');
    assert.ok(sdk.reason instanceof OpenAI.RateLimitError, String(sdk.reason));
    assert.equal(sdk.reason.status, 429);

    for (const r of await Promise.all([running, ...queued])) {
      assert.equal(r.status, 200, r.text.slice(0, 200));
    }
    const m = await waitForMetrics((x) => x.get('rkv_requests_running') === 0, 'the queue to drain');
    assert.equal(m.get('rkv_requests_rejected_busy_total') - initial.get('rkv_requests_rejected_busy_total'), 3);
    assert.equal(m.get('rkv_requests_waiting'), 0);
  });
});
