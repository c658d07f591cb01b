#!/usr/bin/env node
// Load generator for `rkv serve`: closed-loop clients sending streaming requests, one markdown
// table row per client count (time to first token, inter-token gaps, aggregate tokens/s).
// Plain fetch and a minimal SSE parser: no dependencies beyond Node >= 20.
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';

const HELP = `Usage: node tools/server_bench.mjs --url URL --prompt-file FILE [options]

Runs, for each client count C, C concurrent clients that each send --requests-per-client
streaming requests one after another, and prints one markdown row per client count.

Options:
  --url URL                  the server, e.g. http://127.0.0.1:8080 (required)
  --prompt-file FILE         the prompt: a text file is one prompt; a .jsonl file gives one prompt
                             per line (its "prompt", "problem" or "question" field), used in turn
                             (required)
  --clients LIST             comma-separated client counts, one row each (default: 1,8,32)
  --requests-per-client K    requests each client sends, one after another (default: 4)
  --max-tokens N             max_tokens of every request (default: 256)
  --kv JSON                  the request's "kv" extension, e.g. '{"method":"rkv","budget":128}'
                             (default: none, the server's defaults)
  --ignore-eos               generate exactly --max-tokens tokens (no stop at end-of-sequence)
  --endpoint NAME            completions (the prompt as is) or chat (the prompt as one user
                             message) (default: completions)
  --temperature T            sampling temperature (default: 0, greedy)
  --timeout S                per-request timeout in seconds (default: 600)
  -h, --help                 this help

Columns:
  clients       concurrent clients
  requests      requests completed (clients x requests-per-client when none failed)
  tokens        completion tokens, summed from each response's usage (stream_options.include_usage)
  wall s        from the first request sent to the last response done
  tok/s         tokens / wall s
  TTFT p50/p99  milliseconds from sending a request to its first streamed text
  ITL p50/p99   milliseconds between consecutive streamed text chunks of a request; a chunk is
                counted as one token (a chunk rarely carries more than one token's text, when
                the detokenizer holds text back, e.g. a partial match of a stop string);
                events that arrive in the same socket read have gaps near 0

Failed requests (HTTP errors such as 429, timeouts, broken streams) are reported on stderr, left
out of the statistics, and make the exit status 1.
`;

function parseOptions(argv) {
  const { values } = parseArgs({
    args: argv,
    options: {
      url: { type: 'string' },
      'prompt-file': { type: 'string' },
      clients: { type: 'string', default: '1,8,32' },
      'requests-per-client': { type: 'string', default: '4' },
      'max-tokens': { type: 'string', default: '256' },
      kv: { type: 'string' },
      'ignore-eos': { type: 'boolean', default: false },
      endpoint: { type: 'string', default: 'completions' },
      temperature: { type: 'string', default: '0' },
      timeout: { type: 'string', default: '600' },
      help: { type: 'boolean', short: 'h', default: false },
    },
  });
  if (values.help) {
    process.stdout.write(HELP);
    process.exit(0);
  }
  const fail = (message) => {
    process.stderr.write(`server_bench: ${message} (see --help)\n`);
    process.exit(2);
  };
  const positiveInt = (name) => {
    const n = Number(values[name]);
    if (!Number.isInteger(n) || n < 1) fail(`--${name} must be a positive integer, got '${values[name]}'`);
    return n;
  };
  if (!values.url) fail('--url is required');
  if (!values['prompt-file']) fail('--prompt-file is required');
  const clients = values.clients.split(',').map((c) => Number(c.trim()));
  if (clients.some((c) => !Number.isInteger(c) || c < 1)) fail(`--clients must list positive integers, got '${values.clients}'`);
  if (!['completions', 'chat'].includes(values.endpoint)) fail(`--endpoint must be completions or chat`);
  let kv;
  if (values.kv !== undefined) {
    try {
      kv = JSON.parse(values.kv);
    } catch (error) {
      fail(`--kv is not JSON: ${error.message}`);
    }
  }
  const temperature = Number(values.temperature);
  if (!Number.isFinite(temperature) || temperature < 0) fail(`--temperature must be >= 0`);
  return {
    url: values.url.replace(/\/+$/, ''),
    prompts: loadPrompts(values['prompt-file'], fail),
    clients,
    requestsPerClient: positiveInt('requests-per-client'),
    maxTokens: positiveInt('max-tokens'),
    kv,
    ignoreEos: values['ignore-eos'],
    chat: values.endpoint === 'chat',
    temperature,
    timeoutMs: positiveInt('timeout') * 1000,
  };
}

function loadPrompts(file, fail) {
  let text;
  try {
    text = readFileSync(file, 'utf8');
  } catch (error) {
    fail(`cannot read --prompt-file: ${error.message}`);
  }
  if (!file.endsWith('.jsonl')) return [text];
  const prompts = text
    .split('\n')
    .filter((line) => line.trim() !== '')
    .map((line, i) => {
      const record = JSON.parse(line);
      const prompt = record.prompt ?? record.problem ?? record.question;
      if (typeof prompt !== 'string') fail(`${file}:${i + 1} has no "prompt", "problem" or "question" string`);
      return prompt;
    });
  if (prompts.length === 0) fail(`${file} holds no prompt`);
  return prompts;
}

// Yields the data of each SSE event ("[DONE]" included); skips ": keep-alive" comments.
async function* sseData(body) {
  const decoder = new TextDecoder();
  let buffer = '';
  for await (const bytes of body) {
    buffer += decoder.decode(bytes, { stream: true });
    let end;
    while ((end = buffer.indexOf('\n\n')) !== -1) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      for (const line of event.split('\n')) {
        if (line.startsWith('data: ')) yield line.slice(6);
      }
    }
  }
}

// One streaming request. Returns { ttftMs, gapsMs, tokens } or throws.
async function timedRequest(options, prompt) {
  const body = {
    temperature: options.temperature,
    max_tokens: options.maxTokens,
    stream: true,
    stream_options: { include_usage: true },
  };
  if (options.chat) body.messages = [{ role: 'user', content: prompt }];
  else body.prompt = prompt;
  if (options.ignoreEos) body.ignore_eos = true;
  if (options.kv !== undefined) body.kv = options.kv;

  const sent = performance.now();
  const response = await fetch(`${options.url}/v1/${options.chat ? 'chat/completions' : 'completions'}`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(options.timeoutMs),
  });
  if (response.status !== 200) {
    throw new Error(`HTTP ${response.status}: ${(await response.text()).slice(0, 200)}`);
  }
  let last = null;  // time of the previous text chunk
  let ttftMs = null;
  const gapsMs = [];
  let tokens = null;
  let done = false;
  for await (const data of sseData(response.body)) {
    if (data === '[DONE]') {
      done = true;
      break;
    }
    const chunk = JSON.parse(data);
    if (chunk.error) throw new Error(`error event: ${JSON.stringify(chunk.error)}`);
    if (chunk.usage) tokens = chunk.usage.completion_tokens;
    // Text chunks only: the chat role chunk and the finish chunk carry no text.
    const text = chunk.choices?.map((c) => (options.chat ? c.delta?.content : c.text) ?? '').join('') ?? '';
    if (text === '') continue;
    const now = performance.now();
    if (last === null) ttftMs = now - sent;
    else gapsMs.push(now - last);
    last = now;
  }
  if (!done) throw new Error('the stream ended without [DONE]');
  if (tokens === null) throw new Error('no usage chunk (stream_options.include_usage)');
  if (ttftMs === null) ttftMs = performance.now() - sent;  // no text at all (e.g. an immediate stop)
  return { ttftMs, gapsMs, tokens };
}

// Nearest-rank percentile of an ascending array.
function percentile(sorted, p) {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))];
}

async function runLevel(options, clients, nextPrompt) {
  const results = [];
  const errors = [];
  const started = performance.now();
  await Promise.all(
    Array.from({ length: clients }, async () => {
      for (let r = 0; r < options.requestsPerClient; r++) {
        try {
          results.push(await timedRequest(options, nextPrompt()));
        } catch (error) {
          errors.push(error);
        }
      }
    }),
  );
  const wallSeconds = (performance.now() - started) / 1000;
  const tokens = results.reduce((sum, r) => sum + r.tokens, 0);
  const ttft = results.map((r) => r.ttftMs).sort((a, b) => a - b);
  const gaps = results.flatMap((r) => r.gapsMs).sort((a, b) => a - b);
  return { clients, requests: results.length, tokens, wallSeconds, ttft, gaps, errors };
}

// Two decimals: with a fast model several events arrive in one socket read, and their gaps are
// (correctly) near 0 ms as the client sees them.
const ms = (x) => (Number.isNaN(x) ? '-' : x.toFixed(2));

async function main() {
  const options = parseOptions(process.argv.slice(2));
  let promptIndex = 0;
  const nextPrompt = () => options.prompts[promptIndex++ % options.prompts.length];

  const health = await fetch(`${options.url}/health`, { signal: AbortSignal.timeout(10_000) }).catch((e) => e);
  if (!(health instanceof Response) || health.status !== 200) {
    process.stderr.write(`server_bench: ${options.url}/health is not 200 (${health.status ?? health.message})\n`);
    process.exit(1);
  }
  process.stderr.write(
    `server_bench: ${options.url}, ${options.prompts.length} prompt(s), max_tokens ${options.maxTokens}` +
      `${options.ignoreEos ? ' (ignore_eos)' : ''}, kv ${options.kv ? JSON.stringify(options.kv) : '(server default)'}, ` +
      `${options.requestsPerClient} request(s) per client\n`,
  );

  console.log('| clients | requests | tokens | wall s | tok/s | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms |');
  console.log('|--:|--:|--:|--:|--:|--:|--:|--:|--:|');
  let failed = 0;
  for (const clients of options.clients) {
    const level = await runLevel(options, clients, nextPrompt);
    console.log(
      `| ${clients} | ${level.requests} | ${level.tokens} | ${level.wallSeconds.toFixed(2)} | ` +
        `${(level.tokens / level.wallSeconds).toFixed(1)} | ${ms(percentile(level.ttft, 50))} | ` +
        `${ms(percentile(level.ttft, 99))} | ${ms(percentile(level.gaps, 50))} | ${ms(percentile(level.gaps, 99))} |`,
    );
    for (const error of level.errors) process.stderr.write(`server_bench: ${clients} clients: ${error.message}\n`);
    failed += level.errors.length;
  }
  if (failed > 0) {
    process.stderr.write(`server_bench: ${failed} request(s) failed\n`);
    process.exitCode = 1;
  }
}

await main();
