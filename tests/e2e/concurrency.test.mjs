// Load behaviour on the CPU backend: 64 concurrent streams with outputs equal to single runs,
// a client disconnect cancelling its request and freeing its KV blocks, preemption under a
// small KV pool with unchanged greedy outputs, and SIGTERM draining under load.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { client, collectChatStream, collectCompletionStream, goldenModel, http, metrics, sleep, startServer, waitFor } from './lib.mjs';

const MODEL = 'tiny';
const prompts = Array.from({ length: 64 }, (_, i) => `Request number ${i}: ${'abcdefghij'.slice(0, 1 + (i % 10))}`);

async function serial(openai, max_tokens) {
  const out = [];
  for (const p of prompts) {
    const r = await openai.completions.create({ model: MODEL, prompt: p, max_tokens, temperature: 0 });
    out.push(r.choices[0].text);
  }
  return out;
}

async function concurrent(openai, max_tokens) {
  return Promise.all(prompts.map(async (p) => {
    const s = await collectCompletionStream(await openai.completions.create({ model: MODEL, prompt: p, max_tokens, temperature: 0, stream: true }));
    assert.equal(s.choices[0].finish, 'length');
    return s.choices[0].text;
  }));
}

test('64 concurrent streaming clients: greedy outputs equal single-request runs', async () => {
  const server = await startServer({ args: [goldenModel, '--served-model-name', MODEL, '--max-num-seqs', '64', '--threads', '2'] });
  try {
    const openai = client(server);
    const single = await serial(openai, 24);
    const t0 = Date.now();
    const many = await concurrent(openai, 24);
    console.log(`64 streams x 24 tokens in ${Date.now() - t0} ms`);
    assert.deepEqual(many, single);
    const m = await metrics(server);
    assert.equal(m['peregrine:num_requests_running'], 0);
    assert.equal(m['peregrine:kv_cache_blocks_used'], 0);
  } finally {
    assert.equal((await server.stop()).code, 0);
  }
});

test('a client that disconnects mid-stream is cancelled and its KV blocks return', async () => {
  const server = await startServer({ args: [goldenModel, '--served-model-name', MODEL, '--threads', '1'] });
  try {
    const openai = client(server);
    const before = await metrics(server);
    const stream = await openai.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'go on' }], max_tokens: 200, temperature: 0, ignore_eos: true, stream: true });
    let n = 0;
    for await (const chunk of stream) {
      if (chunk.choices[0]?.delta?.content !== undefined) n++;
      if (n >= 3) break;  // leaving the loop aborts the HTTP request
    }
    stream.controller.abort();
    const atAbort = await metrics(server);
    assert.ok(atAbort['peregrine:kv_cache_blocks_used'] > 0 || atAbort['peregrine:num_requests_running'] === 0);
    const done = await waitFor(async () => {
      const m = await metrics(server);
      return m['peregrine:num_requests_running'] === 0 && m['peregrine:kv_cache_blocks_used'] === 0 ? m : null;
    }, 5000, 5);
    assert.ok(done, 'the request left the engine and freed its blocks');
    const generated = done['peregrine:generation_tokens_total'] - before['peregrine:generation_tokens_total'];
    const stepsAfter = done['peregrine:engine_steps_total'] - atAbort['peregrine:engine_steps_total'];
    console.log(`disconnect: ${generated} of 200 tokens generated; ${stepsAfter} engine steps after the abort was seen`);
    // How many tokens come before the disconnect depends on how soon the client runs: 4-8 alone, 129
    // once under a loaded 2-core CI run (2026-12-02). The server's part is what follows it: the request
    // leaves within a few steps of the abort (stepsAfter), before its 200 tokens, as an abort. The
    // steps counted include the server's I/O thread noticing the closed socket while the engine runs
    // steps of a tiny model (well under a millisecond each): 1-3 alone, 6 and 8 in clean-clone CI runs
    // (2 cores, ctest -j2; 2026-12-05). A server that did not cancel would run all the request's
    // remaining steps (88-196 here), so 16 still tells the two apart.
    assert.ok(generated < 200, `cancelled before the end (${generated} of 200 tokens generated)`);
    assert.ok(stepsAfter <= 16, `the request left within a few steps of the disconnect (${stepsAfter} steps)`);
    assert.equal(done[`peregrine:request_success_total{model_name="${MODEL}",finished_reason="abort"}`], 1);
    const r = await openai.completions.create({ model: MODEL, prompt: 'still there?', max_tokens: 2 });
    assert.equal(r.choices.length, 1);
  } finally {
    assert.equal((await server.stop()).code, 0);
  }
});

test('a small KV pool: queueing and preemption, greedy outputs unchanged', async () => {
  const big = await startServer({ args: [goldenModel, '--served-model-name', MODEL, '--threads', '2'] });
  let reference;
  const req = (p) => ({ model: MODEL, messages: [{ role: 'user', content: p }], max_tokens: 80, temperature: 0, ignore_eos: true });
  try {
    const openai = client(big);
    reference = await Promise.all(prompts.slice(0, 16).map(async (p) => (await openai.chat.completions.create(req(p))).choices[0].message.content));
  } finally {
    await big.stop();
  }
  // 16 blocks of 16 tokens hold ~3 of these ~100-token sequences at once.
  const small = await startServer({ args: [goldenModel, '--served-model-name', MODEL, '--kv-blocks', '16', '--block-size', '16', '--threads', '2'] });
  try {
    const openai = client(small);
    const outs = await Promise.all(prompts.slice(0, 16).map(async (p) => {
      const s = await collectChatStream(await openai.chat.completions.create({ ...req(p), stream: true }));
      return s.choices[0].content;
    }));
    assert.deepEqual(outs, reference);
    const m = await metrics(small);
    console.log(`preemptions: ${m['peregrine:num_preemptions_total']}`);
    assert.ok(m['peregrine:num_preemptions_total'] > 0, 'the pool was too small: requests were preempted');
    assert.equal(m['peregrine:kv_cache_blocks_used'], 0);
  } finally {
    assert.equal((await small.stop()).code, 0);
  }
});

test('SIGTERM under load: health 503, new work 503, in-flight streams finish, exit 0', async () => {
  // Enough in-flight work (32 x 200 tokens on one thread) that draining outlasts the checks below:
  // 8 x 150 tokens drained in ~0.2 s once the CPU loops got faster, and the server was gone.
  const server = await startServer({ args: [goldenModel, '--served-model-name', MODEL, '--shutdown-timeout', '60', '--threads', '1'] });
  const openai = client(server);
  let started = 0;
  const streams = prompts.slice(0, 32).map(async (p) => {
    const s = await openai.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: p }], max_tokens: 200, temperature: 0, ignore_eos: true, stream: true });
    started++;
    return collectChatStream(s);
  });
  await waitFor(() => started === 32, 10000);
  server.proc.kill('SIGTERM');
  const health = await waitFor(async () => (await http(server, 'GET', '/health')).status === 503, 5000, 5);
  assert.ok(health, '/health turns 503 while draining');
  const refused = await http(server, 'POST', '/v1/completions', { body: { model: MODEL, prompt: 'new', max_tokens: 2 } });
  assert.equal(refused.status, 503);
  assert.equal(typeof refused.json.error.message, 'string');
  for (const s of await Promise.all(streams)) assert.equal(s.choices[0].finish, 'length');
  const { code } = await server.exited;
  assert.equal(code, 0);
});

test('SIGTERM with a zero shutdown timeout: in-flight requests end with finish_reason abort', async () => {
  // 32 x 200 tokens on one thread: one 200-token request alone could finish between its first
  // chunk and the signal (the tiny model is that fast), and then "length" was right, not a bug.
  const server = await startServer({ args: [goldenModel, '--served-model-name', MODEL, '--shutdown-timeout', '0', '--threads', '1'] });
  const openai = client(server);
  const iterators = await Promise.all(prompts.slice(0, 32).map(async (p) => {
    const stream = await openai.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: p }], max_tokens: 200, temperature: 0, ignore_eos: true, stream: true });
    const it = stream[Symbol.asyncIterator]();
    await it.next();
    return it;
  }));
  server.proc.kill('SIGTERM');
  const finishes = await Promise.all(iterators.map(async (it) => {
    let finish = null;
    for (let r = await it.next(); !r.done; r = await it.next()) if (r.value.choices[0]?.finish_reason) finish = r.value.choices[0].finish_reason;
    return finish;
  }));
  assert.deepEqual(finishes, Array(32).fill('abort'));
  assert.equal((await server.exited).code, 0);
});
