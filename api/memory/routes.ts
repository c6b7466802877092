import type { CommandBus, CommandResult, RequestMeta } from '../../commands/bus.js';
import {
  MAX_FACTS_PER_INGEST, MAX_PERSONALITY_BYTES, MAX_REMEMBERED_REQUESTS, MAX_SESSION_BYTES, MAX_TEXT_BYTES,
  memoryDecider, memoryStream, normalizeText, requestFingerprint, textKey,
  type MemoryCommand, type MemoryEvent, type MemoryState,
} from '../../domain/memory/decider.js';
import { Type, type Static } from 'typebox';
import type { Logger } from '../../infra/logger.js';
import type { ChatProvider } from '../../infra/providers/chat.js';
import { BODY_LOG_LIMIT, ProviderError } from '../../infra/providers/http.js';
import type { ReadStore } from '../../infra/readstore/port.js';
import { MEMORIES, MEMORIES_PROJECTION, memoryDocId, type MemoryDoc } from '../../projections/memory/memories.js';
import { PERSONALITY_PROJECTION } from '../../projections/memory/personality.js';
import { ProblemError, type ProblemFieldError } from '../http/problem.js';
import { route, type RouteDef } from '../http/routes.js';
import { byteLimit, check, nonBlank, wellFormed } from '../http/validation.js';
import { exportScope } from './export.js';
import { parseFacts, UnparseableFactsError, withoutReasoning } from './facts.js';
import { chatMessages, extractionMessages, withinBudget } from './prompts.js';
import { FUSION_DEPTH, toView, type Retrieval } from './retrieval.js';
import {
  ChatResponse, ContextResponse, DEFAULT_SEARCH_LIMIT, DEFAULT_SEARCH_MODE, DeleteMemoryQuery, DeleteMemoryResponse,
  DeleteScopeResponse, ExportResponse, IngestBody, IngestResponse, PersonalityBody, PersonalityResponse, ScopeQuery, SearchBody, SearchResponse, StoreMemoryBody,
  MemoryView,
} from './schemas.js';

export interface MemoryRouteDeps {
  bus: CommandBus;
  reads: ReadStore;
  retrieval: Retrieval;
  /** Absent when LLM_BASE_URL is not set. */
  chat?: ChatProvider;
  /** How many bytes of memory texts a chat prompt is given at most (CHAT_MEMORY_MAX_BYTES; see withinBudget). */
  chatMemoryBytes: number;
  /** `signal`: the call's (see Call.signal), so a client that hangs up releases the wait. */
  waitFor(projections: string[], position: number, signal?: AbortSignal): Promise<void>;
}

/** Read lazily: a request makes its AbortSignal only if it has to wait. */
type Caller = { readonly signal: AbortSignal };

const TAG = 'Memory';
const WRITE_ERRORS = [400, 401, 403, 500];
/** The 409 of a memory command other than a store (which adds `concurrent-delete`): the memory service has no names or projects to conflict with. */
const COMMAND_CONFLICT = { 409: 'The scope kept being changed concurrently while the command was retried (`concurrency-conflict`: send it again), or a repeat whose events are in the log elsewhere (`duplicate-request`)' };
const READ_ERRORS = [400, 401, 403, 500, 503];

/** A provider failure is a 500 with a generic body; the upstream status and body go to the log only. */
async function viaProvider<T>(log: Logger, what: string, fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (error) {
    if (!(error instanceof ProviderError)) throw error;
    log.error({ provider: error.provider, upstream_status: error.status, upstream_body: error.body, reason: error.message }, `${what}: provider request failed`);
    throw new ProblemError(500, 'provider-failure', 'the model provider could not complete the request');
  }
}

function llmNotConfigured(what: string): ProblemError {
  return new ProblemError(503, 'not-configured', `${what} needs a chat provider: set LLM_BASE_URL (and LLM_CHAT_MODEL, LLM_API_KEY as needed)`);
}

/**
 * Only a request sent with an Idempotency-Key can be repeated (see api/http/app.ts: its request key is
 * then `idem:<key>`, else a random id): the fingerprint deletions and ingests record for their repeats.
 */
function repeatable(meta: RequestMeta, operation: MemoryCommand['type'], ...parts: string[]): { request_fingerprint?: string } {
  return meta.request_key.startsWith('idem:') ? { request_fingerprint: requestFingerprint(meta.request_key, operation, ...parts) } : {};
}

const sessionOf = (session: string | null | undefined) => (session === undefined || session === null || session === '' ? null : session);

function checkText(location: string, value: string, max: number) {
  return [nonBlank(location, value), byteLimit(location, value, max), wellFormed(location, value)];
}

function checkSession(value: string | null | undefined) {
  return [byteLimit('body.session', value ?? undefined, MAX_SESSION_BYTES), wellFormed('body.session', value)];
}

/** Stored texts are NFC-normalised, which can lengthen them (U+0958 is 3 bytes, its NFC form 6): the stored form must fit too. */
function normalizedLimit(location: string, given: string, normalized: string, max: number): ProblemFieldError | undefined {
  const bytes = Buffer.byteLength(normalized, 'utf8');
  if (bytes <= max || Buffer.byteLength(given, 'utf8') > max) return undefined;
  return { location, message: `must be at most ${max} bytes after Unicode NFC normalisation (is ${bytes})`, value: `${bytes} bytes` };
}

/**
 * Resolves once `running` has settled, whatever its outcome; rejects with the signal's reason if the signal aborts first
 * (the waiting client hung up), and lets go of its listener either way.
 */
function settledOrAborted(running: Promise<void>, signal: AbortSignal): Promise<void> {
  signal.throwIfAborted();
  return new Promise((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    void running.finally(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    });
  });
}

export function memoryRoutes(deps: MemoryRouteDeps): RouteDef[] {
  const { bus, reads, retrieval } = deps;
  /**
   * Ingests sent with an Idempotency-Key that are being answered on this node, by scope stream and request fingerprint:
   * a repeat that arrives meanwhile (a client retrying a slow provider call) waits for the first one's answer and is
   * answered from what it wrote, instead of asking the provider a second time. Each entry settles when its ingest ends.
   */
  const ingestsInFlight = new Map<string, Promise<void>>();

  /**
   * The memory as stored by a command: from its event, or, when nothing changed, from the scope's state.
   * `id` undefined: a store without id, which went to the memory holding the text (see resolveId).
   * Undefined when the command changed nothing and a concurrent request deleted that memory (or, without `id`,
   * changed it to another text) before the answer could be read.
   */
  async function storedView(result: CommandResult<MemoryState, MemoryEvent>, agent: string, user: string, id: string | undefined, text: string, caller: Caller): Promise<MemoryView | undefined> {
    for (const e of result.events) {
      if ((e.type === 'MemoryStored' || e.type === 'MemoryUpdated') && (id === undefined ? e.data.text === text : e.data.memory_id === id)) {
        return { id: e.data.memory_id, text: e.data.text, session: e.data.session, created_at: e.data.created_at, updated_at: e.type === 'MemoryUpdated' ? e.data.updated_at : e.data.created_at };
      }
    }
    // The state may already hold the changes of commands decided after this one (they are applied to it in place).
    const memoryId = id ?? result.state.byText.get(textKey(text))?.[0];
    if (memoryId === undefined) return undefined;
    const live = result.state.memories.get(memoryId);
    // Only while it still holds this text: else its times are those of a later change to another text, a state it never had.
    if (live && live.text_key === textKey(text)) return { id: memoryId, text, session: live.session, created_at: live.created_at, updated_at: live.updated_at };
    // A concurrent request changed this memory since: report the read model (the memory as it is).
    await deps.waitFor([MEMORIES_PROJECTION], result.position, caller.signal);
    const doc = await reads.get<MemoryDoc>(MEMORIES, memoryDocId(agent, user, memoryId));
    return doc ? toView(doc) : undefined;
  }

  /** The memories with these ids that are live (as of `position` or later), in this order. */
  async function liveViews(agent: string, user: string, ids: string[], position: number, caller: Caller): Promise<MemoryView[]> {
    await deps.waitFor([MEMORIES_PROJECTION], position, caller.signal);
    const docs = await Promise.all(ids.map((id) => reads.get<MemoryDoc>(MEMORIES, memoryDocId(agent, user, id))));
    return docs.flatMap((doc) => (doc ? [toView(doc)] : []));
  }

  /**
   * An ingest that is not a repeat: asks the provider for the text's facts and stores them in one command (a concurrent
   * request with the same key that got there first is answered instead, as a repeat is).
   */
  async function ingest(
    call: Caller & { body: Static<typeof IngestBody>; meta: RequestMeta; log: Logger }, chat: ChatProvider, stream: string,
    session: string | null, repeat: { request_fingerprint?: string },
  ): Promise<{ body: Static<typeof IngestResponse>; position: number }> {
    const { body, meta, log } = call;
    const { agent, user } = body.scope;
    const fingerprint = repeat.request_fingerprint;
    // A client that hangs up cancels the provider call (nothing is stored then).
    const reply = await viaProvider(log, 'ingest', () => chat.complete(extractionMessages(body.text, new Date()), { json: true, temperature: 0, signal: call.signal }));
    let extracted: string[];
    try {
      extracted = parseFacts(reply);
    } catch (error) {
      if (!(error instanceof UnparseableFactsError)) throw error;
      log.error({ provider: 'chat', upstream_reply: reply.slice(0, BODY_LOG_LIMIT) }, 'ingest: the chat provider\'s reply has no readable facts');
      throw new ProblemError(500, 'provider-failure', 'the model provider could not complete the request');
    }
    const facts: string[] = [];
    const texts = new Set<string>();
    let unstorable = 0;
    for (const raw of extracted) {
      const fact = normalizeText(raw);
      if (texts.has(fact)) continue; // said twice: one memory
      // Dropped like a text POST /v1/memories refuses: blank, oversize, or not well-formed Unicode.
      if (fact === '' || Buffer.byteLength(fact, 'utf8') > MAX_TEXT_BYTES || wellFormed('', fact)) {
        unstorable++;
        continue;
      }
      texts.add(fact);
      facts.push(fact);
    }
    if (unstorable > 0 && facts.length > 0) {
      log.warn({ provider: 'chat', dropped: unstorable, kept: facts.length }, 'ingest: dropped extracted facts that cannot be stored (blank, over 8,192 bytes or not well-formed Unicode)');
    }
    if (extracted.length > 0 && facts.length === 0) {
      // Blank, over the text limit or not well-formed, every one: not "the text held no facts".
      log.error({ provider: 'chat', extracted: extracted.length, upstream_reply: reply.slice(0, BODY_LOG_LIMIT) }, 'ingest: none of the extracted facts can be stored (blank, over 8,192 bytes or not well-formed Unicode)');
      throw new ProblemError(500, 'provider-failure', 'the model provider could not complete the request');
    }
    if (facts.length > MAX_FACTS_PER_INGEST) log.warn({ extracted: facts.length }, `ingest: keeping the first ${MAX_FACTS_PER_INGEST} facts`);
    facts.splice(MAX_FACTS_PER_INGEST);
    // Run even with no facts: the answer then carries the scope's position like every command's.
    const result = await bus.handle(stream, memoryDecider, { type: 'IngestFacts', data: { agent, user, session, facts, model: chat.model, ...repeat } }, meta);
    const first = fingerprint !== undefined && result.events.length === 0 ? result.state.requests.get(fingerprint) : undefined;
    // A concurrent request with the same key got there first: its facts are the answer.
    if (first?.type === 'FactsExtracted') return { body: { facts: await liveViews(agent, user, first.memory_ids, result.position, call) }, position: result.position };
    // The ingest is written whatever follows: a fact the scope already held, whose memory a concurrent request
    // deleted (or changed to another text) before this answer, is left out, as a repeat of this ingest would leave it.
    const stored: MemoryView[] = [];
    for (const fact of facts) {
      const view = await storedView(result, agent, user, undefined, fact, call);
      if (view) stored.push(view);
    }
    if (stored.length < facts.length) log.info({ facts: facts.length, answered: stored.length }, 'ingest: facts already held whose memories a concurrent request deleted or changed are left out of the answer');
    return { body: { facts: stored }, position: result.position };
  }

  return [
    route({
      method: 'POST', path: '/v1/memories', operationId: 'storeMemory', tag: TAG, auth: ['owner'],
      summary: 'Store a memory, or update one by id',
      description: 'The text is stored trimmed and NFC-normalised (at most 8,192 bytes as sent and as stored). Without `id`: a live memory of the scope that already holds the text (whatever its id) is returned unchanged when `session` is omitted or the same, and moved to the given `session` otherwise (`""` or null removes its label); a new text gets an id derived from it (SHA-256), or, when a memory with that id was since corrected by id to another text, the next free id derived from the text and a counter, so storing an old text again never undoes a correction. With `id`, the memory with that id in the scope is set to exactly this text and session (omitted: none), or created with that id if the scope has no live memory with it (e.g. after it was deleted). Responds with the stored memory and `X-Event-Position`. 409 (`concurrent-delete`) only when the store changed nothing (the text was already held) and a concurrent request deleted that memory (or, for a store without `id`, changed it to another text) before the answer could be read: sending the store again stores the text anew. A store by `id` whose memory a concurrent request changed to another text before the answer could be read answers the memory as it is then.',
      body: StoreMemoryBody,
      responses: { 200: { description: 'the stored memory', schema: MemoryView } },
      // 503: the answer can wait for the memories read model (see storedView).
      errors: [...WRITE_ERRORS, 409, 503],
      errorDescriptions: {
        409: 'The store changed nothing and a concurrent request deleted (or changed) the memory before the answer could be read (`concurrent-delete`: sending the store again stores the text anew), the scope kept being changed concurrently while the command was retried (`concurrency-conflict`: send it again), or a repeat whose events are in the log elsewhere (`duplicate-request`)',
      },
      async handler(call) {
        const { body, meta } = call;
        check(...checkText('body.text', body.text, MAX_TEXT_BYTES), ...checkSession(body.session));
        const { agent, user } = body.scope;
        const text = normalizeText(body.text);
        check(normalizedLimit('body.text', body.text, text, MAX_TEXT_BYTES));
        // An omitted session stays undefined: a memory already holding the text then keeps its label.
        const session = body.session === undefined ? {} : { session: sessionOf(body.session) };
        const id = body.id ?? undefined;
        const result = await bus.handle(memoryStream(agent, user), memoryDecider,
          { type: 'StoreMemory', data: { agent, user, ...(id !== undefined ? { memory_id: id } : {}), text, ...session } }, meta);
        const stored = await storedView(result, agent, user, id, text, call);
        if (!stored) throw new ProblemError(409, 'concurrent-delete', id === undefined ? 'the memory holding this text was deleted, or changed to another text, by a concurrent request' : `memory ${id} was deleted by a concurrent request`);
        return { body: stored, position: result.position };
      },
    }),
    route({
      method: 'POST', path: '/v1/search', operationId: 'searchMemories', tag: TAG, auth: ['owner'],
      summary: 'Search the scope\'s memories (lexical, semantic or hybrid)',
      description: `\`lexical\` (default): BM25 over the scope's live memories. \`semantic\`: cosine similarity of embeddings (no threshold: weak matches still rank). \`hybrid\`: reciprocal rank fusion of both ranks with k = 60, score = Σ 1/(60 + rank), rank from 1, over the top ${FUSION_DEPTH} (or \`limit\`, if larger) of each ranking; hits of equal score in a ranking share the rank of the first of them (1, 1, 3). A memory whose text has no words (\`...\`) has a zero vector and is never a semantic hit; a query without words (\`???\`) finds nothing in any mode. Scores are not comparable across modes. Sees every write acknowledged before the request (waits up to CONSISTENCY_TIMEOUT_MS, else 503).`,
      body: SearchBody, readModels: [MEMORIES_PROJECTION],
      responses: { 200: { description: 'scored memories, best first', schema: SearchResponse } },
      errors: READ_ERRORS,
      async handler({ body, log, signal }) {
        check(...checkText('body.query', body.query, MAX_TEXT_BYTES));
        const mode = body.mode ?? DEFAULT_SEARCH_MODE;
        retrieval.requireMode(mode);
        await retrieval.consistent(retrieval.readModels(mode), signal);
        const results = await viaProvider(log, 'search', () => retrieval.search(body.scope, body.query, mode, body.limit ?? DEFAULT_SEARCH_LIMIT, signal));
        return { body: { results } };
      },
    }),
    route({
      method: 'POST', path: '/v1/context', operationId: 'buildContext', tag: TAG, auth: ['owner'],
      summary: 'The search results plus the scope\'s personality',
      description: 'Retrieval as in POST /v1/search (same body, results, order and scores), plus the scope\'s personality text ("" when none is set). Sees every write acknowledged before the request (waits up to CONSISTENCY_TIMEOUT_MS, else 503).',
      body: SearchBody, readModels: [MEMORIES_PROJECTION, PERSONALITY_PROJECTION],
      responses: { 200: { description: 'personality ("" when none is set) and scored memories', schema: ContextResponse } },
      errors: READ_ERRORS,
      async handler({ body, log, signal }) {
        check(...checkText('body.query', body.query, MAX_TEXT_BYTES));
        const mode = body.mode ?? DEFAULT_SEARCH_MODE;
        retrieval.requireMode(mode);
        await retrieval.consistent(retrieval.readModels(mode, [PERSONALITY_PROJECTION]), signal);
        const [memories, personality] = await Promise.all([
          viaProvider(log, 'context', () => retrieval.search(body.scope, body.query, mode, body.limit ?? DEFAULT_SEARCH_LIMIT, signal)),
          retrieval.personality(body.scope),
        ]);
        return { body: { personality: personality?.personality ?? '', memories } };
      },
    }),
    route({
      method: 'PUT', path: '/v1/personality', operationId: 'setPersonality', tag: TAG, auth: ['owner'],
      summary: 'Set the scope\'s personality text',
      description: 'One explicitly configured text per scope, stored as given; setting the same text again changes nothing. No traits are inferred.',
      body: PersonalityBody,
      responses: { 200: { description: 'acknowledgement with the stored personality', schema: PersonalityResponse } },
      errors: WRITE_ERRORS,
      errorDescriptions: COMMAND_CONFLICT,
      async handler({ body, meta }) {
        check(...checkText('body.personality', body.personality, MAX_PERSONALITY_BYTES));
        const { agent, user } = body.scope;
        const result = await bus.handle(memoryStream(agent, user), memoryDecider,
          { type: 'SetPersonality', data: { agent, user, personality: body.personality } }, meta);
        const event = result.events[0];
        const updatedAt = event?.type === 'PersonalitySet' ? event.data.updated_at : result.state.personality?.updated_at;
        return { body: { scope: { agent, user }, personality: body.personality, updated_at: updatedAt ?? new Date().toISOString() }, position: result.position };
      },
    }),
    route({
      method: 'POST', path: '/v1/ingest', operationId: 'ingestFacts', tag: TAG, auth: ['owner'],
      summary: 'Extract durable facts from a text with the chat provider and store them',
      description: `Asks the chat provider (LLM_BASE_URL) for at most ${MAX_FACTS_PER_INGEST} facts as JSON and stores each like POST /v1/memories without id (same text, same memory), except that a fact a live memory already holds is returned unchanged, its session and updated_at included (or left out of the answer, never a 409, when a concurrent request deleted that memory or changed it to another text before the answer could be read: the ingest is written either way). The text itself is never stored. A reply that cannot be read as {"facts": [...]}, or whose facts are all dropped (blank, over ${MAX_TEXT_BYTES.toLocaleString('en-US')} bytes or not well-formed Unicode), is a 500, never an empty success (when only some are dropped, the others are stored and the log says how many), and so is a reply cut off by the provider's token limit before its JSON was complete; an explicit {"facts": []} stores nothing. The prompt gives the model today's date (UTC), asking it to write times the text gives relative to today ("tomorrow") as dates. A reasoning model's reasoning left in the reply (\`<think>…</think>\`, \`[THINK]…[/THINK]\`, gpt-oss's analysis channel) is not read: only the answer after it (a reply that is all reasoning is a 500). The provider is asked for JSON mode (response_format json_object); one that refuses it with a 400 naming response_format (LM Studio) is asked again without it, and not asked for it again until restart once that worked. 503 when no chat provider is configured. A repeat with the same Idempotency-Key, text and session in the same scope does not ask the provider again and writes nothing: it answers the first ingest's memories that are still live, as they are now, with the scope's current X-Event-Position; a repeat sent while the first is still being answered waits for that answer when both reach the same node (a repeat of a first that failed then asks the provider itself), and on another node asks the provider too, but writes nothing and answers the first one's facts if that was written first (the scope remembers its last ${MAX_REMEMBERED_REQUESTS} deletions and ingests sent with a key, an ingest that stored nothing included).`,
      body: IngestBody,
      responses: { 200: { description: 'the stored facts', schema: IngestResponse } },
      errors: [...WRITE_ERRORS, 503],
      errorDescriptions: COMMAND_CONFLICT,
      async handler(call) {
        const { body, meta, log } = call;
        check(...checkText('body.text', body.text, MAX_TEXT_BYTES), ...checkSession(body.session));
        const chat = deps.chat;
        if (!chat) throw llmNotConfigured('ingest');
        const { agent, user } = body.scope;
        const stream = memoryStream(agent, user);
        const session = sessionOf(body.session);
        const repeat = repeatable(meta, 'IngestFacts', body.text, session ?? '');
        const fingerprint = repeat.request_fingerprint;
        if (fingerprint === undefined) return ingest(call, chat, stream, session, repeat);
        const key = `${stream}\n${fingerprint}`;
        for (let running = ingestsInFlight.get(key); running; running = ingestsInFlight.get(key)) {
          log.info('ingest: the same request (Idempotency-Key) is being answered on this node; waiting for its answer');
          await settledOrAborted(running, call.signal);
        }
        let done!: () => void;
        ingestsInFlight.set(key, new Promise<void>((resolve) => { done = resolve; }));
        try {
          // A repeat answers the first ingest's facts without asking the provider again: the scope's state remembers it.
          const before = await bus.state(stream, memoryDecider, meta);
          const first = before.state.requests.get(fingerprint);
          if (first?.type === 'FactsExtracted') return { body: { facts: await liveViews(agent, user, first.memory_ids, before.position, call) }, position: before.position };
          return await ingest(call, chat, stream, session, repeat);
        } finally {
          ingestsInFlight.delete(key);
          done();
        }
      },
    }),
    route({
      method: 'POST', path: '/v1/chat', operationId: 'chat', tag: TAG, auth: ['owner'],
      summary: 'Answer a query with one completion over the retrieved memories and the personality',
      description: 'Retrieval as in POST /v1/search, then one non-streaming completion. The prompt is given the retrieved memories best first, as many as fit in CHAT_MEMORY_MAX_BYTES bytes of their texts (the best one always); `context.memories` are exactly those given, so it can hold fewer than `limit`. Neither the query nor the answer is stored. An answer cut off by the provider\'s token limit is returned as it is (an empty one is a 500). A reasoning model\'s reasoning left in the reply (`<think>…</think>`, `[THINK]…[/THINK]`, gpt-oss\'s analysis channel) is not part of the answer (a reply that is all reasoning is a 500). 503 when no chat provider is configured.',
      body: SearchBody, readModels: [MEMORIES_PROJECTION, PERSONALITY_PROJECTION],
      responses: { 200: { description: 'the answer and the context it was given', schema: ChatResponse } },
      errors: READ_ERRORS,
      async handler({ body, log, signal }) {
        check(...checkText('body.query', body.query, MAX_TEXT_BYTES));
        const mode = body.mode ?? DEFAULT_SEARCH_MODE;
        retrieval.requireMode(mode);
        const chat = deps.chat;
        if (!chat) throw llmNotConfigured('chat');
        await retrieval.consistent(retrieval.readModels(mode, [PERSONALITY_PROJECTION]), signal);
        const [retrieved, doc] = await Promise.all([
          viaProvider(log, 'chat', () => retrieval.search(body.scope, body.query, mode, body.limit ?? DEFAULT_SEARCH_LIMIT, signal)),
          retrieval.personality(body.scope),
        ]);
        const memories = withinBudget(retrieved, deps.chatMemoryBytes);
        if (memories.length < retrieved.length) {
          log.info({ retrieved: retrieved.length, given: memories.length, max_bytes: deps.chatMemoryBytes }, 'chat: memories left out of the prompt (CHAT_MEMORY_MAX_BYTES)');
        }
        const personality = doc?.personality ?? '';
        const reply = await viaProvider(log, 'chat', () => chat.complete(chatMessages(personality, memories, body.query), { signal }));
        // A reasoning model's reasoning (left in the content by some servers) is not the answer.
        const answer = withoutReasoning(reply);
        if (answer.trim() === '') {
          log.error({ provider: 'chat', upstream_reply: reply.slice(0, BODY_LOG_LIMIT) }, 'chat: the chat provider\'s reply has reasoning and no answer');
          throw new ProblemError(500, 'provider-failure', 'the model provider could not complete the request');
        }
        return { body: { answer, context: { personality, memories } } };
      },
    }),
    route({
      method: 'GET', path: '/v1/export', operationId: 'exportScope', tag: TAG, auth: ['owner'],
      summary: 'Every live memory of the scope with its vector, and the personality',
      description: 'Live records only, oldest first; deleted memories are never exported. A `vector` is always the embedding of the exported text (absent when embeddings are not configured or the provider refused that text). Contains personal data: treat it as private. Sees every write acknowledged before the request (waits up to CONSISTENCY_TIMEOUT_MS, else 503). Streamed (chunked, no Content-Length): the memories are read page by page as the client takes the answer, so a change made meanwhile may or may not show; no memory appears twice. A failure after the answer began closes the connection before the end of the document: a client sees an incomplete answer, never a shorter document that looks complete. So does a client that takes none of the answer for SEND_TIMEOUT_MS (default 60 s). Compressed with gzip when the request\'s Accept-Encoding takes it.',
      query: ScopeQuery, readModels: retrieval.allReadModels(),
      responses: {
        200: {
          description: 'the scope\'s data',
          schema: ExportResponse,
          headers: {
            'Content-Encoding': {
              description: '`gzip` when the request\'s Accept-Encoding takes gzip (e.g. `Accept-Encoding: gzip`): the same JSON, compressed (gzip level 1: less than half the size with vectors). Absent otherwise. The answer carries `Vary: Accept-Encoding` either way.',
              schema: Type.Literal('gzip'),
            },
          },
        },
      },
      errors: READ_ERRORS,
      async handler(call) {
        const { agent, user } = call.query;
        return { stream: await exportScope({ reads, retrieval, waitFor: deps.waitFor }, { agent, user }, call) };
      },
    }),
    route({
      method: 'DELETE', path: '/v1/memories', operationId: 'deleteMemory', tag: TAG, auth: ['owner'],
      summary: 'Delete one live memory (logically) and its search entries',
      description: `404 when the scope has no live memory with this id. The memory can be stored again with the same id later. A repeat with the same Idempotency-Key answers what the first deletion did (same body and X-Event-Position, or the same 404: a refusal sent with a key is recorded as MemoryDeletionRefused) and writes nothing, also after later changes, a memory stored since under that id included (the scope remembers its last ${MAX_REMEMBERED_REQUESTS} deletions and ingests sent with a key).`,
      query: DeleteMemoryQuery,
      responses: { 200: { description: 'deleted', schema: DeleteMemoryResponse } },
      errors: [400, 401, 403, 404, 500],
      errorDescriptions: { ...COMMAND_CONFLICT, 404: 'The scope has no live memory with this id (`not-found`)' },
      async handler({ query, meta }) {
        const { agent, user, id } = query;
        const result = await bus.handle(memoryStream(agent, user), memoryDecider,
          { type: 'DeleteMemory', data: { agent, user, memory_id: id, ...repeatable(meta, 'DeleteMemory', id) } }, meta);
        return { body: { id, deleted: 1 }, position: result.position };
      },
    }),
    route({
      method: 'DELETE', path: '/v1/scope', operationId: 'deleteScope', tag: TAG, auth: ['owner'],
      summary: 'Delete all live memories, their index entries and the personality of the scope (logically)',
      description: `An empty or unknown scope answers 200 with \`deleted: 0\` and appends nothing; sent with an Idempotency-Key it is recorded (a ScopeDeleted of 0), so that its repeat deletes nothing stored since. A repeat with the same Idempotency-Key answers what the first deletion did (same body and X-Event-Position) and writes nothing, also after later changes (the scope remembers its last ${MAX_REMEMBERED_REQUESTS} deletions and ingests sent with a key).`,
      query: ScopeQuery,
      responses: { 200: { description: 'what was deleted', schema: DeleteScopeResponse } },
      errors: WRITE_ERRORS,
      errorDescriptions: COMMAND_CONFLICT,
      async handler({ query, meta }) {
        const { agent, user } = query;
        const result = await bus.handle(memoryStream(agent, user), memoryDecider, { type: 'DeleteScope', data: { agent, user, ...repeatable(meta, 'DeleteScope') } }, meta);
        const event = result.events[0];
        const deleted = event?.type === 'ScopeDeleted' ? event.data : undefined;
        return { body: { scope: { agent, user }, deleted: deleted?.memory_count ?? 0, personality_deleted: deleted?.personality ?? false }, position: result.position };
      },
    }),
  ];
}
