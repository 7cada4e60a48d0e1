// The chat class `useChat` is built on (AbstractChat), with the state React would keep held
// in plain fields: what a script needs to chat as an AI SDK app does.
import { AbstractChat } from "ai";

class ChatState {
  constructor(messages) {
    this.messages = messages;
    this.status = "ready";
    this.error = undefined;
  }
  pushMessage(message) {
    this.messages = this.messages.concat(message);
  }
  popMessage() {
    this.messages = this.messages.slice(0, -1);
  }
  replaceMessage(index, message) {
    this.messages = [...this.messages.slice(0, index), message, ...this.messages.slice(index + 1)];
  }
  snapshot(value) {
    return structuredClone(value);
  }
}

export class Chat extends AbstractChat {
  constructor({ messages = [], ...options }) {
    super({ ...options, state: new ChatState(messages) });
  }
}
