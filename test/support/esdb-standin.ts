import { randomUUID } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { createServer, type IncomingHttpHeaders, type ServerHttp2Session, type ServerHttp2Stream } from 'node:http2';
import { createRequire } from 'node:module';
import type { Test } from 'tap';
import { EsdbEventStore } from '../../infra/eventstore/esdb.js';
import type { ExpectedRevision } from '../../infra/eventstore/port.js';

/**
 * EsdbEventStore against a stand-in for EventStoreDB: an HTTP/2 server that answers the gRPC calls these tests
 * make the way the server does (streams/Append, streams/BatchAppend, streams/Read of a stream or of $all), its
 * messages built with the client's own protobuf classes. It holds streams in memory, refuses an append whose
 * expected revision does not match, answers a repeated append as the server's commit check does (idempotent only where
 * the expectation puts its ids), records each event's creation time, can run the server's standard system projections
 * (link events in $streams, $ce-* and $et-*), and can hold tombstoned streams, answer as a server before 22.6 does, or
 * leave calls unanswered (a server that hangs, or a connection half open). It serves subscriptions to $all (catch-up,
 * then live, with the server's event-type and stream-name filters), and `write` puts events there as other tools
 * write them: any content type, data and custom metadata bytes, `$` system streams and link events.
 */
const clientRequire = createRequire(createRequire(import.meta.url).resolve('@eventstore/db-client/generated/streams_pb.js'));
const pb = {
  streams: clientRequire('./streams_pb.js') as typeof import('@eventstore/db-client/generated/streams_pb.js'),
  shared: clientRequire('./shared_pb.js') as typeof import('@eventstore/db-client/generated/shared_pb.js'),
  status: clientRequire('./status_pb.js') as typeof import('@eventstore/db-client/generated/status_pb.js'),
  features: clientRequire('./serverfeatures_pb.js') as typeof import('@eventstore/db-client/generated/serverfeatures_pb.js'),
  any: clientRequire('google-protobuf/google/protobuf/any_pb.js') as { Any: new () => { pack(bytes: Uint8Array, name: string): void } },
};
const { ReadReq, ReadResp, AppendReq, AppendResp, BatchAppendReq, BatchAppendResp } = pb.streams;

const GRPC = { 'content-type': 'application/grpc+proto' };
const STATUS = { OK: 0, INVALID_ARGUMENT: 3, DEADLINE_EXCEEDED: 4, ALREADY_EXISTS: 6, FAILED_PRECONDITION: 9, ABORTED: 10, UNIMPLEMENTED: 12 };
export const READ = '/event_store.client.streams.Streams/Read';

/** An event as the server holds it: `metadata` is its custom metadata (the bytes a client sent, JSON or not, or none). */
interface StoredEvent { id: string; type: string; contentType: string; data: Uint8Array; metadata: Uint8Array; position: bigint; created: number }
interface Message { serializeBinary(): Uint8Array }

export class EsdbStandin extends EventEmitter {
  readonly streams = new Map<string, StoredEvent[]>();
  readonly tombstoned = new Set<string>();
  /** Every event of every stream, in $all (position) order. */
  private readonly all: Array<{ name: string; revision: number; e: StoredEvent }> = [];
  /** Whether the server's standard system projections run (see project()), as with `--run-projections=All` and `--start-standard-projections`. */
  systemProjections = false;
  /** Whether ServerFeatures lists BatchAppend, which the client then appends through. */
  batchAppend = false;
  /** Every call is accepted and never answered (the server-features call before the first append included). */
  silent = false;
  /** Appends are accepted and never answered, nor written; other calls are answered. */
  silentAppends = false;
  /**
   * Appends are refused as the server refuses a write that timed out (a commit, prepare or forward timeout): a unary
   * Append with ABORTED "Operation timed out" (its RpcExceptions.Timeout), a BatchAppend with a Timeout status.
   */
  timeoutAppends = false;
  /** When set, an append whose events' data take more bytes is refused as the server refuses one over its MaxAppendSize. */
  maxAppendSize: number | undefined;
  /** When set, a stream read's events are sent one at a time, this many milliseconds apart (a slow read). */
  trickleMs = 0;
  /**
   * false: as servers before 22.6, which know an event's $all position only in $all reads and send their
   * Position.End, {2^64-1, 2^64-1}, in stream reads; and with appends answered without a position (as such
   * servers answer an idempotent retry).
   */
  knowsPositions = true;
  /** The paths of the calls made, in order. */
  readonly calls: string[] = [];
  /** For each call, when its stream is closed (answered, reset or cancelled). */
  readonly closed: Array<Promise<void>> = [];
  private position = 1000n;

  constructor(readonly url: string) {
    super();
    this.setMaxListeners(0); // one 'appended' listener per live subscription
  }

  static async start(t: Test): Promise<EsdbStandin> {
    const server = createServer();
    const sessions = new Set<ServerHttp2Session>();
    server.on('session', (session) => { sessions.add(session); session.once('close', () => sessions.delete(session)); });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const standin = new EsdbStandin(`esdb://127.0.0.1:${(server.address() as { port: number }).port}?tls=false`);
    server.on('stream', (stream, headers) => standin.call(stream, headers));
    t.teardown(async () => {
      for (const session of sessions) session.destroy();
      await new Promise((resolve) => server.close(resolve));
    });
    return standin;
  }

  /** Events written by another tool than Cairn: any content type, data and custom metadata (none by default). */
  write(stream: string, events: Array<{ type: string; contentType?: string; data: string | Uint8Array; metadata?: string | Uint8Array }>): void {
    const from = this.streams.get(stream)?.length ?? 0;
    for (const e of events) {
      this.record(stream, { id: randomUUID(), type: e.type, contentType: e.contentType ?? 'application/json', data: Buffer.from(e.data), metadata: Buffer.from(e.metadata ?? '') });
    }
    this.project(stream, from);
    this.emit('appended');
  }

  /** $all, in position order. */
  private log(): Array<{ name: string; revision: number; e: StoredEvent }> {
    return this.all;
  }

  /** Writes one event at the end of the log. */
  private record(name: string, event: Omit<StoredEvent, 'position' | 'created'>): void {
    const stored = this.streams.get(name) ?? [];
    this.position += 100n;
    const e = { ...event, position: this.position, created: Date.now() };
    stored.push(e);
    this.streams.set(name, stored);
    this.all.push({ name, revision: stored.length - 1, e });
  }

  /**
   * With `systemProjections`, what the server's standard projections write for the events of `name` from revision `from`
   * on, after them in the log: link events (type `$>`, data `<revision>@<stream>`) in `$streams` (a stream's first
   * event: $streams), `$ce-<category>` ($by_category, the category being the name up to its first `-`) and
   * `$et-<type>` ($by_event_type). The server writes them asynchronously, so other events may come between; here
   * they follow at once.
   */
  private project(name: string, from: number): void {
    if (!this.systemProjections || name.startsWith('$')) return;
    const events = this.streams.get(name) ?? [];
    const link = (to: string, revision: number) => this.record(to, {
      id: randomUUID(), type: '$>', contentType: 'application/octet-stream', data: Buffer.from(`${revision}@${name}`),
      metadata: Buffer.from(JSON.stringify({ $o: name, $causedBy: events[revision]!.id })),
    });
    const dash = name.indexOf('-');
    for (let revision = from; revision < events.length; revision++) {
      if (revision === 0) link('$streams', 0);
      if (dash > 0) link(`$ce-${name.slice(0, dash)}`, revision);
      link(`$et-${events[revision]!.type}`, revision);
    }
  }

  private call(stream: ServerHttp2Stream, headers: IncomingHttpHeaders): void {
    stream.on('error', () => undefined);
    const path = String(headers[':path']);
    this.calls.push(path);
    this.closed.push(new Promise((resolve) => stream.once('close', () => resolve())));
    if (path === READ) this.emit('read');
    if (this.silent) return;
    const messages = frames(stream);
    switch (path) {
      case '/event_store.client.server_features.ServerFeatures/GetSupportedMethods': {
        if (!this.batchAppend) return fail(stream, STATUS.UNIMPLEMENTED, 'not here');
        const method = new pb.features.SupportedMethod().setServiceName('event_store.client.streams.Streams').setMethodName('BatchAppend');
        return answer(stream, [new pb.features.SupportedMethods().setMethodsList([method]).setEventStoreServerVersion('23.10.0')]);
      }
      case '/event_store.client.streams.Streams/Append':
        if (this.silentAppends) return;
        if (this.timeoutAppends) return fail(stream, STATUS.ABORTED, 'Operation timed out');
        void collect(messages).then(([head, ...rest]) => {
          const options = AppendReq.deserializeBinary(head!).getOptions()!;
          const expected = options.hasNoStream() ? 'no_stream' : options.hasAny() ? 'any' : options.hasStreamExists() ? 'stream_exists' : Number(options.getRevision());
          const proposed = rest.map((bytes) => AppendReq.deserializeBinary(bytes).getProposedMessage()!);
          if (this.tooLarge(proposed)) {
            return fail(stream, STATUS.INVALID_ARGUMENT, `Maximum Append Size of ${this.maxAppendSize} Exceeded.`,
              { exception: 'maximum-append-size-exceeded', 'maximum-append-size': String(this.maxAppendSize) });
          }
          const named = nameOf(options.getStreamIdentifier()!);
          // As the server's RpcExceptions.StreamDeleted: FAILED_PRECONDITION naming the stream in the trailers.
          if (this.tombstoned.has(named)) return fail(stream, STATUS.FAILED_PRECONDITION, `Event stream '${named}' is deleted.`, { exception: 'stream-deleted', 'stream-name': named });
          const outcome = this.append(named, expected, proposed);
          const response = new AppendResp();
          if (outcome.ok) {
            const success = new AppendResp.Success().setCurrentRevision(String(outcome.revision));
            if (this.knowsPositions) success.setPosition(new AppendResp.Position().setCommitPosition(String(outcome.position)).setPreparePosition(String(outcome.position)));
            else success.setNoPosition(new pb.shared.Empty());
            response.setSuccess(success);
          } else {
            const wrong = new AppendResp.WrongExpectedVersion();
            if (outcome.current < 0) wrong.setCurrentNoStream(new pb.shared.Empty());
            else wrong.setCurrentRevision(String(outcome.current));
            response.setWrongExpectedVersion(wrong);
          }
          answer(stream, [response]);
        }, () => undefined); // the client went away
        return;
      case '/event_store.client.streams.Streams/BatchAppend': {
        if (this.silentAppends) return;
        stream.respond({ ':status': 200, ...GRPC }, { waitForTrailers: true });
        stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': String(STATUS.OK) }));
        void (async () => {
          for await (const bytes of messages) {
            const request = BatchAppendReq.deserializeBinary(bytes);
            const options = request.getOptions()!;
            const expected = options.hasNoStream() ? 'no_stream' : options.hasAny() ? 'any' : options.hasStreamExists() ? 'stream_exists' : Number(options.getStreamPosition());
            const response = new BatchAppendResp().setCorrelationId(request.getCorrelationId()).setStreamIdentifier(options.getStreamIdentifier());
            if (this.timeoutAppends) {
              const details = new pb.any.Any();
              details.pack(new pb.shared.Timeout().serializeBinary(), 'event_store.client.Timeout');
              stream.write(frame(response.setError(new pb.status.Status().setCode(STATUS.DEADLINE_EXCEEDED).setMessage('Timeout').setDetails(details as never))));
              continue;
            }
            if (this.tooLarge(request.getProposedMessagesList())) {
              const details = new pb.any.Any();
              details.pack(new pb.shared.MaximumAppendSizeExceeded().setMaxappendsize(this.maxAppendSize!).serializeBinary(), 'event_store.client.MaximumAppendSizeExceeded');
              stream.write(frame(response.setError(new pb.status.Status().setCode(STATUS.INVALID_ARGUMENT).setMessage('MaximumAppendSizeExceeded').setDetails(details as never))));
              continue;
            }
            if (this.tombstoned.has(nameOf(options.getStreamIdentifier()!))) {
              const details = new pb.any.Any();
              details.pack(new pb.shared.StreamDeleted().setStreamIdentifier(options.getStreamIdentifier()).serializeBinary(), 'event_store.client.StreamDeleted');
              stream.write(frame(response.setError(new pb.status.Status().setCode(STATUS.FAILED_PRECONDITION).setMessage('StreamDeleted').setDetails(details as never))));
              continue;
            }
            const outcome = this.append(nameOf(options.getStreamIdentifier()!), expected, request.getProposedMessagesList());
            if (outcome.ok) {
              const success = new BatchAppendResp.Success().setCurrentRevision(String(outcome.revision));
              if (this.knowsPositions) success.setPosition(new pb.shared.AllStreamPosition().setCommitPosition(String(outcome.position)).setPreparePosition(String(outcome.position)));
              else success.setNoPosition(new pb.shared.Empty());
              response.setSuccess(success);
            } else {
              // As the server's Status.WrongExpectedVersion: the details carry both revisions.
              const wrong = new pb.shared.WrongExpectedVersion();
              if (outcome.current < 0) wrong.setCurrentNoStream(new pb.shared.Empty());
              else wrong.setCurrentStreamRevision(String(outcome.current));
              const details = new pb.any.Any();
              details.pack(wrong.serializeBinary(), 'event_store.client.WrongExpectedVersion');
              response.setError(new pb.status.Status().setCode(STATUS.ALREADY_EXISTS).setMessage('WrongExpectedVersion').setDetails(details as never));
            }
            stream.write(frame(response));
          }
          stream.end();
        })().catch(() => undefined);
        return;
      }
      case READ:
        void collect(messages).then(([bytes]) => this.read(stream, ReadReq.deserializeBinary(bytes!)), () => undefined);
        return;
      default:
        return fail(stream, STATUS.UNIMPLEMENTED, `${path} is not part of the stand-in`);
    }
  }

  private tooLarge(proposed: Array<{ getData_asU8(): Uint8Array }>): boolean {
    return this.maxAppendSize !== undefined && proposed.reduce((sum, m) => sum + m.getData_asU8().length, 0) > this.maxAppendSize;
  }

  /**
   * The server's commit check (IndexWriter.CheckCommit): an append whose events' ids are already in the stream, where
   * the expectation puts them, is idempotent: written once, answered with the last of them (its revision and position);
   * one that matches only in part is a wrong expected version. With `any` or `stream_exists` the ids are looked up in
   * the stream wherever they are (the server's cache of recently committed ids).
   */
  private append(name: string, expected: ExpectedRevision, proposed: Array<{ getId(): { getString(): string } | undefined; getMetadataMap(): { get(key: string): string | undefined }; getData_asU8(): Uint8Array; getCustomMetadata_asU8(): Uint8Array }>):
    { ok: true; revision: number; position: bigint } | { ok: false; current: number } {
    const stored = this.streams.get(name) ?? [];
    const current = stored.length - 1;
    const ids = proposed.map((m) => m.getId()!.getString());
    const idempotent = (last: number) => ({ ok: true as const, revision: last, position: stored[last]!.position });
    if (expected === 'stream_exists' && current < 0) return { ok: false, current };
    if (expected === 'any' || expected === 'stream_exists') {
      const found = ids.map((id) => stored.map((e) => e.id).lastIndexOf(id));
      if (ids.length > 0 && found[0]! >= 0) return found.every((i) => i >= 0) ? idempotent(found.at(-1)!) : { ok: false, current };
    } else {
      const from = expected === 'no_stream' ? -1 : expected;
      if (from > current) return { ok: false, current };
      if (from < current) {
        // Every id at its place after the expected revision: the same append again. A mismatch, first or later: refused.
        const matches = ids.length > 0 && ids.every((id, i) => stored[from + 1 + i]?.id === id);
        return matches ? idempotent(from + ids.length) : { ok: false, current };
      }
    }
    for (const message of proposed) {
      const metadata = message.getMetadataMap();
      this.record(name, {
        id: message.getId()!.getString(), type: metadata.get('type')!, contentType: metadata.get('content-type')!, data: message.getData_asU8(),
        metadata: message.getCustomMetadata_asU8(),
      });
    }
    const written = { ok: true as const, revision: current + proposed.length, position: this.position };
    this.project(name, current + 1);
    this.emit('appended');
    return written;
  }

  /**
   * A subscription to $all as the server serves it: a confirmation, the events after the position it starts from
   * (exclusive), then each new one as it is written, those the filter passes; open until the client cancels it.
   */
  private subscribe(stream: ServerHttp2Stream, options: InstanceType<typeof ReadReq.Options>): void {
    const all = options.getAll()!;
    let sent = all.hasPosition() ? BigInt(all.getPosition()!.getCommitPosition()) : all.hasEnd() ? (this.log().at(-1)?.e.position ?? 0n) : -1n;
    const passes = subscriptionFilter(options);
    stream.respond({ ':status': 200, ...GRPC });
    stream.write(frame(new ReadResp().setConfirmation(new ReadResp.SubscriptionConfirmation().setSubscriptionId(randomUUID()))));
    const log = this.log();
    let next = 0;
    const push = () => {
      if (stream.closed) return;
      for (; next < log.length; next++) {
        const x = log[next]!;
        if (x.e.position <= sent) continue;
        sent = x.e.position;
        if (passes(x.name, x.e.type)) stream.write(frame(readEvent(x.name, x.revision, x.e, x.e.position)));
      }
    };
    push();
    this.on('appended', push);
    stream.once('close', () => this.off('appended', push));
  }

  /** A read of one stream, as the server answers it: its events, or `stream_not_found`, or a deleted stream's error. */
  private read(stream: ServerHttp2Stream, request: InstanceType<typeof ReadReq>): void {
    const options = request.getOptions()!;
    const backwards = options.getReadDirection() === ReadReq.Options.ReadDirection.BACKWARDS;
    const count = Number(options.getCount());
    const all = options.getAll();
    if (all && options.hasSubscription()) return this.subscribe(stream, options);
    if (all) {
      // $all, in position order: forwards from a position includes the event there, backwards excludes it.
      const log = this.log();
      const at = all.hasPosition() ? BigInt(all.getPosition()!.getCommitPosition()) : undefined;
      const selected = backwards
        ? log.filter((x) => at === undefined || all.hasEnd() || x.e.position < at).reverse()
        : log.filter((x) => at === undefined || x.e.position >= at);
      return answer(stream, selected.slice(0, count).map((x) => readEvent(x.name, x.revision, x.e, x.e.position)));
    }
    const of = options.getStream()!;
    const name = nameOf(of.getStreamIdentifier()!);
    if (this.tombstoned.has(name)) {
      return fail(stream, STATUS.FAILED_PRECONDITION, `Event stream '${name}' is deleted.`, { exception: 'stream-deleted', 'stream-name': name });
    }
    const events = this.streams.get(name) ?? [];
    if (events.length === 0) {
      const notFound = new ReadResp.StreamNotFound().setStreamIdentifier(of.getStreamIdentifier());
      return answer(stream, [new ReadResp().setStreamNotFound(notFound)]);
    }
    const from = of.hasStart() ? 0 : of.hasEnd() ? events.length - 1 : Number(of.getRevision());
    const selected = (backwards ? events.slice(0, from + 1).reverse() : events.slice(from)).slice(0, count);
    const messages = selected.map((e) => readEvent(name, events.indexOf(e), e, this.knowsPositions ? e.position : 2n ** 64n - 1n));
    if (this.trickleMs > 0) trickle(stream, messages, this.trickleMs);
    else answer(stream, messages);
  }
}

/** The server's filter of a subscription: a regex or prefixes, on the event type or the stream name. */
function subscriptionFilter(options: InstanceType<typeof ReadReq.Options>): (stream: string, type: string) => boolean {
  const filter = options.getFilter();
  if (!options.hasFilter() || !filter) return () => true;
  const onType = filter.hasEventType();
  const expression = onType ? filter.getEventType()! : filter.getStreamIdentifier()!;
  const regex = expression.getRegex() ? new RegExp(expression.getRegex()) : undefined;
  const prefixes = expression.getPrefixList();
  return (stream, type) => {
    const subject = onType ? type : stream;
    return regex ? regex.test(subject) : prefixes.some((prefix) => subject.startsWith(prefix));
  };
}

function readEvent(stream: string, revision: number, e: StoredEvent, position: bigint): Message {
  const recorded = new ReadResp.ReadEvent.RecordedEvent()
    .setId(new pb.shared.UUID().setString(e.id))
    .setStreamIdentifier(new pb.shared.StreamIdentifier().setStreamName(Buffer.from(stream)))
    .setStreamRevision(String(revision))
    .setCommitPosition(String(position))
    .setPreparePosition(String(position))
    .setData(e.data)
    .setCustomMetadata(e.metadata);
  recorded.getMetadataMap().set('type', e.type).set('content-type', e.contentType).set('created', String(BigInt(e.created) * 10_000n));
  return new ReadResp().setEvent(new ReadResp.ReadEvent().setEvent(recorded).setCommitPosition(String(position)));
}

function nameOf(identifier: { getStreamName_asU8(): Uint8Array }): string {
  return Buffer.from(identifier.getStreamName_asU8()).toString('utf8');
}

/** gRPC's framing: a compression flag, a 32-bit length, the message. */
function frame(message: Message): Buffer {
  const bytes = message.serializeBinary();
  const head = Buffer.alloc(5);
  head.writeUInt32BE(bytes.length, 1);
  return Buffer.concat([head, bytes]);
}

/** The request's messages as they arrive. */
async function* frames(stream: ServerHttp2Stream): AsyncGenerator<Uint8Array> {
  let buffer = Buffer.alloc(0);
  for await (const chunk of stream) {
    buffer = Buffer.concat([buffer, chunk as Buffer]);
    while (buffer.length >= 5 && buffer.length >= 5 + buffer.readUInt32BE(1)) {
      const length = buffer.readUInt32BE(1);
      yield buffer.subarray(5, 5 + length);
      buffer = buffer.subarray(5 + length);
    }
  }
}

/** The messages of a call whose client sends them all before the answer (unary, server- or client-streaming). */
async function collect(messages: AsyncIterable<Uint8Array>): Promise<Uint8Array[]> {
  const all: Uint8Array[] = [];
  for await (const m of messages) all.push(m);
  return all;
}

function answer(stream: ServerHttp2Stream, messages: Message[]): void {
  stream.respond({ ':status': 200, ...GRPC }, { waitForTrailers: true });
  stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': String(STATUS.OK) }));
  for (const m of messages) stream.write(frame(m));
  stream.end();
}

/** answer(), a message every `ms`. */
function trickle(stream: ServerHttp2Stream, messages: Message[], ms: number): void {
  stream.respond({ ':status': 200, ...GRPC }, { waitForTrailers: true });
  stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': String(STATUS.OK) }));
  const next = (i: number) => {
    if (stream.closed) return;
    if (i === messages.length) return stream.end();
    stream.write(frame(messages[i]!));
    setTimeout(() => next(i + 1), ms);
  };
  setTimeout(() => next(0), ms);
}

/** A trailers-only answer: the call's status and metadata in its headers. */
function fail(stream: ServerHttp2Stream, status: number, message: string, metadata: Record<string, string> = {}): void {
  stream.respond({ ':status': 200, ...GRPC, 'grpc-status': String(status), 'grpc-message': encodeURIComponent(message), ...metadata }, { endStream: true });
}

/**
 * A stand-in and a store on it for each of the client's append paths, named: the unary Append, and BatchAppend (which
 * the client uses when the server lists it among its features).
 */
export async function* appendPaths(t: Test, options: { timeoutMs?: number } = {}): AsyncGenerator<{ name: string; esdb: EsdbStandin; store: EsdbEventStore }> {
  for (const batchAppend of [false, true]) {
    const esdb = await EsdbStandin.start(t);
    esdb.batchAppend = batchAppend;
    const store = new EsdbEventStore(esdb.url, options);
    t.teardown(() => store.close());
    yield { name: batchAppend ? 'BatchAppend' : 'Append', esdb, store };
  }
}
