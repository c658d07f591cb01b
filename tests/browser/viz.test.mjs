// The `rkv viz` page in a real browser (Debian's headless chromium, driven by puppeteer-core):
// traces of the shipped model made by `rkv generate --trace`, drawn by `rkv viz`, and the same
// page served by `rkv serve --viz` at /viz. The test works the page through its own controls
// (the slider by keyboard, the head grid by clicks) and checks the rendered DOM against the
// tests' own reading of the trace files (trace.mjs).
//
// Environment: RKV_BINARY (default build/rkv), RKV_CHROMIUM (default /usr/bin/chromium),
// RKV_VIZ_SCREENSHOT (a path: also save a screenshot of the side-by-side page there).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { pathToFileURL } from 'node:url';

import { examplePrompt, modelDir, rkvBinary, startServer } from '../server/lib.mjs';
import { held, heldByAny, launchBrowser, readTrace } from './trace.mjs';

const work = mkdtempSync(join(tmpdir(), 'rkv-viz-'));
let browser;

function rkv(args) {
  return execFileSync(rkvBinary, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

function traceOf(method) {
  const path = join(work, `${method}.jsonl`);
  rkv(['generate', '-m', modelDir, '-f', join(modelDir, 'example_prompt.txt'), '--kv-method', method,
    '--kv-budget', '96', '--kv-buffer', '16', '-n', '400', '--temp', '0', '--trace', path]);
  return path;
}

before(async () => {
  browser = await launchBrowser();
});

after(async () => {
  if (browser) await browser.close();
  rmSync(work, { recursive: true, force: true });
});

// What panel `index` shows: kept and evicted counts, the kept token positions, the slider.
async function panelState(page, index) {
  return page.$eval(`section.panel[data-trace="${index}"]`, (panel) => ({
    kept: Number(panel.querySelector('.kept-count').textContent),
    evicted: Number(panel.querySelector('.evicted-count').textContent),
    keptPositions: [...panel.querySelectorAll('.t.k')].map((s) => Number(s.dataset.pos)),
    future: panel.querySelectorAll('.t.f').length,
    slider: Number(panel.querySelector('.step-slider').value),
    label: panel.querySelector('.step-label').textContent,
  }));
}

const sorted = (set) => [...set].sort((a, b) => a - b);

test('rkv viz draws two traces side by side and its controls show each cache', async () => {
  const rkvTrace = traceOf('rkv');
  const snapTrace = traceOf('snapkv');
  const html = join(work, 'page.html');
  rkv(['viz', snapTrace, rkvTrace, '-o', html]);
  const traces = [readTrace(snapTrace), readTrace(rkvTrace)];
  assert.ok(traces[1].steps.length > 10, 'the rkv trace has compressions');

  const page = await browser.newPage();
  const requests = [];
  page.on('request', (r) => requests.push(r.url()));
  await page.setViewport({ width: 1400, height: 900 });
  await page.goto(pathToFileURL(html).href);
  await page.waitForSelector('body[data-ready="1"]');
  assert.deepEqual(requests.filter((u) => !u.startsWith('file:')), [], 'the page fetches nothing');
  assert.equal(await page.$$eval('section.panel', (p) => p.length), 2);

  for (const [i, trace] of traces.entries()) {
    // Every token is an element carrying its text, in order.
    const tokens = await page.$$eval(`section.panel[data-trace="${i}"] .t`, (spans) => spans.map((s) => s.textContent));
    assert.equal(tokens.length, trace.ids.length);
    assert.equal(tokens.join(''), trace.text.join(''));
    const method = await page.$eval(`section.panel[data-trace="${i}"] [data-field="method"] dd`, (d) => d.textContent);
    assert.equal(method, trace.header.method);
    // At the first compression (the slider's start), all heads together.
    const s0 = trace.steps[0];
    const state = await panelState(page, i);
    assert.equal(state.slider, 0);
    assert.deepEqual(state.keptPositions, sorted(heldByAny(trace, s0)));
    assert.equal(state.kept + state.evicted, s0);
    assert.equal(state.future, trace.ids.length - s0);
  }

  // Panel 1 (rkv): five steps right by keyboard, then layer 1 / head 0 picked in the grid.
  const trace = traces[1];
  await page.focus('section.panel[data-trace="1"] .step-slider');
  for (let k = 0; k < 5; k++) await page.keyboard.press('ArrowRight');
  let state = await panelState(page, 1);
  assert.equal(state.slider, 5);
  const s5 = trace.steps[5];
  assert.match(state.label, new RegExp(`compression 6 of ${trace.steps.length}, after ${s5} tokens`));
  assert.deepEqual(state.keptPositions, sorted(heldByAny(trace, s5)));

  await page.click('section.panel[data-trace="1"] button.cell[data-layer="1"][data-head="0"]');
  state = await panelState(page, 1);
  const record = trace.records.find((r) => r.step === s5 && r.layer === 1 && r.head === 0);
  assert.ok(record, 'layer 1 head 0 compressed at that step');
  assert.equal(state.kept, record.n_after);
  assert.equal(state.evicted, s5 - record.n_after);
  assert.deepEqual(state.keptPositions, record.kept_positions);
  const cell = await page.$eval('section.panel[data-trace="1"] button.cell[data-layer="1"][data-head="0"]',
    (b) => [b.getAttribute('aria-pressed'), Number(b.textContent)]);
  assert.deepEqual(cell, ['true', record.n_after]);
  // The two heads of a layer keep different tokens (per-head token sets).
  await page.click('section.panel[data-trace="1"] button.cell[data-layer="1"][data-head="1"]');
  state = await panelState(page, 1);
  assert.deepEqual(state.keptPositions, sorted(held(trace, 1, 1, s5)));

  // The last compression, another cache.
  await page.focus('section.panel[data-trace="1"] .step-slider');
  await page.keyboard.press('End');
  await page.click('section.panel[data-trace="1"] button.cell[data-layer="3"][data-head="1"]');
  state = await panelState(page, 1);
  const last = trace.steps.at(-1);
  assert.equal(state.slider, trace.steps.length - 1);
  assert.deepEqual(state.keptPositions, sorted(held(trace, 3, 1, last)));
  assert.equal(state.kept, trace.records.find((r) => r.step === last && r.layer === 3 && r.head === 1).n_after);

  // Back to all heads; panel 0 was left alone.
  await page.click('section.panel[data-trace="1"] button.all-heads');
  state = await panelState(page, 1);
  assert.deepEqual(state.keptPositions, sorted(heldByAny(trace, last)));
  assert.equal((await panelState(page, 0)).slider, 0);

  if (process.env.RKV_VIZ_SCREENSHOT) {
    // Both methods after their last compression (docs/images/viz.png).
    await page.focus('section.panel[data-trace="0"] .step-slider');
    await page.keyboard.press('End');
    await page.screenshot({ path: process.env.RKV_VIZ_SCREENSHOT });
  }
  await page.close();
});

test('a version 1 trace (compression lines only) still draws', async () => {
  const v2 = readFileSync(traceOf('h2o'), 'utf8').split('\n').filter((l) => l.trim() !== '');
  const v1Lines = v2.map((l) => JSON.parse(l)).filter((r) => r.type === 'compression')
    .map(({ type, ...rest }) => JSON.stringify(rest));
  const v1 = join(work, 'v1.jsonl');
  writeFileSync(v1, v1Lines.join('\n') + '\n');
  const html = join(work, 'v1.html');
  rkv(['viz', v1, '-o', html]);
  const trace = readTrace(v1);
  trace.header = { layers: 4, kv_heads: 2 };
  const page = await browser.newPage();
  await page.goto(pathToFileURL(html).href);
  await page.waitForSelector('body[data-ready="1"]');
  const state = await panelState(page, 0);
  assert.deepEqual(state.keptPositions, sorted(heldByAny(trace, trace.steps[0])));
  await page.close();
});

test('rkv serve --viz serves the page of a finished request at /viz', async () => {
  const server = await startServer({ args: ['--viz', '4'] });
  try {
    const response = await fetch(`${server.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ prompt: examplePrompt(), max_tokens: 200, temperature: 0,
        kv: { method: 'gkv', budget: 64, buffer: 16 } }),
    });
    assert.equal(response.status, 200);
    const body = await response.json();
    const traceText = await (await fetch(`${server.url}/viz/trace?id=${body.id}`)).text();
    const tracePath = join(work, 'served.jsonl');
    writeFileSync(tracePath, traceText);
    const trace = readTrace(tracePath);
    assert.equal(trace.header.method, 'gkv');
    assert.equal(trace.end.generated_tokens, body.usage.completion_tokens);
    assert.equal(trace.text.slice(trace.header.prompt_tokens).join(''), body.choices[0].text);

    const page = await browser.newPage();
    await page.goto(`${server.url}/viz`);
    await page.click(`a[href="/viz?id=${body.id}"]`);
    await page.waitForSelector('body[data-ready="1"]');
    await page.focus('section.panel[data-trace="0"] .step-slider');
    await page.keyboard.press('ArrowRight');
    await page.click('section.panel[data-trace="0"] button.cell[data-layer="2"][data-head="1"]');
    const state = await panelState(page, 0);
    assert.deepEqual(state.keptPositions, sorted(held(trace, 2, 1, trace.steps[1])));
    await page.close();

    const missing = await fetch(`${server.url}/viz?id=cmpl-none`);
    assert.equal(missing.status, 404);
    assert.match((await missing.json()).error.message, /no trace/);
  } finally {
    await server.stop();
  }
});
