// A turn replaced by a newer message, as `useChat` sees it: one chat (AbstractChat, the class
// `useChat` is built on) asks a question whose answer is slow; once its turn runs (the
// response has come), a second chat of the same id (another tab) sends the next message,
// which interrupts it. Prints, as JSON, what the first chat kept: its last message, status,
// error and what its onFinish was given.
import { DefaultChatTransport } from "ai";

import { Chat } from "./chat.mjs";

const { BASE_URL, TOKEN, CHAT_ID } = process.env;
let running;
const started = new Promise((resolve) => {
  running = resolve;
});

function transport(onResponse = () => {}) {
  return new DefaultChatTransport({
    api: `${BASE_URL}/api/chat`,
    headers: { Authorization: `Bearer ${TOKEN}` },
    fetch: async (url, init) => {
      const response = await fetch(url, init);
      onResponse(); // the turn holds the chat: its headers come once it was admitted
      return response;
    },
  });
}

let finished = null;
const first = new Chat({
  id: CHAT_ID,
  transport: transport(running),
  onError: () => {},
  onFinish: ({ finishReason, isAbort, isError }) => {
    finished = { finishReason: finishReason ?? null, isAbort, isError };
  },
});
const asked = first.sendMessage({ text: process.env.FIRST_QUESTION });
await started;
const second = new Chat({ id: CHAT_ID, transport: transport(), onError: () => {} });
await second.sendMessage({ text: process.env.SECOND_QUESTION });
await asked;
console.log(
  JSON.stringify({
    message: first.messages.at(-1),
    status: first.status,
    error: first.error?.message ?? null,
    finished,
    second: { message: second.messages.at(-1), status: second.status },
  }),
);
