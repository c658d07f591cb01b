// Helpers shared by the `rkv serve` end-to-end tests: start and stop a server, read /metrics,
// parse an SSE stream, load prompts.
//
// Environment:
//   RKV_BINARY  the rkv executable (default: build/rkv of this repository)
//   RKV_MODEL   the model directory (default: models/rkv-tiny-reasoner of this repository)
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
export const repoRoot = resolve(here, '../..');
export const rkvBinary = process.env.RKV_BINARY || resolve(here, '../../build/rkv');
export const modelDir = process.env.RKV_MODEL || resolve(repoRoot, 'models/rkv-tiny-reasoner');

// The tiny model's example prompt: greedy decoding answers it in 450 tokens ending with
// `Final answer: \boxed{3}` and an end-of-sequence token.
export const examplePrompt = () => readFileSync(resolve(modelDir, 'example_prompt.txt'), 'utf8');

// Held-out prompts (the "problem" field of data/chains_test.jsonl), in file order.
export function testPrompts(count) {
  const lines = readFileSync(resolve(repoRoot, 'data/chains_test.jsonl'), 'utf8')
    .split('\n')
    .filter((line) => line.trim() !== '');
  return lines.slice(0, count).map((line) => JSON.parse(line).problem);
}

// Servers still running when this process exits (a test that threw before its stop()).
const live = new Set();
process.on('exit', () => {
  for (const child of live) child.kill('SIGKILL');
});

// Starts `rkv serve` on a free port and resolves once GET /health answers 200.
// `args` are appended to the command line (e.g. ['--kv-memory', '8MiB', '--queue-limit', '100']);
// `model` is the checkpoint (default: the tiny reasoner).
// Returns { url, port, agentPort, child, alive(), stderr(), stop(), awaitExit() }; stop() sends SIGTERM
// and awaitExit() sends nothing; both resolve with { code, signal } once the process has exited
// (SIGKILL after `stopTimeoutMs`).
export async function startServer({ args = [], model = modelDir, readyTimeoutMs = 60_000, stopTimeoutMs = 15_000 } = {}) {
  if (!existsSync(rkvBinary)) {
    throw new Error(`rkv binary not found at ${rkvBinary} (build it, or set RKV_BINARY)`);
  }
  const argv = ['serve', '-m', model, '--port', '0', '-t', '2', ...args];
  const child = spawn(rkvBinary, argv, { stdio: ['ignore', 'ignore', 'pipe'] });
  live.add(child);

  let stderr = '';
  let exit = null;  // { code, signal } once exited
  const exited = new Promise((resolveExit) => {
    child.on('exit', (code, signal) => {
      exit = { code, signal };
      live.delete(child);
      resolveExit(exit);
    });
  });
  const spawnError = new Promise((_, reject) => child.on('error', reject));

  // The port is printed first, while the model is still loading:
  //   [serve] listening on http://127.0.0.1:PORT (loading the model; /health: 503)
  child.stderr.setEncoding('utf8');
  let portTimer;
  const port = await Promise.race([
    new Promise((resolvePort) => {
      child.stderr.on('data', (text) => {
        stderr += text;
        const match = /\[serve\] listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(stderr);
        if (match) resolvePort(Number(match[1]));
      });
    }),
    exited.then((e) => {
      throw new Error(`rkv serve exited (${JSON.stringify(e)}) before listening:\n${stderr}`);
    }),
    spawnError,
    new Promise((_, reject) => {
      portTimer = setTimeout(
        () => reject(new Error(`rkv serve printed no port within ${readyTimeoutMs} ms:\n${stderr}`)),
        readyTimeoutMs,
      );
    }),
  ]).finally(() => clearTimeout(portTimer));
  const url = `http://127.0.0.1:${port}`;

  // Resolves with { code, signal } once the process has exited (SIGKILL after `stopTimeoutMs`).
  const awaitExit = async () => {
    if (exit) return exit;
    const timer = setTimeout(() => child.kill('SIGKILL'), stopTimeoutMs);
    const result = await exited;
    clearTimeout(timer);
    return result;
  };
  const stop = async () => {
    if (!exit) child.kill('SIGTERM');
    return awaitExit();
  };

  // /health answers 503 while the model loads, then 200 {"status":"ok"}.
  const deadline = Date.now() + readyTimeoutMs;
  for (;;) {
    if (exit) throw new Error(`rkv serve exited (${JSON.stringify(exit)}) while loading:\n${stderr}`);
    const status = await fetch(`${url}/health`, { signal: AbortSignal.timeout(5_000) })
      .then((r) => r.status)
      .catch(() => 0);
    if (status === 200) break;
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`rkv serve not healthy within ${readyTimeoutMs} ms (last status ${status}):\n${stderr}`);
    }
    await sleep(50);
  }

  // With --agent-port, the agent's port is printed before the model loads:
  //   [serve] load-balancer agent on 127.0.0.1:PORT
  const agent = /\[serve\] load-balancer agent on 127\.0\.0\.1:(\d+)/.exec(stderr);
  return {
    url,
    port,
    agentPort: agent ? Number(agent[1]) : null,
    child,
    alive: () => exit === null,
    stderr: () => stderr,
    stop,
    awaitExit,
  };
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// GET /metrics as a Map from the sample's name (labels included, as printed) to its value.
export async function readMetrics(url, { timeoutMs = 10_000 } = {}) {
  const response = await fetch(`${url}/metrics`, { signal: AbortSignal.timeout(timeoutMs) });
  if (response.status !== 200) throw new Error(`GET /metrics: HTTP ${response.status}`);
  const metrics = new Map();
  for (const line of (await response.text()).split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const space = line.lastIndexOf(' ');
    metrics.set(line.slice(0, space), Number(line.slice(space + 1)));
  }
  return metrics;
}

// POSTs `body` as JSON. Resolves with { status, headers, json } (json: null when the body is not
// JSON). Non-streaming requests only.
export async function postJson(url, body, { timeoutMs = 60_000 } = {}) {
  const response = await fetch(url, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: typeof body === 'string' ? body : JSON.stringify(body),
    signal: AbortSignal.timeout(timeoutMs),
  });
  const text = await response.text();
  let json = null;
  try {
    json = JSON.parse(text);
  } catch {}
  return { status: response.status, headers: response.headers, json, text };
}

// Reads a text/event-stream body and yields the data of each event as a string ('[DONE]' for
// the terminator); comment lines (": keep-alive") are skipped. Strict about the framing the
// server uses: every event is one `data: ...` line or one comment line, then a blank line.
export async function* sseEvents(body) {
  const decoder = new TextDecoder();
  let buffer = '';
  for await (const bytes of body) {
    buffer += decoder.decode(bytes, { stream: true });
    let end;
    while ((end = buffer.indexOf('\n\n')) !== -1) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      if (event.startsWith(': ')) continue;
      if (!event.startsWith('data: ') || event.includes('\n')) {
        throw new Error(`malformed SSE event: ${JSON.stringify(event)}`);
      }
      yield event.slice('data: '.length);
    }
  }
  if (buffer !== '') throw new Error(`SSE stream ended inside an event: ${JSON.stringify(buffer)}`);
}
