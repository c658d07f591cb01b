// The tests' own reading of an rkv trace (docs/USAGE.md, "Trace format"), written from the
// format's definition and independent of the page's script, plus a browser launcher.
import { readFileSync } from 'node:fs';
import puppeteer from 'puppeteer-core';

export function readTrace(path) {
  const trace = { header: null, ids: [], text: [], records: [], end: null };
  for (const line of readFileSync(path, 'utf8').split('\n')) {
    if (line.trim() === '') continue;
    const r = JSON.parse(line);
    const type = r.type ?? 'compression';
    if (type === 'header') trace.header = r;
    else if (type === 'tokens') {
      r.ids.forEach((id, j) => {
        trace.ids[r.start + j] = id;
        trace.text[r.start + j] = r.text[j];
      });
    } else if (type === 'compression') trace.records.push(r);
    else if (type === 'end') trace.end = r;
  }
  trace.steps = [...new Set(trace.records.map((r) => r.step))].sort((a, b) => a - b);
  return trace;
}

// The positions (layer, head)'s cache holds at step s: what its last compression at or before s
// kept, and every token after that compression.
export function held(trace, layer, head, s) {
  let last = null;
  for (const r of trace.records) {
    if (r.layer === layer && r.head === head && r.step <= s && (last === null || r.step >= last.step)) last = r;
  }
  const positions = new Set(last === null ? [] : last.kept_positions);
  for (let p = last === null ? 0 : last.step; p < s; p++) positions.add(p);
  return positions;
}

// Positions before s held by at least one cache.
export function heldByAny(trace, s) {
  const any = new Set();
  for (let l = 0; l < trace.header.layers; l++) {
    for (let h = 0; h < trace.header.kv_heads; h++) for (const p of held(trace, l, h, s)) any.add(p);
  }
  return any;
}

export function chromiumPath() {
  return process.env.RKV_CHROMIUM || '/usr/bin/chromium';
}

export async function launchBrowser() {
  return puppeteer.launch({
    executablePath: chromiumPath(),
    headless: true,
    // --no-sandbox: CI runs as root, where chromium's sandbox cannot start.
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
  });
}
