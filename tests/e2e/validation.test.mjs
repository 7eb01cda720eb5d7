// Robustness: every invalid request gets OpenAI's error object with the right status before any
// stream byte, and the server keeps serving the next request after each one.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { client, goldenModel, http, startServer } from './lib.mjs';

const KEY = 'sk-test-validation';
const AUTH = { authorization: `Bearer ${KEY}` };
let server;
let openai;

before(async () => {
  server = await startServer({
    args: [goldenModel, '--served-model-name', 'tiny', '--max-model-len', '128', '--max-n', '4',
      '--max-body-bytes', '65536', '--max-header-bytes', '8192', '--max-messages', '8', '--threads', '1'],
    env: { PEREGRINE_API_KEY: KEY },
  });
  openai = client(server, { apiKey: KEY });
});

after(async () => {
  const { code } = await server.stop();
  assert.equal(code, 0, 'the server exits 0 on SIGTERM');
});

function assertError(res, status, { param, code } = {}) {
  assert.equal(res.status, status, `status for ${res.text}`);
  assert.ok(res.json && typeof res.json.error === 'object', `an error object: ${res.text}`);
  const e = res.json.error;
  for (const k of ['message', 'type', 'param', 'code']) assert.ok(k in e, `error.${k} present`);
  assert.equal(typeof e.message, 'string');
  assert.ok(e.message.length > 0);
  if (param !== undefined) assert.equal(e.param, param);
  if (code !== undefined) assert.equal(e.code, code);
}

// After every bad request the server still answers a good one.
async function stillServing() {
  const r = await openai.completions.create({ model: 'tiny', prompt: 'hello', max_tokens: 2, temperature: 0 });
  assert.equal(r.choices.length, 1);
  assert.ok(r.usage.completion_tokens >= 1);
}

const chat = (body) => http(server, 'POST', '/v1/chat/completions', { body: { model: 'tiny', max_tokens: 2, ...body }, headers: AUTH });
const completion = (body) => http(server, 'POST', '/v1/completions', { body: { model: 'tiny', max_tokens: 2, ...body }, headers: AUTH });

const cases = [
  ['body is not JSON', () => http(server, 'POST', '/v1/chat/completions', { raw: '{"messages": [', headers: { ...AUTH, 'content-type': 'application/json' } }), 400],
  ['body is not an object', () => http(server, 'POST', '/v1/chat/completions', { raw: '[1,2]', headers: AUTH }), 400],
  ['messages null', () => chat({ messages: null }), 400, 'messages'],
  ['messages a string', () => chat({ messages: 'hi' }), 400, 'messages'],
  ['messages [123]', () => chat({ messages: [123] }), 400],
  ['messages [{}]', () => chat({ messages: [{}] }), 400],
  ['role 123', () => chat({ messages: [{ role: 123, content: 'x' }] }), 400],
  ['unknown role', () => chat({ messages: [{ role: 'wizard', content: 'x' }] }), 400],
  ['content 123', () => chat({ messages: [{ role: 'user', content: 123 }] }), 400],
  ['empty messages', () => chat({ messages: [] }), 400, 'messages'],
  ['too many messages', () => chat({ messages: Array(9).fill({ role: 'user', content: 'x' }) }), 400, 'messages'],
  ['image content part', () => chat({ messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'http://x/y.png' } }] }] }), 400],
  ['input_audio part', () => chat({ messages: [{ role: 'user', content: [{ type: 'input_audio', input_audio: { data: 'AAAA', format: 'wav' } }] }] }), 400],
  ['empty prompt', () => completion({ prompt: '' }), 400, 'prompt'],
  ['empty prompt list', () => completion({ prompt: [] }), 400, 'prompt'],
  ['negative token id', () => completion({ prompt: [1, -5, 3] }), 400, 'prompt'],
  ['token id past the vocabulary', () => completion({ prompt: [1, 999999] }), 400, 'prompt'],
  ['prompt over --max-model-len', () => completion({ prompt: Array(200).fill(100), max_tokens: 1 }), 400],
  ['prompt + max_tokens past the context', () => completion({ prompt: Array(100).fill(100), max_tokens: 50 }), 400],
  ['chat prompt + max_tokens past the context', () => chat({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 1000 }), 400],
  ['negative temperature', () => completion({ prompt: 'a', temperature: -0.5 }), 400, 'temperature'],
  ['NaN temperature', () => http(server, 'POST', '/v1/completions', { raw: '{"model":"tiny","prompt":"a","temperature":NaN}', headers: AUTH }), 400],
  ['infinite temperature', () => http(server, 'POST', '/v1/completions', { raw: '{"model":"tiny","prompt":"a","temperature":1e999}', headers: AUTH }), 400],
  ['temperature a string', () => completion({ prompt: 'a', temperature: 'hot' }), 400, 'temperature'],
  ['top_p 0', () => completion({ prompt: 'a', top_p: 0 }), 400],
  ['top_p above 1', () => completion({ prompt: 'a', top_p: 1.5 }), 400],
  ['top_k below -1', () => completion({ prompt: 'a', top_k: -2 }), 400],
  ['top_logprobs over 20', () => chat({ messages: [{ role: 'user', content: 'hi' }], logprobs: true, top_logprobs: 21 }), 400, 'top_logprobs'],
  ['completions logprobs over 20', () => completion({ prompt: 'a', logprobs: 21 }), 400, 'logprobs'],
  ['n over the limit', () => completion({ prompt: 'a', n: 5 }), 400, 'n'],
  ['n zero', () => chat({ messages: [{ role: 'user', content: 'hi' }], n: 0 }), 400, 'n'],
  ['max_tokens zero', () => completion({ prompt: 'a', max_tokens: 0 }), 400, 'max_tokens'],
  ['stop not a string', () => completion({ prompt: 'a', stop: [1] }), 400, 'stop'],
  ['stream_options without stream', () => completion({ prompt: 'a', stream_options: { include_usage: true } }), 400],
  ['chat_template from the request', () => chat({ messages: [{ role: 'user', content: 'hi' }], chat_template: '{{ 1 }}' }), 400, 'chat_template'],
  ['invalid UTF-8 in the body', () => http(server, 'POST', '/v1/completions', { raw: Buffer.concat([Buffer.from('{"model":"tiny","prompt":"a'), Buffer.from([0xff, 0xfe]), Buffer.from('"}')]), headers: { ...AUTH, 'content-type': 'application/json' } }), 400],
  ['deeply nested body', () => http(server, 'POST', '/v1/completions', { raw: '['.repeat(5000) + ']'.repeat(5000), headers: AUTH }), 400],
  ['body over the limit', () => http(server, 'POST', '/v1/completions', { raw: JSON.stringify({ model: 'tiny', prompt: 'x'.repeat(100000) }), headers: { ...AUTH, 'content-type': 'application/json' } }), 413],
  ['huge headers', () => http(server, 'GET', '/v1/models', { headers: { ...AUTH, 'x-big': 'y'.repeat(20000) } }), 431],
  ['missing API key', () => http(server, 'GET', '/v1/models'), 401],
  ['wrong API key', () => http(server, 'GET', '/v1/models', { headers: { authorization: `Bearer ${KEY}x` } }), 401],
  ['wrong API key on /metrics', () => http(server, 'GET', '/metrics', { headers: { authorization: 'Bearer nope' } }), 401],
  ['unknown route', () => http(server, 'GET', '/v1/nope', { headers: AUTH }), 404],
  ['wrong method', () => http(server, 'GET', '/v1/chat/completions', { headers: AUTH }), 405],
  ['detokenize out-of-vocabulary id', () => http(server, 'POST', '/detokenize', { body: { tokens: [1, 99999999] }, headers: AUTH }), 400, 'tokens'],
];

for (const [name, send, status, param] of cases) {
  test(name, async () => {
    assertError(await send(), status, param === undefined ? {} : { param });
    await stillServing();
  });
}

test('unknown model: 404 model_not_found (through the official client too)', async () => {
  assertError(await chat({ model: 'gpt-9', messages: [{ role: 'user', content: 'hi' }] }), 404, { code: 'model_not_found' });
  const OpenAI = (await import('./lib.mjs')).loadOpenAI();
  await assert.rejects(
    openai.chat.completions.create({ model: 'gpt-9', messages: [{ role: 'user', content: 'hi' }] }),
    (e) => e instanceof OpenAI.NotFoundError && e.code === 'model_not_found');
  await stillServing();
});

test('a bad streaming request fails with 400 before any stream byte', async () => {
  const res = await completion({ prompt: 'a', stream: true, top_p: 7 });
  assertError(res, 400);
  assert.ok(!res.text.startsWith('data:'));
  const OpenAI = (await import('./lib.mjs')).loadOpenAI();
  await assert.rejects(
    openai.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'hi' }], stream: true, temperature: -1 }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400);
  await stillServing();
});

test('/health needs no key', async () => {
  const res = await http(server, 'GET', '/health');
  assert.equal(res.status, 200);
});
