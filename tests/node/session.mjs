// The session header read through both of the SDK's ways to see a response: `.withResponse()` (the parsed
// answer and the response) on the first request, `.asResponse()` (the raw response) on the one continuing it.
import { gatewayClient, report } from "./client.mjs";

const HEADER = "X-Foldgate-Session";
const client = gatewayClient();
const first = await client.chat.completions
  .create({ model: "m", messages: [{ role: "user", content: "apples" }] })
  .withResponse();
const session = first.response.headers.get(HEADER);
const raw = await client.chat.completions
  .create({ model: "m", messages: [{ role: "user", content: "pears" }] }, { headers: { [HEADER]: session } })
  .asResponse();
const second = await raw.json();
report({
  first_session: session,
  first_content: first.data.choices[0].message.content,
  second_status: raw.status,
  second_session: raw.headers.get(HEADER),
  second_content: second.choices[0].message.content,
});
