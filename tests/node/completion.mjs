// A plain (not streamed) completion: the answer object as the SDK parsed it.
import { gatewayClient, report } from "./client.mjs";

const client = gatewayClient();
const answer = await client.chat.completions.create({
  model: "anything",
  messages: [{ role: "user", content: process.env.FOLDGATE_PROMPT ?? "Which PR holds the login fix?" }],
});
report({
  object: answer.object,
  model: answer.model,
  role: answer.choices[0].message.role,
  content: answer.choices[0].message.content,
  finish_reason: answer.choices[0].finish_reason,
  usage: answer.usage,
});
