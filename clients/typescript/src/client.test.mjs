// Run by tests/clients/test_typescript.py against a server on loopback, once compiled:
// a chat's typed events to `done`, the same turn rejoined from its first event, a cancel of
// the ended turn, and one answer sent twice with its Idempotency-Key.
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
// A double tap: the same answer twice with one key is graded twice, recorded once.
const answer = { capitolo: 1, numero: 1, risposta: "b" };
const answers = [await client.answer(answer, "tap-1"), await client.answer(answer, "tap-1")];
console.log(JSON.stringify({ turnId, events, rejoined, cancelled, answers }));
