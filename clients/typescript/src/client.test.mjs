// Run by tests/clients/test_typescript.py against a server on loopback, once compiled:
// a chat's typed events to `done`, the same turn rejoined from its first event.
import { AirCoachClient } from "./client.js";

const client = new AirCoachClient(process.env.BASE_URL, () => process.env.TOKEN);
const events = [];
let turnId = "";
for await (const item of client.chat({ query: process.env.QUESTION })) {
  turnId = item.turnId;
  events.push(item);
}
const rejoined = [];
for await (const item of client.rejoin(turnId, 0)) rejoined.push(item);
const cancelled = await client.cancel(turnId);
console.log(JSON.stringify({ turnId, events, rejoined, cancelled }));
