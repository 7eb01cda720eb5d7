#!/usr/bin/env node
// Load test for `peregrine serve` (not a timed test): N concurrent clients for M minutes, mixed
// chat/completions, mostly streamed, some disconnecting mid-stream at random. Reports
// requests/s, p50/p99 time-to-first-token and inter-token latency, errors (must be 0), whether
// KV usage returns to its baseline, and the server's RSS over the run (should stay flat).
//
//   node tools/loadtest.mjs --clients 32 --minutes 2 [--url http://127.0.0.1:8000] [--pid PID]
//   node tools/loadtest.mjs --start tests/golden/v3_tiny --clients 32 --minutes 1 --serve-args='--threads 2'
//   (--start: runs build/peregrine serve on a free port itself and reads its RSS)
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const { values: args } = parseArgs({
  options: Object.fromEntries(['url', 'pid', 'start', 'bin', 'serve-args', 'clients', 'minutes', 'seconds', 'disconnect-prob',
    'max-tokens', 'api-key'].map((k) => [k, { type: 'string' }])),
});
const clients = Number(args.clients ?? 16);
const seconds = Number(args.seconds ?? Number(args.minutes ?? 1) * 60);
const disconnectP = Number(args['disconnect-prob'] ?? 0.15);
const maxTokens = Number(args['max-tokens'] ?? 48);
const apiKey = args['api-key'] ?? process.env.PEREGRINE_API_KEY ?? 'none';
const OpenAI = createRequire(path.join(root, '.deps', 'npm', 'package.json'))('openai');

async function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => resolve(port)); });
  });
}

let url = args.url ?? 'http://127.0.0.1:8000';
let pid = args.pid ? Number(args.pid) : null;
let child = null;
if (args.start) {
  const port = await freePort();
  const bin = args.bin ?? path.join(root, 'build', 'peregrine');
  child = spawn(bin, ['serve', args.start, '--port', String(port), ...(args['serve-args'] ? args['serve-args'].split(' ') : [])], { stdio: ['ignore', 'pipe', 'inherit'] });
  await new Promise((resolve, reject) => {
    child.stdout.on('data', (d) => { if (String(d).includes('listening on')) resolve(); });
    child.on('exit', (c) => reject(new Error(`server exited ${c}`)));
  });
  url = `http://127.0.0.1:${port}`;
  pid = child.pid;
}

const headers = { authorization: `Bearer ${apiKey}` };
async function scrape() {
  const text = await (await fetch(`${url}/metrics`, { headers })).text();
  const get = (name) => {
    const line = text.split('\n').find((l) => l.startsWith(name + '{') || l.startsWith(name + ' '));
    return line ? Number(line.slice(line.lastIndexOf(' ') + 1)) : NaN;
  };
  return { running: get('peregrine:num_requests_running'), waiting: get('peregrine:num_requests_waiting'), kvUsed: get('peregrine:kv_cache_blocks_used'), kvUsage: get('peregrine:kv_cache_usage_perc'), preemptions: get('peregrine:num_preemptions_total') };
}
function rssKiB() {
  if (!pid) return NaN;
  try {
    const m = fs.readFileSync(`/proc/${pid}/status`, 'utf8').match(/VmRSS:\s+(\d+)/);
    return m ? Number(m[1]) : NaN;
  } catch { return NaN; }
}

const openai = new OpenAI({ baseURL: `${url}/v1`, apiKey, maxRetries: 0, timeout: 300000 });
const model = (await openai.models.list()).data[0].id;
const words = 'the of and a to in is you that it he was for on are as with his they at be this have from'.split(' ');
const randomPrompt = () => Array.from({ length: 3 + Math.floor(Math.random() * 30) }, () => words[Math.floor(Math.random() * words.length)]).join(' ');

const baseline = await scrape();
const ttft = [], itl = [];
let done = 0, disconnects = 0, errors = 0, tokens = 0;
const errorSamples = [];
const rss = [];
const deadline = Date.now() + seconds * 1000;

async function one() {
  const chat = Math.random() < 0.5;
  const stream = Math.random() < 0.85;
  const disconnectAfter = stream && Math.random() < disconnectP ? 1 + Math.floor(Math.random() * 10) : -1;
  const body = { model, max_tokens: 1 + Math.floor(Math.random() * maxTokens), temperature: Math.random() < 0.5 ? 0 : 0.8, stream };
  const t0 = performance.now();
  let last = null;
  let n = 0;
  const s = chat
    ? await openai.chat.completions.create({ ...body, messages: [{ role: 'user', content: randomPrompt() }] })
    : await openai.completions.create({ ...body, prompt: randomPrompt() });
  if (!stream) {
    tokens += s.usage.completion_tokens;
    done++;
    return;
  }
  for await (const chunk of s) {
    const now = performance.now();
    if (!chunk.choices.length) continue;
    if (last === null) ttft.push(now - t0); else itl.push(now - last);
    last = now;
    n++;
    if (n === disconnectAfter) {
      s.controller.abort();
      disconnects++;
      return;
    }
  }
  tokens += n;
  done++;
}

async function worker() {
  while (Date.now() < deadline) {
    try {
      await one();
    } catch (e) {
      if (e?.name === 'AbortError' || e instanceof OpenAI.APIUserAbortError) continue;
      errors++;
      if (errorSamples.length < 5) errorSamples.push(String(e?.message ?? e));
    }
  }
}

const sampler = setInterval(() => rss.push(rssKiB()), 1000);
const t0 = Date.now();
await Promise.all(Array.from({ length: clients }, worker));
const elapsed = (Date.now() - t0) / 1000;
clearInterval(sampler);

// KV usage must return to the baseline once the last request has left the engine.
let after = await scrape();
for (let i = 0; i < 200 && (after.running > 0 || after.kvUsed > baseline.kvUsed); i++) {
  await new Promise((r) => setTimeout(r, 25));
  after = await scrape();
}
const pct = (a, p) => {
  if (!a.length) return NaN;
  const s = [...a].sort((x, y) => x - y);
  return s[Math.min(s.length - 1, Math.floor(p * s.length))];
};
const quarter = Math.max(1, Math.floor(rss.length / 4));
const rssEarly = rss.slice(0, quarter).reduce((a, b) => Math.max(a, b), 0);
const rssLate = rss.slice(-quarter).reduce((a, b) => Math.max(a, b), 0);
const report = {
  clients, seconds: elapsed, requests: done + disconnects, completed: done, disconnects, errors,
  requests_per_s: +((done + disconnects) / elapsed).toFixed(2), tokens_per_s: +(tokens / elapsed).toFixed(1),
  ttft_ms: { p50: +pct(ttft, 0.5).toFixed(2), p99: +pct(ttft, 0.99).toFixed(2) },
  itl_ms: { p50: +pct(itl, 0.5).toFixed(2), p99: +pct(itl, 0.99).toFixed(2) },
  kv_blocks_used: { baseline: baseline.kvUsed, after: after.kvUsed, returned_to_baseline: after.kvUsed === baseline.kvUsed && after.running === 0 },
  preemptions: after.preemptions - baseline.preemptions,
  rss_kib: pid ? { first_quarter_max: rssEarly, last_quarter_max: rssLate, growth_pct: +((100 * (rssLate - rssEarly)) / rssEarly).toFixed(1) } : 'pass --pid or --start',
  error_samples: errorSamples,
};
console.log(JSON.stringify(report, null, 2));
if (child) {
  child.kill('SIGTERM');
  await new Promise((r) => child.on('exit', r));
}
process.exit(errors === 0 && report.kv_blocks_used.returned_to_baseline ? 0 : 1);
