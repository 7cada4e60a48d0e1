// Drives the server as an AI SDK app does (`useChat` uses exactly this transport and reader):
// DefaultChatTransport sends each message, readUIMessageStream assembles the assistant
// message, reconnectToStream asks to resume. Prints what it assembled, as JSON.
import { DefaultChatTransport, readUIMessageStream } from "ai";

const { BASE_URL, TOKEN, CHAT_ID } = process.env;
const transport = new DefaultChatTransport({
  api: `${BASE_URL}/api/chat`,
  headers: { Authorization: `Bearer ${TOKEN}` },
  prepareReconnectToStreamRequest: ({ id }) => ({
    api: `${BASE_URL}/api/chat/${id}/stream`,
    headers: { Authorization: `Bearer ${TOKEN}` },
  }),
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

const theory = await ask(process.env.THEORY_QUESTION);
const quiz = await ask(process.env.QUIZ_QUESTION);
const grading = await ask(process.env.QUIZ_ANSWER);
const resumed = await transport.reconnectToStream({ chatId: CHAT_ID });
console.log(
  JSON.stringify({ theory, quiz, grading, resumed: resumed === null ? null : "stream" }),
);
