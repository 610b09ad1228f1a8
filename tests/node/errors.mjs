// Requests the gateway refuses, as the SDK reports them: a wrong key, and a malformed message.
import { describeError, gatewayClient, report } from "./client.mjs";

async function refusal(request) {
  try {
    await request();
  } catch (error) {
    return describeError(error);
  }
  return { name: null };
}

const wrongKey = await refusal(() =>
  gatewayClient("not-a-key-of-this-gateway-at-all").chat.completions.create({
    model: "m",
    messages: [{ role: "user", content: "hi" }],
  }),
);
const wrongKeyClass = await refusal(() => gatewayClient("wrong-key-0123456789abcdefgh").models.list());
const malformed = await refusal(() =>
  gatewayClient().chat.completions.create({ model: "m", messages: [{ role: "wizard", content: "hi" }] }),
);
report({
  wrong_key: wrongKey,
  wrong_key_models: wrongKeyClass,
  malformed,
});
