// `models.list()`: the bots the gateway offers, as the SDK's page of models.
import { gatewayClient, report } from "./client.mjs";

const ids = [];
const objects = [];
for await (const model of gatewayClient().models.list()) {
  ids.push(model.id);
  objects.push(model.object);
}
report({ ids, objects });
