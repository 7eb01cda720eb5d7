// Tool calls and reasoning through the whole server and the official client. A random-weight
// model never writes DeepSeek's tool-call markers, so pg_scripted_server (the same server over a
// scripted engine) plays a model that does, one token per step, markers split across deltas.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { binary, client, collectChatStream, goldenModel, http, startServer } from './lib.mjs';

const tools = [
  { type: 'function', function: { name: 'get_weather', description: 'Weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } },
  { type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: {} } } },
];
const user = (content) => [{ role: 'user', content }];
let v3;  // the model's own (DeepSeek-V3) template
let r1;  // an R1-style template whose generation prompt opens <think>
let tmpdir;

before(async () => {
  tmpdir = fs.mkdtempSync(path.join(os.tmpdir(), 'pg-scripted-'));
  const tmpl = path.join(tmpdir, 'r1.jinja');
  fs.writeFileSync(tmpl, "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}{{ '<｜User｜>' + m['content'] }}{% elif m['role'] == 'assistant' %}{{ '<｜Assistant｜>' + (m['content'] or '') + '<｜end▁of▁sentence｜>' }}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<｜Assistant｜><think>\\n' }}{% endif %}");
  const bin = binary('pg_scripted_server');
  v3 = await startServer({ bin, args: [goldenModel] });
  r1 = await startServer({ bin, args: [goldenModel, '--chat-template', tmpl] });
});
after(async () => {
  for (const s of [v3, r1]) assert.equal((await s.stop()).code, 0);
});

test('tool calls: parsed into tool_calls with finish_reason tool_calls', async () => {
  const r = await client(v3).chat.completions.create({ model: 'scripted', messages: user('SCRIPT:tool weather in Paris?'), tools });
  const c = r.choices[0];
  assert.equal(c.finish_reason, 'tool_calls');
  assert.equal(c.message.content, 'Checking.');
  assert.equal(c.message.tool_calls.length, 2);
  const [a, b] = c.message.tool_calls;
  assert.equal(a.type, 'function');
  assert.match(a.id, /^call_/);
  assert.notEqual(a.id, b.id);
  assert.equal(a.function.name, 'get_weather');
  assert.deepEqual(JSON.parse(a.function.arguments), { city: 'Paris', days: [1, 2] });
  assert.equal(b.function.name, 'get_time');
  assert.deepEqual(JSON.parse(b.function.arguments), { tz: 'CET' });
});

test('tool calls streamed as deltas join to the same calls', async () => {
  const c = client(v3);
  const full = await c.chat.completions.create({ model: 'scripted', messages: user('SCRIPT:tool'), tools });
  const s = await collectChatStream(await c.chat.completions.create({ model: 'scripted', messages: user('SCRIPT:tool'), tools, stream: true }));
  const ch = s.choices[0];
  assert.equal(ch.finish, 'tool_calls');
  assert.equal(ch.content, 'Checking.');
  assert.deepEqual(ch.toolCalls.map((t) => [t.name, t.arguments]),
    full.choices[0].message.tool_calls.map((t) => [t.function.name, t.function.arguments]));
  assert.ok(s.chunks > 10, 'arguments arrive over many chunks');
});

test('the V3.1 tool-call format is read too', async () => {
  const r = await client(v3).chat.completions.create({ model: 'scripted', messages: user('SCRIPT:tool31'), tools });
  assert.equal(r.choices[0].finish_reason, 'tool_calls');
  assert.equal(r.choices[0].message.content, null);
  assert.equal(r.choices[0].message.tool_calls[0].function.name, 'get_weather');
  assert.deepEqual(JSON.parse(r.choices[0].message.tool_calls[0].function.arguments), { city: 'Oslo' });
});

test('tool_choice none: markers are not parsed', async () => {
  const r = await client(v3).chat.completions.create({ model: 'scripted', messages: user('SCRIPT:tool31'), tools, tool_choice: 'none' });
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.equal(r.choices[0].message.tool_calls, undefined);
});

test('a conversation with tool calls and tool results renders and runs', async () => {
  const messages = [
    { role: 'user', content: 'weather?' },
    { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
    { role: 'tool', tool_call_id: 'call_1', content: '{"temp": 21}' },
  ];
  const r = await client(v3).chat.completions.create({ model: 'scripted', messages, tools });
  assert.equal(r.choices[0].finish_reason, 'stop');
  const t = await http(v3, 'POST', '/tokenize', { body: { messages, tools } });
  assert.equal(t.status, 200);
  assert.equal(r.usage.prompt_tokens, t.json.count);
});

test('reasoning: the template opens <think>; reasoning_content split from content', async () => {
  const c = client(r1);
  const r = await c.chat.completions.create({ model: 'scripted', messages: user('SCRIPT:think') });
  assert.equal(r.choices[0].message.reasoning_content, 'Let me think about 2+2.\nIt is 4.');
  assert.equal(r.choices[0].message.content, '\n\nThe answer is 4.');
  const s = await collectChatStream(await c.chat.completions.create({ model: 'scripted', messages: user('SCRIPT:think'), stream: true }));
  assert.equal(s.choices[0].reasoning, 'Let me think about 2+2.\nIt is 4.');
  assert.equal(s.choices[0].content, '\n\nThe answer is 4.');
});

test('reasoning split switched off per request', async () => {
  const r = await client(r1).chat.completions.create({ model: 'scripted', messages: user('SCRIPT:think'), separate_reasoning: false });
  assert.equal(r.choices[0].message.reasoning_content, undefined);
  assert.equal(r.choices[0].message.content, 'Let me think about 2+2.\nIt is 4.</think>\n\nThe answer is 4.');
});

test('n > 1 streams every choice to its end', async () => {
  const s = await collectChatStream(await client(v3).chat.completions.create({ model: 'scripted', messages: user('hi'), n: 3, stream: true }));
  for (let i = 0; i < 3; i++) {
    assert.equal(s.choices[i].content, 'Hello from the scripted backend.');
    assert.equal(s.choices[i].finish, 'stop');
  }
});
