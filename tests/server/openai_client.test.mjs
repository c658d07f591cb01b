// `rkv serve` driven by the official openai SDK (the way most clients will talk to it).
import assert from 'node:assert/strict';
import { basename } from 'node:path';
import { after, before, describe, test } from 'node:test';
import OpenAI from 'openai';
import { examplePrompt, modelDir, postJson, startServer } from './lib.mjs';

let server;
let client;
const prompt = examplePrompt();
// Greedy decoding of the example prompt: 450 tokens, then end-of-sequence.
const greedy = { temperature: 0, max_tokens: 600 };

before(async () => {
  server = await startServer({ args: ['--kv-memory', '8MiB'] });
  // No retries: a 429 or 5xx must fail the test, not be hidden by the SDK retrying.
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'none', maxRetries: 0, timeout: 60_000 });
});

after(async () => {
  if (!server) return;
  const { code, signal } = await server.stop();
  assert.deepEqual({ code, signal }, { code: 0, signal: null }, 'SIGTERM ends the server cleanly');
});

const chat = (extra) =>
  client.chat.completions.create({ model: 'rkv', messages: [{ role: 'user', content: prompt }], ...greedy, ...extra });
const complete = (extra) => client.completions.create({ model: 'rkv', prompt, ...greedy, ...extra });

function assertUsage(usage, completionTokens) {
  assert.equal(usage.prompt_tokens + usage.completion_tokens, usage.total_tokens);
  assert.ok(usage.prompt_tokens > 0);
  if (completionTokens !== undefined) assert.equal(usage.completion_tokens, completionTokens);
  assert.equal(typeof usage.completion_tokens_details?.reasoning_tokens, 'number');
}

// Collects a streamed response: the text of each choice, its finish reason, the chunks.
async function collect(stream, field) {
  const texts = [];
  const finish = [];
  const chunks = [];
  for await (const chunk of stream) {
    chunks.push(chunk);
    for (const choice of chunk.choices) {
      const piece = field(choice);
      texts[choice.index] = (texts[choice.index] ?? '') + (piece ?? '');
      if (choice.finish_reason) {
        assert.equal(finish[choice.index], undefined, `one finish_reason for choice ${choice.index}`);
        finish[choice.index] = choice.finish_reason;
      }
    }
  }
  return { texts, finish, chunks };
}

describe('chat completions', () => {
  let reference;  // the non-streamed greedy answer

  test('non-streaming greedy answer', async () => {
    reference = await chat();
    assert.equal(reference.object, 'chat.completion');
    assert.equal(reference.choices.length, 1);
    const [choice] = reference.choices;
    assert.equal(choice.message.role, 'assistant');
    assert.equal(choice.finish_reason, 'stop');
    assert.ok(choice.message.content.endsWith('Final answer: \\boxed{3}'), choice.message.content.slice(-80));
    assertUsage(reference.usage, 450);
    assert.equal(reference.kv.method, 'fullkv');
    assert.equal(reference.kv.compressions, 0);
  });

  test('streaming gives the same text, a finish_reason, usage and kv', async () => {
    assert.ok(reference, 'needs the non-streaming test');
    const stream = await chat({ stream: true, stream_options: { include_usage: true } });
    const { texts, finish, chunks } = await collect(stream, (c) => c.delta?.content);
    assert.equal(texts[0], reference.choices[0].message.content);
    assert.deepEqual(finish, ['stop']);

    for (const chunk of chunks) assert.equal(chunk.object, 'chat.completion.chunk');
    assert.deepEqual(chunks[0].choices[0].delta, { role: 'assistant', content: '' });
    // The chunk with the finish_reason carries the kv report; the last one has only usage.
    const finishing = chunks.find((c) => c.choices[0]?.finish_reason);
    assert.equal(finishing.kv.method, 'fullkv');
    const last = chunks.at(-1);
    assert.deepEqual(last.choices, []);
    assert.deepEqual(last.usage, reference.usage);
    assert.equal(chunks.filter((c) => c.usage).length, 1, 'usage only in the last chunk');
  });

  test('without include_usage no chunk carries usage', async () => {
    const stream = await chat({ stream: true, max_tokens: 5 });
    const { finish, chunks } = await collect(stream, (c) => c.delta?.content);
    assert.deepEqual(finish, ['length']);
    assert.ok(chunks.every((c) => !c.usage));
  });

  test('the model\'s own chat template (the program text itself): one user message is the same prompt as /v1/completions', async () => {
    assert.ok(reference, 'needs the non-streaming test');
    const completion = await complete();
    assert.equal(completion.choices[0].text, reference.choices[0].message.content);
    assert.deepEqual(completion.usage, reference.usage);
  });
});

describe('completions', () => {
  test('streaming and not give the same text', async () => {
    const whole = await complete();
    assert.equal(whole.object, 'text_completion');
    assert.equal(whole.choices[0].finish_reason, 'stop');
    assert.ok(whole.choices[0].text.includes('\\boxed{3}'));
    assertUsage(whole.usage, 450);

    const stream = await complete({ stream: true, stream_options: { include_usage: true } });
    const { texts, finish, chunks } = await collect(stream, (c) => c.text);
    assert.equal(texts[0], whole.choices[0].text);
    assert.deepEqual(finish, ['stop']);
    assert.ok(chunks.every((c) => c.object === 'text_completion'));
    assert.deepEqual(chunks.at(-1).usage, whole.usage);
  });

  test('n: 2 with a seed gives two choices, reproducibly', async () => {
    const request = { n: 2, seed: 1234, temperature: 0.6, max_tokens: 600 };
    const first = await complete(request);
    assert.deepEqual(first.choices.map((c) => c.index), [0, 1]);
    for (const choice of first.choices) {
      assert.ok(['stop', 'length'].includes(choice.finish_reason));
      assert.ok(choice.text.length > 0);
    }
    assertUsage(first.usage);
    const again = await complete(request);
    assert.deepEqual(again.choices.map((c) => c.text), first.choices.map((c) => c.text), 'same seed, same choices');

    // Streamed, the two choices interleave; each must reassemble to the non-streamed text.
    const stream = await complete({ ...request, stream: true });
    const { texts } = await collect(stream, (c) => c.text);
    assert.deepEqual(texts, first.choices.map((c) => c.text));
  });

  test('n choices are independent samples', async () => {
    // The tiny model is very sure of itself: at 0.6 and top_p 0.95 both choices are usually the
    // greedy text. With the whole distribution and a high temperature, some seed must differ.
    let differ = false;
    for (const seed of [1, 2, 3, 4]) {
      const r = await complete({ n: 2, seed, temperature: 1.5, top_p: 1, max_tokens: 600 });
      if (r.choices[0].text !== r.choices[1].text) differ = true;
      if (differ) break;
    }
    assert.ok(differ, 'the two choices were identical for every seed');
  });

  test('stop cuts the text before the stop string', async () => {
    const full = (await complete()).choices[0].text;
    const single = await complete({ stop: 'verify' });
    assert.equal(single.choices[0].text, full.slice(0, full.indexOf('verify')));
    assert.equal(single.choices[0].finish_reason, 'stop');
    assert.ok(single.usage.completion_tokens < 450);

    // An array: the earliest match wins; this one spans several tokens.
    const stops = ['\\boxed', 'ok\n\ng='];
    const cut = Math.min(...stops.map((s) => full.indexOf(s)).filter((i) => i >= 0));
    const multi = await complete({ stop: stops });
    assert.equal(multi.choices[0].text, full.slice(0, cut));
    assert.equal(multi.choices[0].finish_reason, 'stop');

    // Streamed, the held-back text of a partial match must not leak.
    const stream = await complete({ stop: stops, stream: true });
    const { texts, finish } = await collect(stream, (c) => c.text);
    assert.equal(texts[0], full.slice(0, cut));
    assert.deepEqual(finish, ['stop']);
  });
});

describe('kv extension', () => {
  test('rkv at budget 64 compresses a 450-token generation', async () => {
    // `kv` is not an OpenAI parameter: the SDK sends unknown body fields as they are.
    const r = await chat({ kv: { method: 'rkv', budget: 64 } });
    assert.equal(r.kv.method, 'rkv');
    assert.equal(r.kv.budget, 64);
    assert.ok(r.kv.compressions > 0, JSON.stringify(r.kv));
    assert.ok(r.usage.completion_tokens > 400, JSON.stringify(r.usage));
    assert.ok(r.kv.kv_bytes > 0 && r.kv.kv_bytes_used <= r.kv.kv_bytes, JSON.stringify(r.kv));
    // The slot is sized by the budget, not by the sequence.
    assert.ok(r.kv.max_cache_entries < r.usage.total_tokens, JSON.stringify(r.kv));
  });

  test('the same request streamed reports the same kv', async () => {
    const request = { kv: { method: 'snapkv', budget: 96, window: 8 } };
    const whole = await chat(request);
    const { texts, chunks } = await collect(await chat({ ...request, stream: true }), (c) => c.delta?.content);
    assert.equal(texts[0], whole.choices[0].message.content);
    assert.deepEqual(chunks.find((c) => c.kv).kv, whole.kv);
  });
});

describe('errors', () => {
  async function rejects(promise, status) {
    try {
      await promise;
    } catch (error) {
      assert.ok(error instanceof OpenAI.APIError, String(error));
      assert.equal(error.status, status);
      return error;
    }
    assert.fail(`expected HTTP ${status}`);
  }

  test('kv budget not above the window: BadRequestError 400', async () => {
    const error = await rejects(complete({ kv: { method: 'rkv', budget: 4 } }), 400);
    assert.ok(error instanceof OpenAI.BadRequestError);
    assert.match(error.message, /window/);
    assert.equal(error.param, 'kv');
    assert.equal(error.type, 'invalid_request_error');
  });

  test('unknown kv method: 400', async () => {
    const error = await rejects(complete({ kv: { method: 'lru' } }), 400);
    assert.match(error.message, /lru/);
  });

  test('a prompt longer than the context: 400', async () => {
    const error = await rejects(complete({ prompt: prompt.repeat(40), max_tokens: 1 }), 400);
    assert.ok(error instanceof OpenAI.BadRequestError);
    assert.match(error.message, /context/);
  });

  test('prompt + max_tokens over the context: 400', async () => {
    const error = await rejects(chat({ max_tokens: 2040 }), 400);
    assert.match(error.message, /context/);
  });

  test('n over 16: 400', async () => {
    const error = await rejects(complete({ n: 17 }), 400);
    assert.equal(error.param, 'n');
  });

  test('wrong types: 400', async () => {
    await rejects(complete({ max_tokens: 'ten' }), 400);
    await rejects(complete({ temperature: 'hot' }), 400);
    await rejects(client.chat.completions.create({ model: 'rkv', messages: 'hello' }), 400);
  });
});

test('/v1/models lists the served model', async () => {
  const models = [];
  for await (const model of client.models.list()) models.push(model);
  assert.equal(models.length, 1);
  assert.equal(models[0].id, basename(modelDir));
  assert.equal(models[0].object, 'model');
});

test('/tokenize and /detokenize round trip', async () => {
  const tokenized = await postJson(`${server.url}/tokenize`, { content: prompt, add_special: false });
  assert.equal(tokenized.status, 200);
  const { tokens } = tokenized.json;
  assert.ok(tokens.length > 0 && tokens.every(Number.isInteger));
  // The completion's prompt_tokens counts the same tokens (this tokenizer adds no BOS).
  const completion = await complete({ max_tokens: 1 });
  assert.equal(completion.usage.prompt_tokens, tokens.length);

  const detokenized = await postJson(`${server.url}/detokenize`, { tokens });
  assert.equal(detokenized.status, 200);
  assert.equal(detokenized.json.content, prompt);
});
