// Helpers for the end-to-end tests: start a real server on a free loopback port, load the
// official `openai` client from .deps/npm, read /metrics, and small HTTP helpers.
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
export const goldenModel = path.join(repoRoot, 'tests', 'golden', 'v3_tiny');

// The official client, installed by scripts/setup.sh (tools/npm/package.json).
export function loadOpenAI() {
  const req = createRequire(path.join(repoRoot, '.deps', 'npm', 'package.json'));
  return req('openai');
}

export function binary(name) {
  const dir = process.env.PEREGRINE_BUILD_DIR || path.join(repoRoot, 'build');
  return process.env[`PEREGRINE_${name.toUpperCase().replace(/-/g, '_')}_BIN`] || findIn(dir, name);
}

function findIn(dir, name) {
  return name === 'peregrine' ? path.join(dir, 'peregrine') : path.join(dir, 'tests', 'e2e', name);
}

export function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

// Starts `bin args...` and resolves once it prints its "listening on" line.
export async function startServer({ bin = binary('peregrine'), args = [], env = {}, timeoutMs = 60000 } = {}) {
  const port = await freePort();
  const fullArgs = bin.endsWith('peregrine') ? ['serve', ...args, '--port', String(port)] : [...args, '--port', String(port)];
  const proc = spawn(bin, fullArgs, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  proc.stderr.on('data', (d) => { stderr += d; });
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
  await new Promise((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error(`server did not start in ${timeoutMs} ms:\n${stderr}`)), timeoutMs);
    proc.stdout.on('data', (d) => {
      out += d;
      if (out.includes('listening on')) {
        clearTimeout(timer);
        resolve();
      }
    });
    proc.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`server exited with ${code} before listening:\n${stderr}`));
    });
  });
  const url = `http://127.0.0.1:${port}`;
  return {
    url,
    port,
    proc,
    exited,
    stderr: () => stderr,
    async stop(signal = 'SIGTERM') {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill(signal);
      return exited;
    },
  };
}

export function client(server, opts = {}) {
  const OpenAI = loadOpenAI();
  return new OpenAI({ baseURL: `${server.url}/v1`, apiKey: opts.apiKey ?? 'none', maxRetries: 0, timeout: 120000 });
}

export async function http(server, method, route, { body, headers = {}, raw } = {}) {
  const init = { method, headers: { ...headers } };
  if (raw !== undefined) init.body = raw;
  else if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers['content-type'] = 'application/json';
  }
  const res = await fetch(`${server.url}${route}`, init);
  const text = await res.text();
  let json;
  try { json = JSON.parse(text); } catch { json = undefined; }
  return { status: res.status, text, json, headers: res.headers };
}

// /metrics parsed into { 'name{labels}': value } and by bare name (first sample).
export async function metrics(server, headers = {}) {
  const { text } = await http(server, 'GET', '/metrics', { headers });
  const out = {};
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const i = line.lastIndexOf(' ');
    const key = line.slice(0, i);
    const value = Number(line.slice(i + 1));
    out[key] = value;
    const bare = key.replace(/\{.*\}$/, '');
    if (!(bare in out)) out[bare] = value;
  }
  return out;
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Polls `fn` until it returns truthy or `ms` passes; returns the last value.
export async function waitFor(fn, ms = 10000, every = 20) {
  const end = Date.now() + ms;
  let v;
  while (Date.now() < end) {
    v = await fn();
    if (v) return v;
    await sleep(every);
  }
  return v;
}

// Joins a streamed chat completion: content, reasoning, tool calls (by index), finish reasons.
export async function collectChatStream(stream) {
  const choices = {};
  let usage = null;
  let chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      const acc = (choices[c.index] ??= { content: '', reasoning: '', toolCalls: [], finish: null, logprobs: [], role: null });
      const d = c.delta || {};
      if (d.role) acc.role = d.role;
      if (d.content) acc.content += d.content;
      if (d.reasoning_content) acc.reasoning += d.reasoning_content;
      for (const tc of d.tool_calls || []) {
        const t = (acc.toolCalls[tc.index] ??= { id: '', name: '', arguments: '' });
        if (tc.id) t.id = tc.id;
        if (tc.function?.name) t.name += tc.function.name;
        if (tc.function?.arguments) t.arguments += tc.function.arguments;
      }
      if (c.logprobs?.content) acc.logprobs.push(...c.logprobs.content);
      if (c.finish_reason) acc.finish = c.finish_reason;
    }
  }
  return { choices, usage, chunks };
}

export async function collectCompletionStream(stream) {
  const choices = {};
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      const acc = (choices[c.index] ??= { text: '', finish: null, tokens: [] });
      acc.text += c.text;
      if (c.logprobs?.tokens) acc.tokens.push(...c.logprobs.tokens);
      if (c.finish_reason) acc.finish = c.finish_reason;
    }
  }
  return { choices, usage };
}
