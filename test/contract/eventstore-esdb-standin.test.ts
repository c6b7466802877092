import { randomUUID } from 'node:crypto';
import { EventEmitter, once } from 'node:events';
import { createServer, type IncomingHttpHeaders, type ServerHttp2Session, type ServerHttp2Stream } from 'node:http2';
import { createRequire } from 'node:module';
import t, { type Test } from 'tap';
import { WrongExpectedVersionError } from '../../infra/eventstore/errors.js';
import { EsdbEventStore } from '../../infra/eventstore/esdb.js';
import type { ExpectedRevision, NewEvent } from '../../infra/eventstore/port.js';
import { timed } from '../support/settling.js';

/**
 * EsdbEventStore against a stand-in for EventStoreDB: an HTTP/2 server that answers the gRPC calls these tests
 * make the way the server does (streams/Append, streams/BatchAppend, streams/Read of a stream or of $all), its
 * messages built with the client's own protobuf classes. It holds streams in memory, refuses an append whose
 * expected revision does not match, and can hold tombstoned streams, answer as a server before 22.6 does, or
 * leave every read unanswered.
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
const STATUS = { OK: 0, ALREADY_EXISTS: 6, FAILED_PRECONDITION: 9, UNIMPLEMENTED: 12 };

interface StoredEvent { id: string; type: string; contentType: string; data: Uint8Array; position: bigint }
interface Message { serializeBinary(): Uint8Array }

class EsdbStandin extends EventEmitter {
  readonly streams = new Map<string, StoredEvent[]>();
  readonly tombstoned = new Set<string>();
  /** Whether ServerFeatures lists BatchAppend, which the client then appends through. */
  batchAppend = false;
  /** Reads are accepted and never answered. */
  silent = false;
  /**
   * false: as servers before 22.6, which know an event's $all position only in $all reads and send their
   * Position.End, {2^64-1, 2^64-1}, in stream reads; and with appends answered without a position (as such
   * servers answer an idempotent retry).
   */
  knowsPositions = true;
  /** The paths of the calls made, in order. */
  readonly calls: string[] = [];
  private position = 1000n;

  constructor(readonly url: string) {
    super();
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

  write(stream: string, events: Array<{ type: string; contentType?: string; data: string }>): void {
    const stored = this.streams.get(stream) ?? [];
    for (const e of events) {
      this.position += 100n;
      stored.push({ id: randomUUID(), type: e.type, contentType: e.contentType ?? 'application/json', data: Buffer.from(e.data), position: this.position });
    }
    this.streams.set(stream, stored);
  }

  private call(stream: ServerHttp2Stream, headers: IncomingHttpHeaders): void {
    stream.on('error', () => undefined);
    const path = String(headers[':path']);
    this.calls.push(path);
    const messages = frames(stream);
    switch (path) {
      case '/event_store.client.server_features.ServerFeatures/GetSupportedMethods': {
        if (!this.batchAppend) return fail(stream, STATUS.UNIMPLEMENTED, 'not here');
        const method = new pb.features.SupportedMethod().setServiceName('event_store.client.streams.Streams').setMethodName('BatchAppend');
        return answer(stream, [new pb.features.SupportedMethods().setMethodsList([method]).setEventStoreServerVersion('23.10.0')]);
      }
      case '/event_store.client.streams.Streams/Append':
        void collect(messages).then(([head, ...rest]) => {
          const options = AppendReq.deserializeBinary(head!).getOptions()!;
          const expected = options.hasNoStream() ? 'no_stream' : options.hasAny() ? 'any' : options.hasStreamExists() ? 'stream_exists' : Number(options.getRevision());
          const proposed = rest.map((bytes) => AppendReq.deserializeBinary(bytes).getProposedMessage()!);
          const outcome = this.append(nameOf(options.getStreamIdentifier()!), expected, proposed);
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
        stream.respond({ ':status': 200, ...GRPC }, { waitForTrailers: true });
        stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': String(STATUS.OK) }));
        void (async () => {
          for await (const bytes of messages) {
            const request = BatchAppendReq.deserializeBinary(bytes);
            const options = request.getOptions()!;
            const expected = options.hasNoStream() ? 'no_stream' : options.hasAny() ? 'any' : options.hasStreamExists() ? 'stream_exists' : Number(options.getStreamPosition());
            const outcome = this.append(nameOf(options.getStreamIdentifier()!), expected, request.getProposedMessagesList());
            const response = new BatchAppendResp().setCorrelationId(request.getCorrelationId()).setStreamIdentifier(options.getStreamIdentifier());
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
      case '/event_store.client.streams.Streams/Read':
        this.emit('read');
        if (this.silent) return;
        void collect(messages).then(([bytes]) => this.read(stream, ReadReq.deserializeBinary(bytes!)), () => undefined);
        return;
      default:
        return fail(stream, STATUS.UNIMPLEMENTED, `${path} is not part of the stand-in`);
    }
  }

  private append(name: string, expected: ExpectedRevision, proposed: Array<{ getId(): { getString(): string } | undefined; getMetadataMap(): { get(key: string): string | undefined }; getData_asU8(): Uint8Array }>):
    { ok: true; revision: number; position: bigint } | { ok: false; current: number } {
    const current = (this.streams.get(name)?.length ?? 0) - 1;
    const ok = expected === 'any' || (expected === 'no_stream' ? current < 0 : expected === 'stream_exists' ? current >= 0 : expected === current);
    if (!ok) return { ok: false, current };
    const stored = this.streams.get(name) ?? [];
    for (const message of proposed) {
      this.position += 100n;
      const metadata = message.getMetadataMap();
      stored.push({ id: message.getId()!.getString(), type: metadata.get('type')!, contentType: metadata.get('content-type')!, data: message.getData_asU8(), position: this.position });
    }
    this.streams.set(name, stored);
    return { ok: true, revision: stored.length - 1, position: this.position };
  }

  /** A read of one stream, as the server answers it: its events, or `stream_not_found`, or a deleted stream's error. */
  private read(stream: ServerHttp2Stream, request: InstanceType<typeof ReadReq>): void {
    const options = request.getOptions()!;
    const backwards = options.getReadDirection() === ReadReq.Options.ReadDirection.BACKWARDS;
    const count = Number(options.getCount());
    const all = options.getAll();
    if (all) {
      // $all, in position order: forwards from a position includes the event there, backwards excludes it.
      const log = [...this.streams].flatMap(([name, events]) => events.map((e, revision) => ({ name, revision, e })))
        .sort((a, b) => (a.e.position < b.e.position ? -1 : 1));
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
    answer(stream, selected.map((e) => readEvent(name, events.indexOf(e), e, this.knowsPositions ? e.position : 2n ** 64n - 1n)));
  }
}

function readEvent(stream: string, revision: number, e: StoredEvent, position: bigint): Message {
  const recorded = new ReadResp.ReadEvent.RecordedEvent()
    .setId(new pb.shared.UUID().setString(e.id))
    .setStreamIdentifier(new pb.shared.StreamIdentifier().setStreamName(Buffer.from(stream)))
    .setStreamRevision(String(revision))
    .setCommitPosition(String(position))
    .setPreparePosition(String(position))
    .setData(e.data);
  recorded.getMetadataMap().set('type', e.type).set('content-type', e.contentType).set('created', String(BigInt(Date.now()) * 10_000n));
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

/** A trailers-only answer: the call's status and metadata in its headers. */
function fail(stream: ServerHttp2Stream, status: number, message: string, metadata: Record<string, string> = {}): void {
  stream.respond({ ':status': 200, ...GRPC, 'grpc-status': String(status), 'grpc-message': encodeURIComponent(message), ...metadata }, { endStream: true });
}

const newEvent = (type: string): NewEvent => ({
  id: randomUUID(),
  type,
  data: { n: 1 },
  metadata: { correlation_id: 'c', causation_id: 'c', actor: 'a', occurred_at: '2024-01-01T00:00:00.000Z' },
});

async function expectWrongVersion(t: Test, append: Promise<unknown>, expected: Partial<WrongExpectedVersionError>, name: string): Promise<void> {
  const outcome = await timed(append, 5000);
  t.equal(outcome.outcome, 'rejected', `${name}: refused`);
  t.type(outcome.error, WrongExpectedVersionError, name);
  t.match(outcome.error, expected, name);
}

/**
 * The client throws WrongExpectedVersionError for a refused append unless the connection string says
 * `throwOnAppendFailure=false`: then it answers `success: false` (appendToStream/append.js, batchAppend.js), and
 * on its batch path with `nextExpectedRevision` = BigInt(hasCurrentStreamRevision()), a boolean. Either way the
 * adapter reports the refusal with the stream's actual revision, and writes nothing.
 */
t.test('a refused append is a WrongExpectedVersionError with the actual revision, whatever throwOnAppendFailure says', async (t) => {
  for (const batchAppend of [false, true]) {
    for (const option of ['', '&throwOnAppendFailure=false']) {
      const name = `${batchAppend ? 'BatchAppend' : 'Append'}${option}`;
      const esdb = await EsdbStandin.start(t);
      esdb.batchAppend = batchAppend;
      const store = new EsdbEventStore(esdb.url + option);
      t.teardown(() => store.close());

      const first = await store.append('order-1', [newEvent('A'), newEvent('B'), newEvent('C'), newEvent('D')], 'no_stream');
      t.equal(first.revision, 3, `${name}: appended`);
      await expectWrongVersion(t, store.append('order-1', [newEvent('E')], 1), { stream: 'order-1', expected: 1, actual: 3 }, `${name}: behind`);
      await expectWrongVersion(t, store.append('order-1', [newEvent('E')], 'no_stream'), { expected: 'no_stream', actual: 3 }, `${name}: exists`);
      await expectWrongVersion(t, store.append('order-2', [newEvent('E')], 0), { stream: 'order-2', expected: 0, actual: 'no_stream' }, `${name}: no stream`);
      t.equal(esdb.streams.get('order-1')?.length, 4, `${name}: nothing more written`);
      t.notOk(esdb.streams.has('order-2'), `${name}: no stream created`);
      t.equal((await store.append('order-1', [newEvent('E')], 3)).revision, 4, `${name}: the right revision still appends`);
      const path = `/event_store.client.streams.Streams/${batchAppend ? 'BatchAppend' : 'Append'}`;
      t.ok(esdb.calls.includes(path), `${name}: the client appended through ${path}`);
    }
  }
});

/**
 * A tombstoned (hard-deleted) stream fails every read with StreamDeletedError, while $streams keeps its link: one
 * such stream made listStreams fail for every prefix. streamInfo reports it as absent, as a soft-deleted one.
 */
t.test('listStreams and streamInfo pass over a tombstoned stream', async (t) => {
  const esdb = await EsdbStandin.start(t);
  const store = new EsdbEventStore(esdb.url);
  t.teardown(() => store.close());
  esdb.write('agent-1', [{ type: 'Created', data: '{}' }, { type: 'Renamed', data: '{}' }]);
  esdb.write('agent-2', [{ type: 'Created', data: '{}' }]);
  esdb.tombstoned.add('agent-2');
  esdb.write('agent-3', [{ type: 'Created', data: '{}' }]);
  esdb.write('$streams', ['agent-1', 'agent-2', 'agent-3'].map((s) => ({ type: '$>', contentType: 'application/octet-stream', data: `0@${s}` })));

  t.equal(await store.streamInfo('agent-2'), undefined, 'a tombstoned stream has no info');
  t.same((await store.listStreams({ prefix: 'agent-' })).map((i) => [i.stream, i.revision, i.event_count]), [['agent-1', 1, 2], ['agent-3', 0, 1]]);
  t.same((await store.listStreams({ prefix: 'agent-', limit: 1, after: 'agent-1' })).map((i) => i.stream), ['agent-3'], 'after it, within the limit');
});

/**
 * The client's dispose() cancels the gRPC calls under reads in flight, and its read stream ends quietly on a
 * cancellation it made itself: each read answered with what it had so far, an empty stream or log, a stream that
 * does not exist. Reads cut off by close() fail instead.
 */
t.test('reads in flight when the store is closed fail, rather than answer with what arrived so far', async (t) => {
  const esdb = await EsdbStandin.start(t);
  esdb.silent = true;
  const store = new EsdbEventStore(esdb.url);
  t.teardown(() => store.close());
  let reads = 0;
  esdb.on('read', () => { reads++; });
  const calls = {
    readStream: store.readStream('agent-1'),
    readAll: store.readAll(0),
    streamInfo: store.streamInfo('agent-1'),
    listStreams: store.listStreams(),
    headPosition: store.headPosition(),
    countAfter: store.countAfter(0, 10),
  };
  while (reads < Object.keys(calls).length) await once(esdb, 'read');
  await store.close();
  for (const [name, call] of Object.entries(calls)) {
    const outcome = await timed(call, 2000);
    t.equal(outcome.outcome, 'rejected', `${name}: fails (${outcome.outcome === 'resolved' ? 'answered' : String(outcome.error)})`);
    t.match(String(outcome.error), /closed/, `${name}: because the store was closed`);
  }
});

/**
 * Stream reads on servers before 22.6 (and for events of explicit transactions on any) carry the server's
 * Position.End, 2^64-1, which the client hands on as a position: as a number it is past any checkpoint, so a
 * consistency token made of it (an append read back, a command's answer from its stream) waits for ever.
 */
t.test('positions the server does not know in a stream read are 0, and an append read back finds its position in $all', async (t) => {
  const esdb = await EsdbStandin.start(t);
  esdb.knowsPositions = false;
  const store = new EsdbEventStore(esdb.url);
  t.teardown(() => store.close());
  esdb.write('other-1', [{ type: 'Created', data: '{}' }]);
  const events = [newEvent('A'), newEvent('B')];
  const appended = await store.append('agent-1', events, 'no_stream');
  const last = esdb.streams.get('agent-1')!.at(-1)!.position;
  t.same(appended, { revision: 1, position: Number(last) }, 'the append\'s position, read back from $all');
  t.same((await store.readStream('agent-1')).map((e) => [e.id, e.position]), events.map((e) => [e.id, 0]), 'stream reads: unknown, 0');
  t.match(await store.streamInfo('agent-1'), { revision: 1, first_position: 0, last_position: 0 });
  t.same((await store.readAll(0)).map((e) => e.position), [...esdb.streams.values()].flat().map((e) => Number(e.position)).sort((a, b) => a - b), '$all reads know them');
});
