// How fast the `rkv viz` page is on a trace of the size a real model makes: a synthetic trace of
// 16K generated tokens on a 28-layer, 2-KV-head model (the DeepSeek-R1-Distill-Qwen-1.5B
// shape) compressed to budget 1024 every 128 tokens, drawn by `rkv viz`, opened in Debian's
// headless chromium. Prints the trace size, rkv viz's time, the page's load time and the
// slider's response time (docs/PERFORMANCE-LOG.md). A benchmark, not a test.
//
//   node bench/viz_page.mjs [--tokens 16384] [--layers 28] [--heads 2] [--budget 1024]
//                           [--every 128] [--moves 20]
// Needs build/rkv (or RKV_BINARY) and tests/browser's npm packages (scripts/setup.sh).
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

import { launchBrowser } from '../tests/browser/trace.mjs';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const rkvBinary = process.env.RKV_BINARY || join(root, 'build/rkv');
const opts = { tokens: 16384, layers: 28, heads: 2, budget: 1024, every: 128, window: 8, prompt: 100, moves: 20 };
for (let i = 2; i < process.argv.length; i += 2) {
  const key = process.argv[i].replace(/^--/, '');
  if (!(key in opts)) throw new Error(`unknown option ${process.argv[i]}`);
  opts[key] = Number(process.argv[i + 1]);
}

// A deterministic generator (mulberry32), so every run draws the same trace.
function rng(seed) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function synthesize(path) {
  const random = rng(1);
  const words = ['so', 'the', 'sum', 'is', 'wait', 'let', 'me', 'check', 'again', '=', '+', '12', '7', '\n', 'x', 'y'];
  const total = opts.prompt + opts.tokens;
  const lines = [JSON.stringify({ type: 'header', format: 'rkv-trace', version: 2, method: 'rkv', budget: opts.budget,
    buffer: opts.every, window: opts.window, layers: opts.layers, kv_heads: opts.heads, prompt_tokens: opts.prompt,
    model: 'synthetic' })];
  const ids = [], text = [];
  for (let p = 0; p < total; p++) {
    const w = Math.floor(random() * words.length);
    ids.push(w + 10);
    text.push(p === 0 ? words[w] : (words[w] === '\n' ? '\n' : ' ' + words[w]));
  }
  lines.push(JSON.stringify({ type: 'tokens', start: 0, ids, text }));
  // Each cache keeps the window's tokens and budget - window of the others, at random.
  const kept = [];
  for (let c = 0; c < opts.layers * opts.heads; c++) kept.push([]);
  let compressions = 0;
  for (let step = opts.budget + opts.every; step <= total; step += opts.every) {
    compressions++;
    for (let l = 0; l < opts.layers; l++) {
      for (let h = 0; h < opts.heads; h++) {
        const c = l * opts.heads + h;
        const before = kept[c].length === 0 ? Array.from({ length: step }, (_, i) => i)
          : kept[c].concat(Array.from({ length: step - (step - opts.every) }, (_, i) => step - opts.every + i));
        const head = before.slice(0, before.length - opts.window);
        for (let i = head.length - 1; i > 0; i--) {
          const j = Math.floor(random() * (i + 1));
          [head[i], head[j]] = [head[j], head[i]];
        }
        const keep = head.slice(0, opts.budget - opts.window).concat(before.slice(before.length - opts.window));
        keep.sort((a, b) => a - b);
        kept[c] = keep;
        lines.push(JSON.stringify({ type: 'compression', step, layer: l, head: h, method: 'rkv', n_before: before.length,
          n_after: keep.length, kept_positions: keep }));
      }
    }
  }
  lines.push(JSON.stringify({ type: 'end', generated_tokens: opts.tokens, finish_reason: 'length',
    compressions: compressions * opts.layers }));
  writeFileSync(path, lines.join('\n') + '\n');
  return compressions;
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const mb = (bytes) => (bytes / 1e6).toFixed(1) + ' MB';

const work = mkdtempSync(join(tmpdir(), 'rkv-viz-bench-'));
const browser = await launchBrowser();
try {
  const tracePath = join(work, 'trace.jsonl');
  const compressions = synthesize(tracePath);
  const html = join(work, 'page.html');
  let t0 = performance.now();
  execFileSync(rkvBinary, ['viz', tracePath, '-o', html], { stdio: ['ignore', 'ignore', 'inherit'] });
  const vizMs = performance.now() - t0;
  console.log(`trace: ${opts.tokens} generated tokens, ${opts.layers} layers x ${opts.heads} KV heads, ` +
    `${compressions} compressions at budget ${opts.budget}: ${mb(statSync(tracePath).size)}; page ${mb(statSync(html).size)}`);
  console.log(`rkv viz: ${vizMs.toFixed(0)} ms`);

  const loads = [];
  let page;
  for (let run = 0; run < 3; run++) {
    if (page) await page.close();
    page = await browser.newPage();
    await page.setViewport({ width: 1400, height: 900 });
    t0 = performance.now();
    await page.goto(pathToFileURL(html).href, { waitUntil: 'load', timeout: 120_000 });
    await page.waitForSelector('body[data-ready="1"]', { timeout: 120_000 });
    // Until the first frame with the page drawn.
    await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));
    loads.push(performance.now() - t0);
  }
  console.log(`load (navigation to first drawn frame), 3 runs: ${loads.map((x) => x.toFixed(0)).join(', ')} ms`);

  // The slider answers: an input event on it, until the next frame is drawn (measured in the page).
  const moves = async (label) => {
    const times = await page.evaluate(async (count) => {
      const slider = document.querySelector('section.panel .step-slider');
      const out = [];
      for (let i = 0; i < count; i++) {
        const t = performance.now();
        slider.value = String((Number(slider.value) + 7) % (Number(slider.max) + 1));
        slider.dispatchEvent(new Event('input', { bubbles: true }));
        const script = performance.now() - t;
        await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
        out.push([performance.now() - t, script]);
      }
      return out;
    }, opts.moves);
    const total = times.map((x) => x[0]), script = times.map((x) => x[1]);
    console.log(`slider, ${label}: median ${median(total).toFixed(1)} ms, max ${Math.max(...total).toFixed(1)} ms ` +
      `over ${times.length} moves (the page's script: median ${median(script).toFixed(1)} ms)`);
  };
  await moves('all heads');
  await page.click('section.panel button.cell[data-layer="13"][data-head="1"]');
  await moves('one head');
} finally {
  await browser.close();
  rmSync(work, { recursive: true, force: true });
}
