import { hash } from 'node:crypto';
import { uuidV5 as uuidv5 } from '../infra/ids.js';
import { WrongExpectedVersionError } from '../infra/eventstore/errors.js';
import type { AppendResult, EventMetadata, EventStore, ExpectedRevision, NewEvent } from '../infra/eventstore/port.js';
import { isRepeatable, type CommandContext, type Decider, type DomainEvent } from '../domain/shared/decider.js';

const EVENT_ID_NAMESPACE = '6f1c7a8e-3d1f-4b59-9a43-2b8f1c0e5d77';
/** Conflicts of its own with another writer a command is decided again after (see handleAll); the next one is a 409. */
const MAX_CONFLICTS = 5;
/**
 * Decisions a command gets in all, most of them lost with an append of this node's that they were decided behind,
 * each another command's conflict: a bound for a stream contended without end, far past what contention reaches.
 */
const MAX_DECISIONS = 10 * MAX_CONFLICTS;
/** After its n-th conflict (n ≥ 2) a command waits a random time up to BACKOFF_MS·2ⁿ⁻² before it is decided again. */
const BACKOFF_MS = 5;

/**
 * Bounds of the cached states: streams, and their weight in items (Decider.size: a memory scope weighs its live
 * memories, a project's configuration its keys; a state of any other decider weighs 1).
 */
export interface StateCacheLimits {
  maxEntries: number;
  maxWeight: number;
}
/** What an item of a cached state takes, estimated: a memory of a scope's state (with its byText entry) measured ~470 bytes. */
export const STATE_ITEM_BYTES = 512;
/** The limits for a cache of `mb` MiB (STATE_CACHE_MB), at most 10,000 streams. */
export const cacheLimits = (mb: number): StateCacheLimits => ({ maxEntries: 10_000, maxWeight: Math.floor((mb * 2 ** 20) / STATE_ITEM_BYTES) });
export const DEFAULT_CACHE_LIMITS: StateCacheLimits = cacheLimits(256);

/**
 * The request key as the first part of an event id's name, whose parts are joined with '/': a key (the client's
 * Idempotency-Key) holding '/' would let "a/b" on stream "c" and "a" on stream "b/c" name one id. Escaped, the key
 * has no '/', so the name splits one way only; keys without '/' or '%' (every generated one) are unchanged.
 */
const idName = (requestKey: string): string => requestKey.replace(/%/g, '%25').replace(/\//g, '%2F');

/** Who asked, for event metadata: the request id correlates, the command's position causes. */
export interface RequestMeta {
  correlation_id: string;
  causation_id: string;
  actor: string;
  project_id?: string;
  tenant_id?: string;
  /** `idem:<Idempotency-Key>` for a request the client may repeat, else an id of this request alone. */
  request_key: string;
  /** Counts commands within one request, so event ids stay unique and deterministic. */
  sequence: { next: number };
}

/** One command of CommandBus.handleAll. */
export interface Step<State, Command, Event extends DomainEvent> {
  stream: string;
  decider: Decider<State, Command, Event>;
  command: Command;
}

export interface CommandResult<State, Event> {
  events: Event[];
  state: State;
  /** Global position of the last event appended, or of the stream's last event when nothing was appended. */
  position: number;
  revision: number;
}

/**
 * A stream's state at `revision`, as cached. An entry decided on another (an append on its way) holds that
 * entry and the events decided, and applies them only when its state is first asked for (by the next
 * decision, or the answer once the append is written). Deciders' evolve changes a state in place, so until
 * then the entry below still holds the log's state: when the append fails (another node wrote the stream),
 * the next decision reads only the events written since, not the whole stream again.
 */
class CacheEntry<State> {
  /** Its state is the log's at `revision`: read from the log, or its own append was written. */
  durable: boolean;
  /** Its state was changed in place by the entry built on it (or by reading newer events into it): no longer the one at `revision`. */
  spent = false;
  /** The log may have moved past this entry (the append decided on it failed): read it before deciding on it again. */
  suspect = false;
  /** The entry decided on this one. */
  heir?: CacheEntry<State>;
  /** What the state weighs in the cache (Decider.size): for an entry built on another, that one's state as decided on plus one per event. */
  readonly weight: number;
  private value?: State;
  private broken?: { error: unknown };
  private unapplied?: { below: CacheEntry<State>; events: DomainEvent[]; evolve: (state: State, event: DomainEvent) => State };

  constructor(
    readonly revision: number,
    /** Id of the event at `revision` (none for a stream with no events): the append decided on this state names it. */
    readonly lastEventId: string | undefined,
    /** Position of the stream's last committed event, or the append that will produce it. */
    public position: number | Promise<number>,
    state: { value: State } | { below: CacheEntry<State>; events: DomainEvent[]; evolve: (state: State, event: DomainEvent) => State },
    weight: number,
  ) {
    this.durable = 'value' in state;
    this.weight = weight;
    if ('value' in state) this.value = state.value;
    else {
      this.unapplied = state;
      state.below.heir = this;
    }
  }

  get state(): State {
    if (this.broken) throw this.broken.error;
    if (this.unapplied) {
      const { below, events, evolve } = this.unapplied;
      if (below.heir !== this) throw new Error('command bus: a cached state was taken back from under the decision built on it');
      const base = below.state;
      below.spent = true;
      try {
        this.value = events.reduce(evolve, base);
      } catch (error) {
        // evolve threw part way, its state changed in place: this entry has no state, now or later (not undefined).
        this.broken = { error };
        throw error;
      }
      this.unapplied = undefined;
    }
    return this.value as State;
  }

  /** Still the log's state at `revision`: newer events can be read into it instead of the whole stream. */
  get current(): boolean {
    return this.durable && !this.spent;
  }
}

/**
 * The cached states by stream, least recently written first: the oldest go when there are more than `maxEntries`
 * or they weigh more than `maxWeight` together, except the one just cached (a scope heavier than the whole budget
 * is still decided on its cached state, not read from the log again for every command).
 */
class StateCache {
  private readonly entries = new Map<string, CacheEntry<any>>();
  private weight = 0;

  constructor(private readonly limits: StateCacheLimits) {}

  get(stream: string): CacheEntry<any> | undefined {
    return this.entries.get(stream);
  }

  set(stream: string, entry: CacheEntry<any>): void {
    this.delete(stream);
    this.entries.set(stream, entry);
    this.weight += entry.weight;
    for (const [oldest] of this.entries) {
      if (oldest === stream || (this.entries.size <= this.limits.maxEntries && this.weight <= this.limits.maxWeight)) break;
      this.delete(oldest);
    }
  }

  delete(stream: string): void {
    const entry = this.entries.get(stream);
    if (entry === undefined) return;
    this.entries.delete(stream);
    this.weight -= entry.weight;
  }

  clear(): void {
    this.entries.clear();
    this.weight = 0;
  }

  /** Cached streams and their total weight. */
  get stats(): { entries: number; weight: number } {
    return { entries: this.entries.size, weight: this.weight };
  }
}

/**
 * The append wrote the events decided at `revision`: not an idempotent replay of an earlier request's (ending at
 * another revision, or, if another node wrote that request's events just past the state decided on, at this one,
 * which only a store that says `written` can tell).
 */
const isWritten = (result: AppendResult, revision: number): boolean => result.revision === revision && result.written !== false;

/** `entry` is `failed`, or was decided on it (or on one decided on it, …): it stands on what `failed` was to append. */
function standsOn(entry: CacheEntry<unknown> | undefined, failed: CacheEntry<unknown>): boolean {
  for (let at: CacheEntry<unknown> | undefined = failed; at; at = at.heir) if (at === entry) return true;
  return false;
}

/** A refusal decided on a state that includes an append still on its way (`append`: its position). */
class RefusedBehindAppend {
  constructor(readonly refusal: unknown, readonly append: Promise<number>) {}
}

/**
 * Runs commands: load the stream's state, decide, append with the expected revision.
 *
 * States are cached per stream and commands on one stream are decided one after another in this
 * process, each on the state including the events of the commands before it, even while those are
 * still being committed. So commands on a hot stream pipeline into the store's group commit instead of
 * conflicting. The expected revision still guards every append: if another process wrote the stream,
 * or an earlier append failed, the append fails, the cache entry is dropped and the command is decided
 * again on fresh state (bounded). A decision that appends nothing (no change, or a refusal) has no
 * expected revision to guard it, so it stands only after a look at the stream's current revision, and
 * once the appends it was decided behind are written (not failed, nor found to be idempotent replays).
 */
export class CommandBus {
  private readonly cache: StateCache; // each stream holds its own decider's state
  private readonly locks = new Map<string, Promise<unknown>>();

  constructor(private readonly store: EventStore, private readonly clock: () => Date = () => new Date(), limits: StateCacheLimits = DEFAULT_CACHE_LIMITS) {
    this.cache = new StateCache(limits);
  }

  /** The cached states: how many streams, and what they weigh (Decider.size). */
  get cacheStats(): { entries: number; weight: number } {
    return this.cache.stats;
  }

  async handle<State, Command, Event extends DomainEvent>(
    stream: string, decider: Decider<State, Command, Event>, command: Command, meta: RequestMeta,
  ): Promise<CommandResult<State, Event>> {
    const [result] = await this.handleAll([{ stream, decider, command }], meta);
    return result as CommandResult<State, Event>;
  }

  /**
   * The stream's state as the next command would be decided on (cached, including appends on their way,
   * checked against the log like any decision that appends nothing), with the position once it is durable.
   */
  async state<State, Command, Event extends DomainEvent>(stream: string, decider: Decider<State, Command, Event>, meta: RequestMeta): Promise<CommandResult<State, Event>> {
    const look: Decider<State, null, Event> = { initialState: decider.initialState, evolve: decider.evolve, size: decider.size, decide: () => [] };
    return this.handle(stream, look, null, meta);
  }

  /** Decides a command on the stream's (cached) state; the events to append, if any, with their ids and metadata. */
  private async decideOn<State, Command, Event extends DomainEvent>(
    stream: string, decider: Decider<State, Command, Event>, command: Command, meta: RequestMeta, sequence: number, now: string,
  ) {
    let cached = this.cache.get(stream) as CacheEntry<State> | undefined;
    if (cached?.suspect) cached = await this.refresh(stream, decider, cached);
    let entry = cached ?? (await this.read(stream, decider));
    const requestHash = hash('sha256', JSON.stringify(command), 'hex');
    const context: CommandContext = {
      now, actor: meta.actor, project_id: meta.project_id, tenant_id: meta.tenant_id, request_key: meta.request_key, request_hash: requestHash,
    };
    let state: State;
    try {
      state = entry.state;
    } catch (error) {
      // evolve threw applying a pending decision's events: not a refusal, and the entry is no state to decide on again.
      if (this.cache.get(stream) === entry) this.cache.delete(stream);
      throw error;
    }
    let events: Event[] | undefined;
    let refusal: unknown;
    try {
      events = decider.decide(command, state, context);
    } catch (error) {
      refusal = error;
    }
    // A refusal or a decision that changes nothing appends nothing, so no expected revision would catch a
    // cached state that another node has moved past (a key it created, a value it changed): such an
    // answer stands only on the stream as it is. Nor does the expected revision guard the repeat of a
    // request sent with an Idempotency-Key: its event ids are the first one's, which the log answers as a
    // replay; if another node wrote them just past the cached state, that replay sits at the very revision
    // expected here and would pass for this decision's append (its own times, not the log's, answered and cached).
    if (events === undefined || events.length === 0 || isRepeatable(meta.request_key)) {
      if (cached && (await this.isStale(stream, cached))) {
        entry = await this.refresh(stream, decider, cached);
        events = decider.decide(command, entry.state, context);
      } else if (events === undefined) {
        // Refused on a state that includes an append on its way, which may still fail or turn out to be an
        // idempotent replay that writes nothing: the refusal stands only once that append is written (handleAll).
        if (entry.position instanceof Promise) throw new RefusedBehindAppend(refusal, entry.position);
        throw refusal;
      }
    }
    if (events.length === 0) return { events, entry, revision: entry.revision, newEvents: undefined, expected: entry.revision as ExpectedRevision };
    const metadata: EventMetadata = {
      correlation_id: meta.correlation_id,
      causation_id: meta.causation_id,
      actor: meta.actor,
      ...(meta.project_id ? { project_id: meta.project_id } : {}),
      ...(meta.tenant_id ? { tenant_id: meta.tenant_id } : {}),
      occurred_at: now,
    };
    const newEvents: NewEvent[] = events.map((e, i) => ({
      id: uuidv5(`${idName(meta.request_key)}/${stream}/${sequence}/${requestHash}/${i}`, EVENT_ID_NAMESPACE),
      type: e.type,
      data: e.data,
      metadata,
    }));
    const expected: ExpectedRevision = entry.revision < 0 ? 'no_stream' : entry.revision;
    // The state after these events weighs at most what the one decided on weighs, plus one per event.
    const weight = (decider.size?.(entry.state) ?? 1) + events.length;
    return { events, entry, revision: entry.revision + events.length, newEvents, expected, evolve: decider.evolve as (state: State, event: DomainEvent) => State, weight };
  }

  /**
   * Caches the state after an append that is on its way, so the next command on the stream is decided on it.
   * That state stands only if the append writes its events: one that turns out to be an idempotent replay
   * (the ids are in the log already, at an earlier revision) wrote nothing, so what was decided on it is
   * decided again, as after a version conflict.
   */
  private pending<State>(
    stream: string, decided: { entry: CacheEntry<State>; events: DomainEvent[]; revision: number; newEvents?: NewEvent[]; expected: ExpectedRevision; evolve?: (state: State, event: DomainEvent) => State; weight?: number },
    appended: Promise<AppendResult>,
  ): CacheEntry<State> {
    const position = appended.then(({ revision, position: at, written }) => {
      if (revision !== decided.revision || written === false) throw new WrongExpectedVersionError(stream, decided.expected, revision);
      next.durable = true;
      next.position = at;
      return at;
    });
    position.catch(() => undefined);
    const next = new CacheEntry<State>(decided.revision, decided.newEvents?.at(-1)?.id, position, { below: decided.entry, events: decided.events, evolve: decided.evolve! }, decided.weight!);
    this.remember(stream, next);
    return next;
  }

  /**
   * Several commands on different streams whose events commit together (`handle` is the case of one): all or none where the store
   * supports it (embedded), else in order (see EventStore.appendAll). Each command is decided on its
   * stream's state as above; a conflict on any stream decides them all again (bounded). A decision that
   * throws (a DomainError) appends nothing.
   */
  async handleAll(steps: Array<Step<any, any, any>>, meta: RequestMeta): Promise<Array<CommandResult<unknown, DomainEvent>>> {
    const sequences = steps.map(() => meta.sequence.next++);
    const streams = steps.map((s) => s.stream);
    if (new Set(streams).size !== streams.length) throw new Error('handleAll: one command per stream');
    let conflicts = 0;
    for (let attempt = 1; ; attempt++) {
      let results: Array<CommandResult<unknown, DomainEvent>>;
      const decided = await this.withStreamLocks([...streams].sort(), async () => {
        const each = [];
        // One time for the commands of one request: its events (a name reservation and its agent) happened together.
        const now = this.clock().toISOString();
        // A later step refused leaves the earlier steps' cached states as they were: deciding does not change them.
        for (const [i, step] of steps.entries()) each.push(await this.decideOn(step.stream, step.decider, step.command, meta, sequences[i]!, now));
        const writing = each.flatMap((d, i) => (d.newEvents
          ? [{ i, stream: streams[i]!, events: d.newEvents, expected: d.expected, expectedLastEventId: d.entry.lastEventId }]
          : []));
        const repeat = isRepeatable(meta.request_key);
        const appends = writing.map(({ stream, events, expected, expectedLastEventId }) => ({ stream, events, expected, expectedLastEventId, repeat }));
        // Decided on a state that includes appends still on their way: a store that cannot check the last
        // event id gets this append only once those succeeded (if one fails, this one is decided again). So
        // does every store when a step that appends nothing was decided on such a state: its decision stands
        // only if they succeed, and the steps that append must not be written without it (all or none).
        const before = each.flatMap((d) => (d.entry.position instanceof Promise && (d.newEvents ? !this.store.verifiesLastEventId : writing.length > 0) ? [d.entry.position] : []));
        const append = writing.length === 0 ? undefined
          : before.length === 0 ? this.store.appendAll(appends)
            : Promise.all(before).then(() => this.store.appendAll(appends));
        const entries = each.map((d, i) => {
          const k = writing.findIndex((w) => w.i === i);
          return k < 0 || !append ? d.entry : this.pending(streams[i]!, d, append.then((r) => r[k]!));
        });
        return { each, entries, append, writing };
      }).catch((error: unknown) => (error instanceof RefusedBehindAppend ? error : Promise.reject(error)));
      if (decided instanceof RefusedBehindAppend) {
        const outcome = await decided.append.then(() => ({ written: true as const }), (error: unknown) => ({ written: false as const, error }));
        if (outcome.written) throw decided.refusal;
        if (attempt >= MAX_DECISIONS) throw outcome.error;
        continue; // the refusal was decided on a state that never was: decide again on the log's (no conflict of its own)
      }
      try {
        const appended = decided.append ? await decided.append : [];
        decided.writing.forEach(({ i, stream }, k) => {
          // An idempotent replay (the event ids were appended before, by an earlier request with the same
          // Idempotency-Key) answers with the original revision and writes nothing: the state cached for
          // this stream includes events that were not appended now, so it must not be decided on again;
          // nor may a state decided on top of it since (its append fails on the revision, but a decision
          // that appends nothing would stand on events that were never written).
          const cached = this.cache.get(stream);
          if (!isWritten(appended[k]!, decided.each[i]!.revision) && cached && cached.revision >= decided.each[i]!.revision) this.cache.delete(stream);
        });
        results = await Promise.all(decided.each.map(async (d, i) => {
          const k = decided.writing.findIndex((w) => w.i === i);
          if (k >= 0) {
            const { position, revision } = appended[k]!;
            if (isWritten(appended[k]!, d.revision)) return { events: d.events, state: decided.entries[i]!.state, position, revision };
            // An idempotent replay: this decision was not written. Answer with what was, and with the stream as it is.
            return { ...(await this.replayed(streams[i]!, steps[i]!.decider, decided.writing[k]!.events, revision)), position, revision };
          }
          // Nothing to append: the answer stands once the events it was decided on are durable. If those
          // fail to append, it was decided on a state that never was: decide again.
          return { events: d.events, state: d.entry.state, revision: d.revision, position: await decided.entries[i]!.position };
        }));
      } catch (error) {
        streams.forEach((stream, i) => { if (this.cache.get(stream) === decided.entries[i]) this.cache.delete(stream); });
        // What is cached for a stream this call appended to may stand on the failed append (a command
        // decided on it since, whose own append will fail too): the next command reads the stream from the log.
        if (decided.append) {
          for (const { i, stream } of decided.writing) {
            // What stands on the failed append goes, not a state decided since on the log's (by a command that failed
            // before this one and was decided again: dropped, the next command would be decided without its append).
            if (standsOn(this.cache.get(stream), decided.entries[i]!)) this.cache.delete(stream);
            // The state this append was decided on is still the log's at its revision if nothing has been decided
            // on the failed append since (which would have applied its events to it, in place): keep it, to read
            // only what was written since (another node's events, or this append's after all, if its outcome was unknown).
            const below = decided.each[i]!.entry;
            if (below.heir === decided.entries[i] && below.current && this.cache.get(stream) === undefined) {
              below.heir = undefined;
              below.suspect = true;
              this.remember(stream, below);
            }
          }
        }
        if (!(error instanceof WrongExpectedVersionError)) throw error;
        // Only a conflict of this command's own decision counts: one made on the log's state (or on appends of this
        // node's that were written) that another writer got ahead of. The commands decided behind an append of this
        // node's that failed fail with it, each on a state that never was, without a try of their own: they are
        // decided again at once, uncounted. The first conflict may only mean that the cached state was behind, and
        // is decided again at once too; a decision on the state just read that conflicts again meets a writer busy
        // on the stream now, and waits a random, growing time first (full jitter), so that the writers part.
        if (await this.decidedOnWritten(decided.each)) {
          if (++conflicts >= MAX_CONFLICTS) throw error;
          if (conflicts > 1) await new Promise((resolve) => setTimeout(resolve, Math.random() * BACKOFF_MS * 2 ** (conflicts - 2)));
        }
        if (attempt >= MAX_DECISIONS) throw error;
        continue;
      }
      // A refusal recorded for a request sent with an Idempotency-Key, appended now or, for a repeat, found in
      // the log (the first request's): the answer is that refusal.
      for (const [i, result] of results.entries()) {
        for (const event of result.events) {
          const refusal = steps[i]!.decider.refusal?.(event);
          if (refusal) throw refusal;
        }
      }
      return results;
    }
  }

  /**
   * The events an idempotent replay found in the log (the same ids, appended by the first request with the
   * same key, ending at `revision`) and the stream's state from the log. A decision made again on a later
   * state (a request older than a decider remembers) can differ from what the first one wrote: the answer
   * must be what was written, not what would have been.
   */
  private async replayed<State, Event extends DomainEvent>(stream: string, decider: Decider<State, unknown, Event>, ids: NewEvent[], revision: number) {
    const stored = await this.store.readStream(stream, { fromRevision: revision - ids.length + 1, limit: ids.length });
    if (stored.length !== ids.length || stored.some((e, i) => e.id !== ids[i]!.id)) throw new Error(`idempotent replay on ${stream}: the log does not hold the events it reported`);
    const { state } = await this.read(stream, decider);
    return { events: stored.map((e) => ({ type: e.type, data: e.data }) as Event), state };
  }

  /** Every state these decisions were made on is the log's: read from it, or including only appends that were written. */
  private decidedOnWritten(decisions: Array<{ entry: CacheEntry<unknown> }>): Promise<boolean> {
    return Promise.all(decisions.map((d) => d.entry.position)).then(() => true, () => false);
  }

  /** The log has events of `stream` past the cached state: another process appended to it. */
  private async isStale<State>(stream: string, entry: CacheEntry<State>): Promise<boolean> {
    const info = await this.store.streamInfo(stream);
    return (info?.revision ?? -1) > entry.revision;
  }

  /**
   * The stream's state from the log: read on from `entry` (dropped from the cache) if it is still the log's state
   * at its revision, else read whole; cached.
   */
  private async refresh<State, Event extends DomainEvent>(stream: string, decider: Decider<State, unknown, Event>, entry: CacheEntry<State>): Promise<CacheEntry<State>> {
    if (this.cache.get(stream) === entry) this.cache.delete(stream);
    const fresh = await this.read(stream, decider, entry.current && entry.revision >= 0 ? entry : undefined);
    this.remember(stream, fresh);
    return fresh;
  }

  /**
   * The stream's state from the log, read whole, or from `from` on: its state, changed in place by the events
   * after its revision, once the log shows that it still holds `from`'s last event at that revision.
   */
  private async read<State, Event extends DomainEvent>(stream: string, decider: Decider<State, unknown, Event>, from?: CacheEntry<State>): Promise<CacheEntry<State>> {
    let state = from ? from.state : decider.initialState();
    let revision = from?.revision ?? -1;
    let position = typeof from?.position === 'number' ? from.position : 0;
    let lastEventId = from?.lastEventId;
    if (from) from.spent = true;
    for (let at = Math.max(revision, 0); ; ) {
      const page = await this.store.readStream(stream, { fromRevision: at, limit: 1000 });
      for (const e of page) {
        if (from && e.revision === from.revision) {
          if (e.id !== from.lastEventId) return this.read(stream, decider); // not the stream it was: read it whole
          continue;
        }
        state = decider.evolve(state, { type: e.type, data: e.data } as Event);
        revision = e.revision;
        position = e.position;
        lastEventId = e.id;
      }
      if (from && at === from.revision && page[0]?.revision !== from.revision) return this.read(stream, decider);
      if (page.length < 1000) break;
      at = revision + 1;
    }
    return new CacheEntry<State>(revision, lastEventId, position, { value: state }, decider.size?.(state) ?? 1);
  }

  private remember<State>(stream: string, entry: CacheEntry<State>): void {
    this.cache.set(stream, entry);
  }

  /** withStreamLock over several streams, taken in the given (sorted) order so two callers never wait on each other. */
  private withStreamLocks<T>(streams: string[], fn: () => Promise<T>): Promise<T> {
    const [first, ...rest] = streams;
    return first === undefined ? fn() : this.withStreamLock(first, () => this.withStreamLocks(rest, fn));
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
