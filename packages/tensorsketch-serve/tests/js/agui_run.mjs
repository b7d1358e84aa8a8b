// Drive agui_app with the AG-UI TypeScript client (@ag-ui/client's HttpAgent), as a frontend
// would, and check every event the server sends against @ag-ui/core's zod schemas.
//
// Usage: node agui_run.mjs < plan.json, where the plan is
//   {"url": "...", "threadId": "...", "runs": [step, ...]}
// and each step may carry:
//   "user": "text"             a user message added before the run (agent.addMessage)
//   "tools": [...]             the frontend tools declared for the run (RunAgentInput.tools)
//   "state": {...}             the shared state set before the run (agent.setState)
//   "answer": {"status", "payload"}  resume every interrupt the last run ended with
// It prints one JSON object: {"runs": [{events, schemaErrors, error, result, interrupts,
// messages, state}]}. The raw SSE frames are read from a copy of each response body (the
// client's own `fetch` option), so the schema check sees exactly what the server sent.

import { HttpAgent, randomUUID } from "@ag-ui/client";
import { EventSchemas } from "@ag-ui/core/schemas";

const input = await new Promise((resolve) => {
  let text = "";
  process.stdin.setEncoding("utf8");
  process.stdin.on("data", (chunk) => (text += chunk));
  process.stdin.on("end", () => resolve(text));
});
const plan = JSON.parse(input);

let frames = [];
const recordingFetch = async (url, init) => {
  const response = await fetch(url, init);
  const [forClient, forCheck] = response.body ? response.body.tee() : [null, null];
  if (forCheck) {
    frames.push(
      new Response(forCheck).text().then((text) =>
        text
          .split("\n\n")
          .filter((frame) => frame.trim())
          .map((frame) =>
            frame
              .split("\n")
              .filter((line) => line.startsWith("data: "))
              .map((line) => line.slice("data: ".length))
              .join("\n"),
          ),
      ),
    );
  }
  return new Response(forClient, {
    status: response.status,
    statusText: response.statusText,
    headers: response.headers,
  });
};

const agent = new HttpAgent({ url: plan.url, threadId: plan.threadId, fetch: recordingFetch });
const report = { runs: [] };

for (const step of plan.runs) {
  frames = [];
  if (step.user !== undefined) {
    agent.addMessage({ id: randomUUID(), role: "user", content: step.user });
  }
  if (step.state !== undefined) {
    agent.setState(step.state);
  }
  const parameters = { runId: randomUUID(), tools: step.tools ?? [] };
  if (step.answer !== undefined) {
    parameters.resume = agent.pendingInterrupts.map((interrupt) => ({
      interruptId: interrupt.id,
      status: step.answer.status ?? "resolved",
      ...(step.answer.payload === undefined ? {} : { payload: step.answer.payload }),
    }));
  }
  const events = [];
  const run = { events, schemaErrors: [], error: null, result: null };
  try {
    const outcome = await agent.runAgent(parameters, {
      onEvent: ({ event }) => {
        events.push(event);
      },
    });
    run.result = outcome.result ?? null;
  } catch (error) {
    run.error = String(error && error.message ? error.message : error);
  }
  for (const data of (await Promise.all(frames)).flat()) {
    let raw;
    try {
      raw = JSON.parse(data);
    } catch (error) {
      run.schemaErrors.push({ data, issues: `not JSON: ${error}` });
      continue;
    }
    const checked = EventSchemas.safeParse(raw);
    if (!checked.success) {
      run.schemaErrors.push({ event: raw, issues: checked.error.issues });
    }
  }
  run.interrupts = agent.pendingInterrupts;
  run.messages = agent.messages;
  run.state = agent.state;
  report.runs.push(run);
  if (run.error !== null) break;
}

process.stdout.write(JSON.stringify(report));
