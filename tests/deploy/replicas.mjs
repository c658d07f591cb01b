// Three `rkv serve` replicas of the shipped tiny model with different KV caps behind a real
// HAProxy (deploy/haproxy.cfg, weights from rkv's agent) and a real Prometheus scraping all three
// (issue 37; docs/DEPLOY.md). 48 clients send a mix of compressed and full-cache requests, greedy,
// through HAProxy. While they run: the replica with the most free KV has received the most
// requests, Prometheus's query API returns every replica's vllm:kv_cache_usage_perc, one replica
// is sent SIGTERM and drains with none of its requests lost, another is SIGKILLed and its
// clients' retries succeed on the others. Every completion equals the same request served alone.
// Also: promtool parses /metrics with no complaint but the one vLLM's names draw, and the
// Kubernetes example parses as YAML.
//
// Run by ctest (Deploy.HaproxyPrometheusReplicas): node --test tests/deploy/replicas.mjs
// Needs haproxy, prometheus and promtool (scripts/setup.sh installs them).
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { repoRoot, sleep, sseEvents, startServer, testPrompts } from '../server/lib.mjs';

const CAPS_MIB = [4, 8, 16];  // replica 0 is SIGKILLed, replica 1 drains, replica 2 stays
const CLIENTS = 48;
const REQUESTS_PER_CLIENT = 2;
const MAX_TOKENS = 400;
const METHODS = [{ method: 'fullkv' }, { method: 'rkv', budget: 64, buffer: 16 }];

const tmp = mkdtempSync(join(tmpdir(), 'rkv-deploy-'));
const children = [];
let replicas = [];
after(async () => {
  for (const r of replicas) if (r.alive()) await r.stop();
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  rmSync(tmp, { recursive: true, force: true });
});

const freePort = () =>
  new Promise((resolve, reject) => {
    const s = createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });

function launch(command, args, env = {}) {
  const child = spawn(command, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout.on('data', (d) => (output += d));
  child.stderr.on('data', (d) => (output += d));
  children.push(child);
  return { child, output: () => output };
}

async function until(what, predicate, timeoutMs = 30_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await predicate().catch(() => null);
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(100);
  }
}

// One command on HAProxy's stats socket.
const haproxyCommand = (socketPath, command) =>
  new Promise((resolve, reject) => {
    const s = connect(socketPath);
    let out = '';
    s.on('data', (d) => (out += d));
    s.on('end', () => resolve(out));
    s.on('error', reject);
    s.write(`${command}\n`);
  });

async function metricsOf(replica) {
  const text = await (await fetch(`${replica.url}/metrics`, { signal: AbortSignal.timeout(5000) })).text();
  const values = new Map();
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const space = line.lastIndexOf(' ');
    values.set(line.slice(0, space), Number(line.slice(space + 1)));
  }
  return { text, values };
}

// A request through the load balancer, retried (a new attempt after a failure) until it succeeds.
async function complete(url, body, stats) {
  for (let attempt = 1; attempt <= 20; ++attempt) {
    try {
      const response = await fetch(`${url}/v1/completions`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify(body),
        signal: AbortSignal.timeout(120_000),
      });
      if (response.status !== 200) throw new Error(`HTTP ${response.status}: ${await response.text()}`);
      if (!body.stream) return (await response.json()).choices[0].text;
      let text = '';
      let done = false;
      for await (const event of sseEvents(response.body)) {
        if (event === '[DONE]') {
          done = true;
          break;
        }
        const chunk = JSON.parse(event);
        if (chunk.error) throw new Error(`error event: ${event}`);
        text += chunk.choices[0].text;
      }
      if (!done) throw new Error('the stream ended without [DONE]');
      return text;
    } catch (e) {
      stats.failures.push(String(e.message || e).slice(0, 120));
      await sleep(Math.min(2000, 100 * attempt));
    }
  }
  throw new Error(`no success after 20 attempts: ${stats.failures.slice(-3).join(' | ')}`);
}

test('replicas behind HAProxy and Prometheus', { timeout: 300_000 }, async () => {
  // The Kubernetes example is documentation; it must at least parse, with the kinds DEPLOY.md names.
  // Debian's python3, where scripts/setup.sh installs python3-yaml (another python3 may come
  // first on PATH).
  const python = existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3';
  const yaml = spawnSync(python, ['-c', 'import sys, yaml; print(",".join(d["kind"] for d in yaml.safe_load_all(open(sys.argv[1]))))', join(repoRoot, 'deploy/kubernetes/rkv.yaml')], { encoding: 'utf8' });
  assert.equal(yaml.status, 0, yaml.stderr);
  assert.equal(yaml.stdout.trim(), 'Deployment,InferencePool,HTTPRoute');

  replicas = await Promise.all(
    // A sanitizer build drains slowly: up to 150 s before the test gives up on a clean exit.
    CAPS_MIB.map((cap) =>
      startServer({ args: ['--agent-port', '0', '--kv-memory', `${cap}MiB`, '--alias', 'tiny', '--drain-timeout', '120'], stopTimeoutMs: 150_000 }),
    ),
  );
  for (const r of replicas) assert.ok(r.agentPort > 0, r.stderr());

  // promtool parses the exposition; its only complaint is the ':' of vLLM's names.
  const { text: exposition } = await metricsOf(replicas[0]);
  const promtool = spawnSync('promtool', ['check', 'metrics'], { input: exposition, encoding: 'utf8' });
  const complaints = `${promtool.stdout}${promtool.stderr}`.split('\n').filter((l) => l.trim() !== '');
  assert.ok([0, 3].includes(promtool.status), `promtool exit ${promtool.status}: ${complaints.join('\n')}`);
  for (const c of complaints) assert.match(c, /^vllm:\S+ metric names should not contain ':'$/);
  assert.ok(complaints.length >= 5, complaints.join('\n'));
  assert.match(exposition, /^vllm:kv_cache_usage_perc\{model_name="tiny"\} 0$/m);
  assert.match(exposition, /^vllm:cache_config_info\{block_size="1",num_gpu_blocks="\d+"\} 1$/m);

  // What every distinct request gives alone (on the largest replica, before the load).
  const prompts = testPrompts(6);
  const distinct = [];
  for (const prompt of prompts) for (const kv of METHODS) distinct.push({ prompt, kv });
  const alone = [];
  for (const d of distinct) {
    const stats = { failures: [] };
    alone.push(await complete(replicas[2].url, { prompt: d.prompt, kv: d.kv, temperature: 0, max_tokens: MAX_TOKENS }, stats));
  }

  // HAProxy with the shipped configuration; weights proportional to the caps.
  const lbPort = await freePort();
  const socketPath = join(tmp, 'haproxy.sock');
  const env = { RKV_LB_BIND: `127.0.0.1:${lbPort}`, RKV_STATS_SOCKET: socketPath };
  replicas.forEach((r, i) => {
    env[`RKV_REPLICA_${i + 1}`] = `127.0.0.1:${r.port}`;
    env[`RKV_AGENT_${i + 1}`] = String(r.agentPort);
    env[`RKV_WEIGHT_${i + 1}`] = String(16 * CAPS_MIB[i]);  // 64, 128, 256
  });
  const haproxy = launch('haproxy', ['-db', '-f', join(repoRoot, 'deploy/haproxy.cfg')], env);
  await until('HAProxy with three replicas up', async () => {
    const csv = await haproxyCommand(socketPath, 'show stat');
    const up = csv.split('\n').filter((l) => l.startsWith('rkv_replicas,replica') && l.includes(',UP,'));
    return up.length === 3;
  });
  const lb = `http://127.0.0.1:${lbPort}`;

  // Prometheus scraping the three replicas every second.
  const promPort = await freePort();
  writeFileSync(
    join(tmp, 'prometheus.yml'),
    `global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: rkv\n    static_configs:\n      - targets: [${replicas.map((r) => `'127.0.0.1:${r.port}'`).join(', ')}]\n`,
  );
  const prometheus = launch('prometheus', [
    `--config.file=${join(tmp, 'prometheus.yml')}`,
    `--storage.tsdb.path=${join(tmp, 'tsdb')}`,
    `--web.listen-address=127.0.0.1:${promPort}`,
    '--log.level=warn',
  ]);
  await until('Prometheus ready', async () => (await fetch(`http://127.0.0.1:${promPort}/-/ready`)).status === 200);
  const usage = async (query) => {
    const r = await (await fetch(`http://127.0.0.1:${promPort}/api/v1/query?query=${encodeURIComponent(query)}`)).json();
    const found = r.data.result.filter((s) => s.metric.model_name === 'tiny');
    return found.length === 3 ? found : null;
  };
  await until("Prometheus's first scrape of every replica", () => usage('vllm:kv_cache_usage_perc'), 60_000);

  // The load: 48 clients, two requests each, half of them streamed, through HAProxy.
  const stats = { failures: [] };
  const results = [];
  const clients = Array.from({ length: CLIENTS }, async (_, c) => {
    for (let k = 0; k < REQUESTS_PER_CLIENT; ++k) {
      const n = c + k * CLIENTS;
      const d = distinct[n % distinct.length];
      const text = await complete(lb, { prompt: d.prompt, kv: d.kv, temperature: 0, max_tokens: MAX_TOKENS, stream: n % 2 === 1 }, stats);
      results.push({ n, same: text === alone[n % distinct.length] });
    }
  });

  // The first wave (one request from each client, all at once), as HAProxy placed it: the
  // sessions each server took, from its stats socket, read as soon as all 48 are placed.
  const sessions = async () => {
    const csv = await haproxyCommand(socketPath, 'show stat');
    const header = csv.split('\n')[0].replace(/^# /, '').split(',');
    const stot = header.indexOf('stot');
    return [1, 2, 3].map((i) => Number(csv.split('\n').find((l) => l.startsWith(`rkv_replicas,replica${i},`)).split(',')[stot]));
  };
  let placed = null;
  const deadline = Date.now() + 60_000;
  while (!placed && Date.now() < deadline) {
    const s = await sessions();
    if (s.reduce((a, b) => a + b, 0) >= CLIENTS) placed = s;
    else await sleep(10);
  }
  assert.ok(placed, 'the first wave was not placed within 60 s');
  // While they run, the query API returns every replica's KV usage.
  const running = await usage('vllm:kv_cache_usage_perc');
  assert.ok(running, 'Prometheus lacks a replica');
  assert.deepEqual(running.map((s) => s.metric.instance).sort(), replicas.map((r) => `127.0.0.1:${r.port}`).sort());
  const inFlightAtKill = (await metricsOf(replicas[0])).values.get('rkv_requests_in_flight');

  // One replica dies, another drains.
  replicas[0].child.kill('SIGKILL');
  const drained = replicas[1].stop();

  await Promise.all(clients);
  const drainExit = await drained;

  // Prometheus holds every replica's KV usage over the run, the killed one's included.
  const series = await until('the KV usage of the run in Prometheus', () => usage('max_over_time(vllm:kv_cache_usage_perc[5m])'), 30_000);
  assert.deepEqual(series.map((s) => s.metric.instance).sort(), replicas.map((r) => `127.0.0.1:${r.port}`).sort());
  const usageSeen = replicas.map((r) => Number(series.find((s) => s.metric.instance === `127.0.0.1:${r.port}`).value[1]));
  // The killed replica may have died before a scrape under load; the two others show theirs.
  for (const u of usageSeen.slice(1)) assert.ok(u > 0 && u <= 1, `peak KV usage ${usageSeen}`);

  assert.equal(results.length, CLIENTS * REQUESTS_PER_CLIENT);
  for (const r of results) assert.ok(r.same, `request ${r.n} differs from its run alone`);
  // The replica with the most free KV memory (the largest cap) took the most of the first wave.
  assert.equal(placed.indexOf(Math.max(...placed)), 2, `first-wave requests per replica ${placed} for caps ${CAPS_MIB} MiB`);
  // The drained replica exited cleanly after answering every request it had accepted.
  assert.deepEqual(drainExit, { code: 0, signal: null }, replicas[1].stderr());
  assert.match(replicas[1].stderr(), /drained: every accepted request was answered/);
  // The killed one had requests in flight, and their clients retried elsewhere successfully.
  assert.ok(inFlightAtKill > 0, 'the killed replica had no request in flight');
  assert.ok(replicas[2].alive() && haproxy.child.exitCode === null && prometheus.child.exitCode === null);
  console.log(
    `replicas (caps ${CAPS_MIB.join('/')} MiB): first 48 requests placed ${placed.join('/')}; ` +
      `peak KV usage in Prometheus ${usageSeen.map((u) => u.toFixed(2)).join('/')}; ` +
      `${inFlightAtKill} in flight on the killed replica; ${stats.failures.length} failed attempts retried ` +
      `(${[...new Set(stats.failures.map((f) => f.slice(0, 40)))].slice(0, 4).join(' | ')}); ` +
      `${results.length} completions identical to their runs alone`,
  );
  if (process.env.RKV_DEPLOY_DEBUG) console.log(haproxy.output(), await haproxyCommand(socketPath, 'show stat'));
  haproxy.child.kill('SIGTERM');
  prometheus.child.kill('SIGTERM');
});
