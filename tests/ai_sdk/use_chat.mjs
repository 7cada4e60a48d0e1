// Drives the server as an AI SDK app does (`useChat` uses exactly this transport and reader):
// DefaultChatTransport sends each message, readUIMessageStream assembles the assistant
// message, reconnectToStream asks to resume. Prints what it assembled, as JSON. A question
// whose turn fails goes through the chat class `useChat` is built on (AbstractChat), which
// stops reading at an `error` chunk: what it kept of the message, its status and its error.
import { DefaultChatTransport, readUIMessageStream } from "ai";

import { Chat } from "./chat.mjs";

const { BASE_URL, TOKEN, CHAT_ID } = process.env;
// No prepareReconnectToStreamRequest: the transport's default resume URL is `${api}/${id}/stream`.
const transport = new DefaultChatTransport({
  api: `${BASE_URL}/api/chat`,
  headers: { Authorization: `Bearer ${TOKEN}` },
});

const messages = [];

async function ask(text) {
  messages.push({ id: `u-${messages.length}`, role: "user", parts: [{ type: "text", text }] });
  const stream = await transport.sendMessages({
    chatId: CHAT_ID,
    messages,
    trigger: "submit-message",
    messageId: undefined,
    abortSignal: undefined,
  });
  let assembled;
  for await (const message of readUIMessageStream({
    stream,
    onError: (error) => {
      throw error;
    },
  })) {
    assembled = message;
  }
  messages.push(assembled);
  return assembled;
}

async function askAsUseChat(text) {
  const chat = new Chat({ id: CHAT_ID, transport, messages: [...messages], onError: () => {} });
  await chat.sendMessage({ text });
  return { message: chat.messages.at(-1), status: chat.status, error: chat.error?.message ?? null };
}

const theory = await ask(process.env.THEORY_QUESTION);
const quiz = await ask(process.env.QUIZ_QUESTION);
const grading = await ask(process.env.QUIZ_ANSWER);
const failed = await askAsUseChat(process.env.FAILING_QUESTION);
const resumed = await transport.reconnectToStream({ chatId: CHAT_ID });
console.log(
  JSON.stringify({ theory, quiz, grading, failed, resumed: resumed === null ? null : "stream" }),
);
