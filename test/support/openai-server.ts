import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A real HTTP server speaking the OpenAI protocol for the two calls Cairn makes:
 * `POST /v1/chat/completions` and `POST /v1/embeddings`. Replies are scripted per call (queues), with
 * defaults when a queue is empty; every request is recorded. A scripted reply can be a failure status
 * (429, 500…), a malformed body, a hang (the server never answers, or sends its headers and never ends
 * the body) for timeout tests, a body without end, or a completion in one of the shapes
 * OpenAI-compatible servers send (content parts, null content, finish_reason "length").
 */

export interface RecordedRequest {
  method: string;
  path: string;
  headers: IncomingMessage['headers'];
  body: any;
}

export type Scripted =
  /** A chat reply with this assistant content. */
  | string
  | {
    status?: number;
    /** Sent as JSON (the whole response body). */
    json?: unknown;
    /** Sent as is (e.g. malformed JSON). */
    raw?: string;
    headers?: Record<string, string>;
    /** Never answer (the connection stays open until the client gives up or the server closes). */
    hang?: boolean;
    /** Send the status line, headers and `raw` (if any), then never end the body. */
    hangAfterHeaders?: boolean;
    /**
     * A body without end: `status` (default 200), headers, then a completion's start and "x"s for as long
     * as the client reads. `closed` is told how many bytes were sent when the client closes the connection.
     */
    endless?: { closed(bytesSent: number): void };
    /** Told when the client closes the connection before the answer was sent (a hang that was given up). */
    abandoned?: () => void;
    /** The answer is sent once this resolves (to hold a provider call while the test does something else). */
    held?: Promise<void>;
    /** A chat completion whose message content is this, as is: a string, an array of content parts, null. */
    content?: unknown;
    /** The completion's finish_reason (default "stop"). */
    finishReason?: string;
    /** Further fields of the assistant message, e.g. `refusal` or `tool_calls`. */
    message?: Record<string, unknown>;
  };

export interface OpenAiServer {
  /** Base URL including `/v1`, as LLM_BASE_URL expects it. */
  url: string;
  requests: RecordedRequest[];
  /** Scripted replies to chat completions, used in order; when empty, `defaultChat` answers. */
  chat: Scripted[];
  /** Scripted replies to embeddings calls, used in order; when empty, vectors come from `embed`. */
  embeddings: Scripted[];
  defaultChat(body: any): string;
  /**
   * When set, every chat request carrying `response_format` is answered 400 with this body, before any
   * scripted reply is used (as LM Studio refuses `json_object`, or OpenAI a model without JSON mode).
   */
  responseFormatRefusal?: unknown;
  /** The default embedding of one input. */
  embed(text: string): number[];
  /** When set, an embeddings reply waits for it (to hold the vector projection at a chosen event). */
  beforeEmbeddings?: (inputs: string[]) => Promise<void>;
  chatRequests(): RecordedRequest[];
  embeddingRequests(): RecordedRequest[];
  /** Resolves when the next request arrives (recorded, its reply not yet sent). */
  nextRequest(): Promise<RecordedRequest>;
  close(): Promise<void>;
}

/** A small deterministic embedding: counts of each word hashed into 16 dimensions. */
export function bagOfWords(text: string, dim = 16): number[] {
  const v = new Array<number>(dim).fill(0);
  for (const word of text.toLowerCase().match(/[\p{L}\p{N}]+/gu) ?? []) {
    let h = 7;
    for (const c of word) h = (h * 31 + c.codePointAt(0)!) >>> 0;
    v[h % dim]! += 1;
  }
  return v;
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

/** Writes a completion's start, then "x"s while the client takes them, until it closes the connection. */
function sendEndless(res: ServerResponse, status: number, headers: Record<string, string>, closed: (bytesSent: number) => void): void {
  res.writeHead(status, { 'Content-Type': 'application/json', ...headers });
  const start = '{"choices": [{"message": {"content": "';
  const chunk = Buffer.alloc(64 * 1024, 'x');
  let sent = Buffer.byteLength(start);
  res.write(start);
  res.once('close', () => closed(sent));
  const pump = () => {
    while (!res.destroyed) {
      sent += chunk.length;
      if (!res.write(chunk)) return void res.once('drain', pump);
    }
  };
  pump();
}

function send(res: ServerResponse, status: number, body: string, headers: Record<string, string> = {}): void {
  res.writeHead(status, { 'Content-Type': 'application/json', ...headers });
  res.end(body);
}

function chatCompletion(model: string, content: unknown, finishReason = 'stop', message: Record<string, unknown> = {}) {
  return {
    id: `chatcmpl-${Math.random().toString(36).slice(2)}`,
    object: 'chat.completion',
    created: Math.floor(Date.now() / 1000),
    model,
    choices: [{ index: 0, message: { role: 'assistant', content, ...message }, finish_reason: finishReason }],
    usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
  };
}

export async function startOpenAiServer(options: { apiKey?: string } = {}): Promise<OpenAiServer> {
  const state: OpenAiServer = {
    url: '',
    requests: [],
    chat: [],
    embeddings: [],
    defaultChat: () => 'ok',
    embed: (text) => bagOfWords(text),
    chatRequests: () => state.requests.filter((r) => r.path === '/v1/chat/completions'),
    embeddingRequests: () => state.requests.filter((r) => r.path === '/v1/embeddings'),
    nextRequest: () => new Promise((resolve) => arrivals.push(resolve)),
    close: async () => undefined,
  };

  const arrivals: Array<(request: RecordedRequest) => void> = [];
  const server = createServer(async (req, res) => {
    const text = await readBody(req);
    let body: any;
    try {
      body = text ? JSON.parse(text) : undefined;
    } catch {
      body = text;
    }
    const path = (req.url ?? '').split('?')[0]!;
    const recorded = { method: req.method ?? '', path, headers: req.headers, body };
    state.requests.push(recorded);
    for (const arrived of arrivals.splice(0)) arrived(recorded);
    if (options.apiKey && req.headers.authorization !== `Bearer ${options.apiKey}`) {
      return send(res, 401, JSON.stringify({ error: { message: 'Incorrect API key provided', type: 'invalid_request_error' } }));
    }
    if (req.method !== 'POST' || (path !== '/v1/chat/completions' && path !== '/v1/embeddings')) {
      return send(res, 404, JSON.stringify({ error: { message: `no route ${req.method} ${path}` } }));
    }
    if (path === '/v1/chat/completions' && state.responseFormatRefusal !== undefined && body?.response_format !== undefined) {
      return send(res, 400, JSON.stringify(state.responseFormatRefusal));
    }
    const queue = path === '/v1/chat/completions' ? state.chat : state.embeddings;
    const scripted = queue.shift();
    if (scripted !== undefined && typeof scripted !== 'string') {
      if (scripted.abandoned) res.once('close', () => { if (!res.writableFinished) scripted.abandoned!(); });
      if (scripted.held) await scripted.held;
      if (scripted.hang) return; // never answer
      if (scripted.hangAfterHeaders) {
        res.writeHead(scripted.status ?? 200, { 'Content-Type': 'application/json', ...scripted.headers });
        return void res.write(scripted.raw ?? '{"choices": [');
      }
      if (scripted.endless) return sendEndless(res, scripted.status ?? 200, scripted.headers ?? {}, scripted.endless.closed);
      if (scripted.raw !== undefined || scripted.json !== undefined || scripted.status !== undefined) {
        const payload = scripted.raw ?? JSON.stringify(scripted.json ?? { error: { message: 'scripted failure', type: 'server_error' } });
        return send(res, scripted.status ?? 200, payload, scripted.headers);
      }
      if ('content' in scripted || scripted.finishReason !== undefined || scripted.message !== undefined) {
        const content = 'content' in scripted ? scripted.content : state.defaultChat(body);
        return send(res, 200, JSON.stringify(chatCompletion(body?.model ?? 'test-model', content, scripted.finishReason, scripted.message)));
      }
    }
    if (path === '/v1/chat/completions') {
      const content = typeof scripted === 'string' ? scripted : state.defaultChat(body);
      return send(res, 200, JSON.stringify(chatCompletion(body?.model ?? 'test-model', content)));
    }
    const inputs: string[] = Array.isArray(body?.input) ? body.input : [body?.input];
    await state.beforeEmbeddings?.(inputs.map(String));
    send(res, 200, JSON.stringify({
      object: 'list',
      model: body?.model,
      data: inputs.map((input, index) => ({ object: 'embedding', index, embedding: state.embed(String(input)) })),
      usage: { prompt_tokens: 1, total_tokens: 1 },
    }));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  state.url = `http://127.0.0.1:${port}/v1`;
  state.close = () => new Promise((resolve) => {
    server.closeAllConnections();
    server.close(() => resolve());
  });
  return state;
}
