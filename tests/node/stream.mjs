// A streamed completion read with `for await`, its content assembled from the deltas, with the usage chunk
// that `stream_options.include_usage` asks for.
import { gatewayClient, report } from "./client.mjs";

const client = gatewayClient();
const stream = await client.chat.completions.create({
  model: "anything",
  messages: [{ role: "user", content: "Which PR?" }],
  stream: true,
  stream_options: { include_usage: true },
});
const pieces = [];
const finishes = [];
let firstRole = null;
let usage = null;
let chunks = 0;
let lastHadChoices = true;
for await (const chunk of stream) {
  chunks += 1;
  lastHadChoices = chunk.choices.length > 0;
  if (chunk.usage) usage = chunk.usage;
  for (const choice of chunk.choices) {
    if (chunks === 1) firstRole = choice.delta.role ?? null;
    if (choice.delta.content) pieces.push(choice.delta.content);
    if (choice.finish_reason) finishes.push(choice.finish_reason);
  }
}
report({
  object: "chat.completion.chunk",
  first_role: firstRole,
  content: pieces.join(""),
  pieces: pieces.length,
  finishes,
  usage,
  last_chunk_has_choices: lastHadChoices,
});
