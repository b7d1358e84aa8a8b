// The official MCP TypeScript SDK client against a TensorSketch server (the notes server of
// test_mcp_resources_prompts.py), over stdio (`stdio COMMAND ARGS...`) or streamable HTTP
// (`http URL`). Prints one JSON object with what it saw; the pytest test checks it.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
  CallToolResultSchema,
  LoggingMessageNotificationSchema,
  ResourceUpdatedNotificationSchema,
} from "@modelcontextprotocol/sdk/types.js";

const [kind, ...rest] = process.argv.slice(2);
const transport =
  kind === "stdio"
    ? new StdioClientTransport({ command: rest[0], args: rest.slice(1), stderr: "inherit" })
    : new StreamableHTTPClientTransport(new URL(rest[0]));

const client = new Client({ name: "tensorsketch-ts-test", version: "1.0.0" });
const logs = [];
const updates = [];
client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => logs.push(n.params));
client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => updates.push(n.params.uri));
await client.connect(transport);

const seen = { server: client.getServerVersion(), capabilities: client.getServerCapabilities() };
seen.tools = (await client.listTools()).tools.map((t) => t.name);
seen.resources = (await client.listResources()).resources.map((r) => [r.uri, r.mimeType]);
seen.templates = (await client.listResourceTemplates()).resourceTemplates.map((t) => t.uriTemplate);
seen.index = (await client.readResource({ uri: "notes://index" })).contents;
seen.logo = (await client.readResource({ uri: "notes://logo.png" })).contents;
seen.paris = (await client.readResource({ uri: "notes://topics/paris" })).contents;
try {
  await client.readResource({ uri: "notes://topics/rome" });
} catch (error) {
  seen.missing = { code: error.code, message: error.message };
}
seen.prompts = (await client.listPrompts()).prompts;
seen.prompt = (await client.getPrompt({ name: "summarize", arguments: { topic: "parsley" } })).messages;
seen.completePrompt = (
  await client.complete({ ref: { type: "ref/prompt", name: "summarize" }, argument: { name: "topic", value: "pa" } })
).completion;
seen.completeTemplate = (
  await client.complete({
    ref: { type: "ref/resource", uri: "notes://topics/{topic}" },
    argument: { name: "topic", value: "py" },
  })
).completion;
await client.setLoggingLevel("debug");
await client.subscribeResource({ uri: "notes://topics/python" });
const progress = [];
const written = await client.callTool(
  { name: "write_note", arguments: { topic: "python", text: "A snake." } },
  CallToolResultSchema,
  { onprogress: (p) => progress.push([p.progress, p.total, p.message]) },
);
seen.written = written.content;
seen.progress = progress;
for (let i = 0; i < 50 && updates.length === 0; i++) await new Promise((r) => setTimeout(r, 20));
seen.updates = updates;
seen.logs = logs.map((l) => [l.level, l.logger ?? null, l.data]);
seen.after = (await client.readResource({ uri: "notes://topics/python" })).contents[0].text;
await client.close();
process.stdout.write(JSON.stringify(seen));
