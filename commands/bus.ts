import { createHash } from 'node:crypto';
import { uuidV5 as uuidv5 } from '../infra/ids.js';
import { WrongExpectedVersionError } from '../infra/eventstore/errors.js';
import type { EventMetadata, EventStore, NewEvent } from '../infra/eventstore/port.js';
import type { CommandContext, Decider, DomainEvent } from '../domain/shared/decider.js';

const EVENT_ID_NAMESPACE = '6f1c7a8e-3d1f-4b59-9a43-2b8f1c0e5d77';
const MAX_ATTEMPTS = 5;
const CACHE_LIMIT = 10_000;

/** Who asked, for event metadata: the request id correlates, the command's position causes. */
export interface RequestMeta {
  correlation_id: string;
  causation_id: string;
  actor: string;
  project_id?: string;
  tenant_id?: string;
  request_key: string;
  /** Counts commands within one request, so event ids stay unique and deterministic. */
  sequence: { next: number };
}

export interface CommandResult<State, Event> {
  events: Event[];
  state: State;
  /** Global position of the last event appended, or of the stream's last event when nothing was appended. */
  position: number;
  revision: number;
}

interface CacheEntry<State> {
  state: State;
  revision: number;
  /** Position of the stream's last committed event, or the append that will produce it. */
  position: number | Promise<number>;
}

/**
 * Runs commands: load the stream's state, decide, append with the expected revision.
 *
 * States are cached per stream and commands on one stream are decided one after another in this
 * process, each on the state including the events of the commands before it, even while those are
 * still being committed. So commands on a hot stream pipeline into the store's group commit instead of
 * conflicting. The expected revision still guards every append: if another process wrote the stream,
 * or an earlier append failed, the append fails, the cache entry is dropped and the command is decided
 * again on fresh state (bounded).
 */
export class CommandBus {
  private readonly cache = new Map<string, CacheEntry<unknown>>();
  private readonly locks = new Map<string, Promise<unknown>>();

  constructor(private readonly store: EventStore, private readonly clock: () => Date = () => new Date()) {}

  async handle<State, Command, Event extends DomainEvent>(
    stream: string, decider: Decider<State, Command, Event>, command: Command, meta: RequestMeta,
  ): Promise<CommandResult<State, Event>> {
    const sequence = meta.sequence.next++;
    for (let attempt = 1; ; attempt++) {
      const decided = await this.withStreamLock(stream, () => this.decideAndEnqueue(stream, decider, command, meta, sequence));
      try {
        // Nothing to append: the answer stands once the events it was decided on are durable. If those
        // fail to append, it was decided on a state that never was: decide again.
        if (!decided.append) return { ...decided.result, position: await decided.entry.position };
        const appended = await decided.append;
        return { ...decided.result, position: appended.position, revision: appended.revision };
      } catch (error) {
        if (this.cache.get(stream) === decided.entry) this.cache.delete(stream);
        if (!(error instanceof WrongExpectedVersionError) || attempt >= MAX_ATTEMPTS) throw error;
      }
    }
  }

  private async decideAndEnqueue<State, Command, Event extends DomainEvent>(
    stream: string, decider: Decider<State, Command, Event>, command: Command, meta: RequestMeta, sequence: number,
  ) {
    const entry = (this.cache.get(stream) as CacheEntry<State> | undefined) ?? (await this.load(stream, decider));
    const now = this.clock().toISOString();
    const requestHash = createHash('sha256').update(JSON.stringify(command)).digest('hex');
    const context: CommandContext = {
      now, actor: meta.actor, project_id: meta.project_id, tenant_id: meta.tenant_id, request_key: meta.request_key, request_hash: requestHash,
    };
    const events = decider.decide(command, entry.state, context);
    if (events.length === 0) {
      return { result: { events, state: entry.state, revision: entry.revision }, append: undefined, entry };
    }
    const metadata: EventMetadata = {
      correlation_id: meta.correlation_id,
      causation_id: meta.causation_id,
      actor: meta.actor,
      ...(meta.project_id ? { project_id: meta.project_id } : {}),
      occurred_at: now,
    };
    const newEvents: NewEvent[] = events.map((e, i) => ({
      id: uuidv5(`${meta.request_key}/${stream}/${sequence}/${requestHash}/${i}`, EVENT_ID_NAMESPACE),
      type: e.type,
      data: e.data,
      metadata,
    }));
    const state = events.reduce((s, e) => decider.evolve(s, e), entry.state);
    const append = this.store.append(stream, newEvents, entry.revision < 0 ? 'no_stream' : entry.revision);
    const position = append.then((r) => r.position);
    position.catch(() => undefined);
    const next: CacheEntry<State> = { state, revision: entry.revision + events.length, position };
    this.remember(stream, next);
    return { result: { events, state, revision: next.revision }, append, entry: next };
  }

  private async load<State, Event extends DomainEvent>(stream: string, decider: Decider<State, unknown, Event>): Promise<CacheEntry<State>> {
    let state = decider.initialState();
    let revision = -1;
    let position = 0;
    for (let from = 0; ; ) {
      const page = await this.store.readStream(stream, { fromRevision: from, limit: 1000 });
      for (const e of page) {
        state = decider.evolve(state, { type: e.type, data: e.data } as Event);
        revision = e.revision;
        position = e.position;
      }
      if (page.length < 1000) break;
      from = revision + 1;
    }
    return { state, revision, position };
  }

  private remember(stream: string, entry: CacheEntry<unknown>): void {
    this.cache.delete(stream);
    this.cache.set(stream, entry);
    if (this.cache.size > CACHE_LIMIT) this.cache.delete(this.cache.keys().next().value!);
  }

  /** Commands on one stream are decided in arrival order; the lock is held until the append is queued, not committed. */
  private async withStreamLock<T>(stream: string, fn: () => Promise<T>): Promise<T> {
    const previous = this.locks.get(stream) ?? Promise.resolve();
    const run = previous.then(fn, fn);
    const tail = run.catch(() => undefined);
    this.locks.set(stream, tail);
    try {
      return await run;
    } finally {
      if (this.locks.get(stream) === tail) this.locks.delete(stream);
    }
  }

  /** Drops cached state, e.g. after an operator appended to streams from another process. */
  forget(stream?: string): void {
    if (stream) this.cache.delete(stream);
    else this.cache.clear();
  }
}
