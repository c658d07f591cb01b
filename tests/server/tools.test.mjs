// Agent clients driving `rkv serve` through tool calls: the openai SDK's tool loop (runTools,
// streaming and not) and the Vercel AI SDK (`ai` with its OpenAI-compatible provider:
// generateText with tools, streamText reading the reasoning).
//
// What is real and what is scripted. Real: the clients, the HTTP server, the request parsing,
// each family's chat template from the corpus (../shared/golden/chat_templates, rendered by rkv's
// Jinja interpreter with the tools and the tool round the clients send back), the tokenizer, the
// engine, and the parsing of the answer into reasoning, content and tool calls. Scripted: what the
// model writes. The checkpoint is a random-weight tiny-qwen3 that `rkv make-model` writes, which
// cannot call tools; `rkv serve --scripted-replies` makes the engine write a fixed reply per
// request instead of sampling (the first rule whose conditions the last message meets): the
// family's call syntax first, then, once the last message is the tool's result, an answer.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, before, describe, test } from 'node:test';
import OpenAI from 'openai';
import { generateText, stepCountIs, streamText, tool } from 'ai';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { z } from 'zod';
import { postJson, repoRoot, rkvBinary, sseEvents, startServer } from './lib.mjs';

const sharedDir = process.env.RKV_SHARED_DIR || resolve(repoRoot, '../shared');
const templateDir = resolve(sharedDir, 'golden/chat_templates/templates');
const skip = existsSync(templateDir)
  ? false
  : `../shared (the chat-template corpus) is not beside the repository; set RKV_SHARED_DIR`;

const ARGS = { location: 'Paris, France', unit: 'celsius' };
const RESULT = { temperature: 18, condition: 'partly cloudy' };
const ANSWER = 'It is 18 °C and partly cloudy in Paris.';
const WEATHER_SCHEMA = {
  type: 'object',
  properties: {
    location: { type: 'string', description: 'City and country' },
    unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
  },
  required: ['location'],
};

// Each family: a real template, and what a model of that family writes (in its template's
// syntax) to call get_weather and, after the result, to answer. `reasoning`: the thought the
// server must return for the first reply, where the family writes one.
const families = [
  {
    format: 'hermes',
    template: 'Qwen-Qwen3-0.6B.jinja',
    call:
      '<think>\nThe user wants the weather: call get_weather.\n</think>\n\n' +
      '<tool_call>\n{"name": "get_weather", "arguments": {"location": "Paris, France", "unit": "celsius"}}\n</tool_call>',
    answer: `<think>\nThe tool answered.\n</think>\n\n${ANSWER}`,
    reasoning: 'The user wants the weather: call get_weather.\n',
  },
  {
    format: 'qwen3-xml',
    template: 'Qwen3.5-4B.jinja',  // its prompt opens <think>
    call:
      'I need the weather.\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=location>\n' +
      'Paris, France\n</parameter>\n<parameter=unit>\ncelsius\n</parameter>\n</function>\n</tool_call>',
    answer: `The tool answered.\n</think>\n\n${ANSWER}`,
    reasoning: 'I need the weather.\n',
  },
  {
    format: 'deepseek',
    template: 'deepseek-ai-DeepSeek-V3.1.jinja',
    call:
      '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>' +
      '{"location": "Paris, France", "unit": "celsius"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
    answer: ANSWER,
  },
  {
    format: 'harmony',
    template: 'openai-gpt-oss-120b.jinja',
    call:
      '<|channel|>analysis<|message|>Need the weather tool.<|end|><|start|>assistant' +
      '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>' +
      '{"location": "Paris, France", "unit": "celsius"}',
    answer: `<|channel|>analysis<|message|>The tool answered.<|end|><|start|>assistant<|channel|>final<|message|>${ANSWER}`,
    reasoning: 'Need the weather tool.',
  },
  {
    format: 'mistral',
    template: 'mistralai-Mistral-Nemo-Instruct-2407.jinja',
    call: '[TOOL_CALLS][{"name": "get_weather", "arguments": {"location": "Paris, France", "unit": "celsius"}}]',
    answer: ANSWER,
  },
  {
    format: 'llama3-json',
    template: 'meta-llama-Llama-3.2-3B-Instruct.jinja',
    call: '{"name": "get_weather", "parameters": {"location": "Paris, France", "unit": "celsius"}}',
    answer: ANSWER,
  },
  {
    format: 'glm',
    template: 'GLM-4.6.jinja',
    call:
      '\n<think>I need the weather.</think>\n<tool_call>get_weather\n<arg_key>location</arg_key>\n' +
      '<arg_value>Paris, France</arg_value>\n<arg_key>unit</arg_key>\n<arg_value>celsius</arg_value>\n</tool_call>',
    answer: `\n<think>The tool answered.</think>\n${ANSWER}`,
    reasoning: 'I need the weather.',
  },
];

let workDir;
let checkpoint;

before(() => {
  if (skip) return;
  workDir = mkdtempSync(join(tmpdir(), 'rkv-tools-'));
  checkpoint = join(workDir, 'tiny-qwen3');
  const made = spawnSync(rkvBinary, ['make-model', '--shape', 'tiny-qwen3', '--dtype', 'f32', '-o', checkpoint], {
    encoding: 'utf8',
  });
  assert.equal(made.status, 0, made.stderr);
});

after(() => {
  if (workDir) rmSync(workDir, { recursive: true, force: true });
});

// A server for one family: its template, and the scripted replies (the answer once the last
// message is the tool's result, the call otherwise).
async function serveFamily(family, extraRules = []) {
  const rules = join(workDir, `${family.format}.rules.json`);
  writeFileSync(
    rules,
    JSON.stringify([
      ...extraRules,
      { when_last_role: 'tool', reply: family.answer },
      { reply: family.call },
    ]),
  );
  const server = await startServer({
    model: checkpoint,
    args: ['--chat-template-file', join(templateDir, family.template), '--scripted-replies', rules],
  });
  const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'none', maxRetries: 0, timeout: 60_000 });
  return { server, client };
}

async function stopServer(server) {
  const { code, signal } = await server.stop();
  assert.deepEqual({ code, signal }, { code: 0, signal: null });
}

// The openai SDK's tool loop with one function that records its calls.
function weatherTool(calls) {
  return {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'Get the current weather for a city.',
      parameters: WEATHER_SCHEMA,
      parse: JSON.parse,
      function: (args) => {
        calls.push(args);
        return RESULT;
      },
    },
  };
}

describe('the openai SDK tool loop (runTools) on each family', { skip }, () => {
  for (const family of families) {
    test(`${family.format} (${family.template})`, async () => {
      const { server, client } = await serveFamily(family);
      try {
        for (const stream of [false, true]) {
          const calls = [];
          const runner = client.chat.completions.runTools({
            model: 'rkv',
            messages: [{ role: 'user', content: "What's the weather in Paris right now?" }],
            tools: [weatherTool(calls)],
            stream,
          });
          const content = await runner.finalContent();
          assert.deepEqual(calls, [ARGS], `stream=${stream}: the function was called once with the arguments`);
          assert.equal(content, ANSWER, `stream=${stream}`);
          // The loop: user, the assistant's call, the tool's result, the answer.
          const roles = runner.messages.map((m) => m.role);
          assert.deepEqual(roles, ['user', 'assistant', 'tool', 'assistant'], `stream=${stream}`);
          const call = runner.messages[1].tool_calls[0];
          assert.equal(call.function.name, 'get_weather');
          assert.match(call.id, family.format === 'mistral' ? /^[A-Za-z0-9]{9}$/ : /^(call_|functions\.)/);
          assert.equal(runner.messages[2].tool_call_id, call.id);
          if (family.reasoning && !stream) {
            const completions = runner.allChatCompletions();
            assert.equal(completions[0].choices[0].message.reasoning_content, family.reasoning);
            assert.equal(completions[0].choices[0].finish_reason, 'tool_calls');
          }
        }
      } finally {
        await stopServer(server);
      }
    });
  }
});

describe('the wire format of calls', { skip }, () => {
  test('a non-streamed call: content null, tool_calls, finish_reason tool_calls', async () => {
    const { server } = await serveFamily(families[0]);
    try {
      const tools = [{ type: 'function', function: { name: 'get_weather', parameters: WEATHER_SCHEMA } }];
      const r = await postJson(`${server.url}/v1/chat/completions`, {
        messages: [{ role: 'user', content: 'Weather?' }],
        tools,
      });
      assert.equal(r.status, 200, r.text);
      const choice = r.json.choices[0];
      assert.equal(choice.finish_reason, 'tool_calls');
      assert.equal(choice.message.content, null);
      assert.equal(choice.message.tool_calls.length, 1);
      assert.equal(choice.message.tool_calls[0].type, 'function');
      assert.deepEqual(JSON.parse(choice.message.tool_calls[0].function.arguments), ARGS);

      // Streamed: the thought, then the call as OpenAI streams one (index, id, type and name
      // with empty arguments, then the arguments), then finish_reason tool_calls.
      const response = await fetch(`${server.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ messages: [{ role: 'user', content: 'Weather?' }], tools, stream: true }),
      });
      const deltas = [];
      let finish;
      for await (const data of sseEvents(response.body)) {
        if (data === '[DONE]') break;
        const choice0 = JSON.parse(data).choices[0];
        if (!choice0) continue;
        if (choice0.finish_reason) finish = choice0.finish_reason;
        if (choice0.delta.tool_calls) deltas.push(...choice0.delta.tool_calls);
      }
      assert.equal(finish, 'tool_calls');
      assert.equal(deltas[0].index, 0);
      assert.match(deltas[0].id, /^call_/);
      assert.deepEqual(deltas[0].function, { name: 'get_weather', arguments: '' });
      assert.deepEqual(JSON.parse(deltas.slice(1).map((d) => d.function.arguments).join('')), ARGS);

      // tool_choice "none": no call is parsed; the call's text is the content.
      const none = await postJson(`${server.url}/v1/chat/completions`, {
        messages: [{ role: 'user', content: 'Weather?' }],
        tools,
        tool_choice: 'none',
      });
      assert.equal(none.json.choices[0].finish_reason, 'stop');
      assert.equal(none.json.choices[0].message.tool_calls, undefined);
      assert.match(none.json.choices[0].message.content, /^<tool_call>/);
    } finally {
      await stopServer(server);
    }
  });

  test('a call to a function the request did not offer stays text', async () => {
    const { server } = await serveFamily(families[0]);
    try {
      const r = await postJson(`${server.url}/v1/chat/completions`, {
        messages: [{ role: 'user', content: 'Weather?' }],
        tools: [{ type: 'function', function: { name: 'get_time', parameters: { type: 'object' } } }],
      });
      assert.equal(r.json.choices[0].finish_reason, 'stop');
      assert.equal(r.json.choices[0].message.tool_calls, undefined);
      assert.match(r.json.choices[0].message.content, /^<tool_call>\n\{"name": "get_weather"/);
    } finally {
      await stopServer(server);
    }
  });

  test('tool_choice naming a function opens its call: the model writes only the arguments', async () => {
    // The engine writes the family's opening up to the arguments (`<tool_call>\n{"name":
    // "get_weather", "arguments": `); the script is the rest of the call.
    const family = {
      ...families[0],
      call: '{"location": "Paris, France", "unit": "celsius"}}\n</tool_call>',
    };
    const { server } = await serveFamily(family);
    try {
      const r = await postJson(`${server.url}/v1/chat/completions`, {
        messages: [{ role: 'user', content: 'Weather?' }],
        tools: [{ type: 'function', function: { name: 'get_weather', parameters: WEATHER_SCHEMA } }],
        tool_choice: { type: 'function', function: { name: 'get_weather' } },
      });
      assert.equal(r.status, 200, r.text);
      assert.equal(r.json.choices[0].finish_reason, 'tool_calls');
      assert.deepEqual(JSON.parse(r.json.choices[0].message.tool_calls[0].function.arguments), ARGS);
    } finally {
      await stopServer(server);
    }
  });
});

describe('the Vercel AI SDK', { skip }, () => {
  let server;
  let model;
  before(async () => {
    ({ server } = await serveFamily(families[0]));
    const provider = createOpenAICompatible({ name: 'rkv', baseURL: `${server.url}/v1` });
    model = provider.chatModel('rkv');
  });
  after(async () => {
    if (server) await stopServer(server);
  });

  const weather = (calls) =>
    tool({
      description: 'Get the current weather for a city.',
      inputSchema: z.object({ location: z.string(), unit: z.enum(['celsius', 'fahrenheit']).optional() }),
      execute: async (args) => {
        calls.push(args);
        return RESULT;
      },
    });

  test('generateText with tools: the call, its result sent back, the answer', async () => {
    const calls = [];
    const result = await generateText({
      model,
      prompt: "What's the weather in Paris right now?",
      tools: { get_weather: weather(calls) },
      stopWhen: stepCountIs(3),
      maxRetries: 0,
    });
    assert.deepEqual(calls, [ARGS]);
    assert.equal(result.text, ANSWER);
    assert.equal(result.steps.length, 2);
    assert.equal(result.steps[0].finishReason, 'tool-calls');
    assert.equal(result.steps[0].toolCalls[0].toolName, 'get_weather');
    assert.equal(result.steps[1].finishReason, 'stop');
  });

  test('streamText reads the reasoning apart from the text', async () => {
    const calls = [];
    const result = streamText({
      model,
      prompt: "What's the weather in Paris right now?",
      tools: { get_weather: weather(calls) },
      stopWhen: stepCountIs(3),
      maxRetries: 0,
    });
    let reasoning = '';
    let text = '';
    for await (const part of result.fullStream) {
      if (part.type === 'reasoning-delta') reasoning += part.text;
      if (part.type === 'text-delta') text += part.text;
      if (part.type === 'error') throw part.error;
    }
    assert.deepEqual(calls, [ARGS]);
    assert.equal(text, ANSWER);
    assert.equal(reasoning, 'The user wants the weather: call get_weather.\nThe tool answered.\n');
  });
});
