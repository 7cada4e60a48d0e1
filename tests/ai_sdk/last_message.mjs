// Chats as `useChat` does (AbstractChat), with the transport that docs/integrating.md
// recommends: `prepareSendMessagesRequest` sends the chat id and the last message alone, the
// server keeping the conversation. A few questions, then a regeneration of the last answer.
// Prints each request's body as sent and the chat's messages, as JSON.
import { DefaultChatTransport } from "ai";

import { Chat } from "./chat.mjs";

const { BASE_URL, TOKEN, CHAT_ID } = process.env;
const sent = [];

const transport = new DefaultChatTransport({
  api: `${BASE_URL}/api/chat`,
  headers: { Authorization: `Bearer ${TOKEN}` },
  body: { tools: { web_search: false } },
  fetch: async (url, init) => {
    sent.push(JSON.parse(init.body));
    return fetch(url, init);
  },
  // As in docs/integrating.md.
  prepareSendMessagesRequest: ({ id, messages, body, trigger, messageId }) => ({
    body: { ...body, id, messages: messages.slice(-1), trigger, messageId },
  }),
});

const chat = new Chat({ id: CHAT_ID, transport, onError: () => {} });
for (const text of JSON.parse(process.env.QUESTIONS)) {
  await chat.sendMessage({ text });
}
await chat.regenerate();
console.log(
  JSON.stringify({
    sent,
    messages: chat.messages,
    status: chat.status,
    error: chat.error?.message ?? null,
  }),
);
