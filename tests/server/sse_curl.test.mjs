// The bytes `rkv serve` streams, as curl receives them: Server-Sent Events framing, headers and
// error statuses, checked without any client library in between.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { after, before, test } from 'node:test';
import { promisify } from 'node:util';
import { examplePrompt, postJson, readMetrics, sleep, startServer } from './lib.mjs';

const run = promisify(execFile);
let server;

before(async () => {
  // --parallel 1: a second request waits for the first one's slot (see the keep-alive test).
  server = await startServer({ args: ['--kv-memory', '8MiB', '--parallel', '1'] });
});

after(async () => {
  if (server) await server.stop();
});

// curl -sN -i: the status line and headers, then the body exactly as sent (curl undoes only the
// chunked transfer encoding). Returns { status, headers (lower-case names), body (a string) }.
async function curl(path, body) {
  const args = ['-sN', '-i', '--max-time', '60', '-H', 'Content-Type: application/json'];
  if (body !== undefined) args.push('--data-binary', typeof body === 'string' ? body : JSON.stringify(body));
  args.push(`${server.url}${path}`);
  const { stdout } = await run('curl', args, { encoding: 'buffer', maxBuffer: 64 << 20 });
  const raw = stdout.toString('utf8');
  const end = raw.indexOf('\r\n\r\n');
  assert.ok(end > 0, 'a header block');
  const [statusLine, ...headerLines] = raw.slice(0, end).split('\r\n');
  const headers = {};
  for (const line of headerLines) {
    const colon = line.indexOf(':');
    headers[line.slice(0, colon).toLowerCase()] = line.slice(colon + 1).trim();
  }
  return { status: Number(statusLine.split(' ')[1]), headers, body: raw.slice(end + 4) };
}

// Splits an SSE body into its events, asserting the framing byte for byte: each event is one
// `data: <json>` line or one `: comment` line followed by a blank line ("\n\n", no "\r"), and the
// stream ends with exactly `data: [DONE]\n\n`. Returns { events (parsed JSON), comments }.
function parseSse(body) {
  assert.ok(!body.includes('\r'), 'no carriage returns in the event stream');
  assert.ok(body.endsWith('\n\ndata: [DONE]\n\n'), `ends with [DONE]: ${JSON.stringify(body.slice(-200))}`);
  const blocks = body.split('\n\n');
  assert.equal(blocks.pop(), '', 'nothing after the last event');
  assert.equal(blocks.pop(), 'data: [DONE]');
  const events = [];
  let comments = 0;
  for (const block of blocks) {
    assert.ok(!block.includes('\n'), `one line per event: ${JSON.stringify(block)}`);
    if (block.startsWith(': ')) {
      comments++;
      continue;
    }
    assert.ok(block.startsWith('data: {'), `a data event: ${JSON.stringify(block)}`);
    events.push(JSON.parse(block.slice('data: '.length)));
  }
  return { events, comments };
}

function assertEventStreamHeaders(headers) {
  assert.match(headers['content-type'], /^text\/event-stream\b/);
  assert.equal(headers['content-length'], undefined, 'a stream has no length');
}

const prompt = examplePrompt();

test('chat stream: SSE framing, chunk order, same text as non-streamed', { timeout: 60_000 }, async () => {
  const request = {
    messages: [{ role: 'user', content: prompt }],
    temperature: 0,
    max_tokens: 600,
  };
  const { status, headers, body } = await curl('/v1/chat/completions', {
    ...request,
    stream: true,
    stream_options: { include_usage: true },
  });
  assert.equal(status, 200);
  assertEventStreamHeaders(headers);
  const { events } = parseSse(body);

  assert.ok(events.every((e) => e.object === 'chat.completion.chunk'));
  assert.ok(new Set(events.map((e) => e.id)).size === 1, 'one id for the whole stream');
  assert.deepEqual(events[0].choices, [
    { index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null },
  ]);
  // Then content deltas, then one chunk with the finish reason and kv, then usage alone.
  const usage = events.at(-1);
  assert.deepEqual(usage.choices, []);
  const finishing = events.at(-2);
  assert.equal(finishing.choices[0].finish_reason, 'stop');
  assert.equal(finishing.kv.method, 'fullkv');
  const deltas = events.slice(1, -2);
  assert.ok(deltas.length > 100);
  let text = '';
  for (const e of deltas) {
    assert.equal(e.choices.length, 1);
    assert.equal(e.choices[0].finish_reason, null);
    assert.deepEqual(Object.keys(e.choices[0].delta), ['content']);
    text += e.choices[0].delta.content;
  }

  const whole = await postJson(`${server.url}/v1/chat/completions`, request);
  assert.equal(whole.status, 200);
  assert.equal(text, whole.json.choices[0].message.content);
  assert.deepEqual(usage.usage, whole.json.usage);
});

test('completions stream with n: 2: both choices, each finished once', { timeout: 60_000 }, async () => {
  const { status, headers, body } = await curl('/v1/completions', {
    prompt,
    temperature: 0,
    max_tokens: 40,
    n: 2,
    stream: true,
  });
  assert.equal(status, 200);
  assertEventStreamHeaders(headers);
  const { events } = parseSse(body);
  const texts = ['', ''];
  const finished = [];
  for (const e of events) {
    assert.equal(e.object, 'text_completion');
    assert.ok(!('usage' in e), 'no usage without include_usage');
    for (const c of e.choices) {
      assert.equal(finished[c.index], undefined, 'nothing after a choice finished');
      texts[c.index] += c.text;
      if (c.finish_reason) finished[c.index] = c.finish_reason;
    }
  }
  assert.deepEqual(finished, ['length', 'length']);
  // Greedy: both choices are the same text.
  assert.equal(texts[0], texts[1]);
  assert.ok(texts[0].length > 0);
});

test('a stream waiting for a slot gets `: keep-alive` comments, framed as events', { timeout: 60_000 }, async () => {
  // With --parallel 1, two long generations (~1 s each here) hold the only slot in turn; the
  // stream queued behind them waits well over the server's 0.5 s probe interval, and the server
  // probes its client with comment lines meanwhile.
  // Under a sanitizer (RKV_SANITIZED) a third as long: still far past 0.5 s at its speed.
  const maxTokens = process.env.RKV_SANITIZED ? 600 : 2000;
  const long = (i) =>
    postJson(`${server.url}/v1/completions`, { prompt: `${i}:a\n`, temperature: 0, max_tokens: maxTokens, ignore_eos: true });
  const ahead = [long(1), long(2)];
  // Both are in: one running, one waiting.
  for (let i = 0; ; i++) {
    const m = await readMetrics(server.url);
    if (m.get('rkv_requests_running') === 1 && m.get('rkv_requests_waiting') === 1) break;
    assert.ok(i < 500, 'the two long requests never got in');
    await sleep(10);
  }
  const { status, headers, body } = await curl('/v1/completions', {
    prompt: '1:a\n',
    temperature: 0,
    max_tokens: 3,
    stream: true,
  });
  for (const r of await Promise.all(ahead)) assert.equal(r.status, 200);
  assert.equal(status, 200);
  assertEventStreamHeaders(headers);
  const { events, comments } = parseSse(body);
  assert.ok(comments > 0, 'at least one keep-alive comment');
  assert.equal(events.at(-1).choices[0].finish_reason, 'length');
});

test('errors: status codes and JSON error objects', { timeout: 30_000 }, async () => {
  // -w '%{http_code}': what a shell script sees.
  const code = async (path, body) =>
    (await run('curl', ['-s', '-o', '/dev/null', '-w', '%{http_code}', '--max-time', '10',
      ...(body === undefined ? [] : ['--data-binary', body]), `${server.url}${path}`])).stdout;
  assert.equal(await code('/v1/chat/completions', '{"messages": [}'), '400');
  assert.equal(await code('/v1/completions', '{"prompt": 5}'), '400');
  assert.equal(await code('/v1/nothing-here'), '404');
  assert.equal(await code('/health'), '200');

  // An invalid streaming request is answered with a JSON error, not an event stream.
  const bad = await curl('/v1/completions', { prompt: 'x', stream: true, kv: { method: 'rkv', budget: 8 } });
  assert.equal(bad.status, 400);
  assert.match(bad.headers['content-type'], /^application\/json\b/);
  const { error } = JSON.parse(bad.body);
  assert.equal(error.type, 'invalid_request_error');
  assert.equal(error.param, 'kv');
  assert.match(error.message, /window/);

  const invalidJson = await curl('/v1/chat/completions', '{"messages": [}');
  assert.equal(invalidJson.status, 400);
  assert.match(invalidJson.headers['content-type'], /^application\/json\b/);
  assert.match(JSON.parse(invalidJson.body).error.message, /JSON/);

  const missing = await curl('/v1/nothing-here');
  assert.equal(missing.status, 404);
  assert.match(missing.headers['content-type'], /^application\/json\b/);
  assert.equal(typeof JSON.parse(missing.body).error.message, 'string');
});
