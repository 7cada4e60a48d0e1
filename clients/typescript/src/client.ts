// A typed client of the AIR Coach API: chat (SSE parsed into typed events), rejoin a turn
// after a dropped connection, cancel it. `./api` is generated from the server's schema:
//   npx openapi-typescript https://<host>/openapi.json -o src/api.d.ts
import type { components, paths } from "./api";

export type ChatRequest =
  paths["/api/stream_query"]["post"]["requestBody"]["content"]["application/json"];
export type StreamEvent = components["schemas"]["StreamEvent"];
export type AnswerRequest =
  paths["/api/quiz/answers"]["post"]["requestBody"]["content"]["application/json"];
type AnswerHeaders = NonNullable<paths["/api/quiz/answers"]["post"]["parameters"]["header"]>;
export type AnswerResult =
  paths["/api/quiz/answers"]["post"]["responses"][200]["content"]["application/json"];

/** One event and its number in the turn (the SSE `id:`: pass it to `rejoin`). */
export interface Numbered {
  id: number;
  event: StreamEvent;
}

/** An error answer's body: `error` and `message` (Italian, to show as is), a 409
 * `turn_in_progress`'s `turn_id`, a 422's `detail` (where each issue is, `loc`). */
export type ErrorBody = Partial<components["schemas"]["ErrorBody"]> & {
  turn_id?: string;
  detail?: components["schemas"]["ValidationIssue"][];
};

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly body: ErrorBody,
  ) {
    super(body.message ?? `HTTP ${status}`);
  }
}

export class AirCoachClient {
  constructor(
    private readonly baseUrl: string,
    private readonly token: () => string | Promise<string>,
  ) {}

  /** Send a message; yields its events to `done`. `turnId` is known from the first byte. */
  async *chat(body: ChatRequest, signal?: AbortSignal): AsyncGenerator<Numbered & { turnId: string }> {
    const response = await this.request("/api/stream_query", {
      method: "POST",
      body: JSON.stringify({ ...body, stream: true }),
      signal,
    });
    const turnId = response.headers.get("X-Turn-ID") ?? "";
    for await (const item of parseSse(response)) yield { ...item, turnId };
  }

  /** The events of a turn after `lastEventId` (0: from the start), followed live to `done`. */
  async *rejoin(turnId: string, lastEventId = 0, signal?: AbortSignal): AsyncGenerator<Numbered> {
    const response = await this.request(`/api/turns/${encodeURIComponent(turnId)}/events`, {
      headers: { "Last-Event-ID": String(lastEventId) },
      signal,
    });
    yield* parseSse(response);
  }

  /** Ask a running turn to stop (from any instance); false when it had already ended. */
  async cancel(turnId: string): Promise<boolean> {
    try {
      await this.request(`/api/turns/${encodeURIComponent(turnId)}/cancel`, { method: "POST" });
      return true;
    } catch (error) {
      if (error instanceof ApiError && error.status === 409) return false;
      throw error;
    }
  }

  /** Grade an answer. Pass an `idempotencyKey` (a new one per answer, e.g.
   * `crypto.randomUUID()`) and send it again on a retry: the repeat gets the first grading
   * and is not recorded twice. */
  async answer(body: AnswerRequest, idempotencyKey?: string): Promise<AnswerResult> {
    const headers: AnswerHeaders = idempotencyKey === undefined ? {} : { "Idempotency-Key": idempotencyKey };
    const response = await this.request("/api/quiz/answers", {
      method: "POST",
      headers: headers as Record<string, string>,
      body: JSON.stringify(body),
    });
    return (await response.json()) as AnswerResult;
  }

  private async request(path: string, init: RequestInit): Promise<Response> {
    const headers = new Headers(init.headers);
    headers.set("Authorization", `Bearer ${await this.token()}`);
    if (init.body !== undefined) headers.set("Content-Type", "application/json");
    const response = await fetch(`${this.baseUrl}${path}`, { ...init, headers });
    if (!response.ok) throw new ApiError(response.status, await response.json().catch(() => ({})));
    return response;
  }
}

/** The SSE messages of a response as typed events (heartbeat comments skipped). */
export async function* parseSse(response: Response): AsyncGenerator<Numbered> {
  if (response.body === null) return;
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value.replace(/\r\n?/g, "\n");
    let end: number;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let id = 0;
      const data: string[] = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("id:")) id = Number(line.slice(3).trim());
        else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      }
      if (data.length > 0) yield { id, event: JSON.parse(data.join("\n")) as StreamEvent };
    }
  }
}
