import { InvalidArgumentError, type Command } from 'commander';
import { IsDate, IsDateTime } from 'typebox/format';
import { EVENT_TYPES } from '../domain/event-types.js';
import type { EventStore } from '../infra/eventstore/port.js';
import { abandonOutput, cell, flushOut, jsonLine, notice, printable, quoted, writeOut } from './output.js';
import { commaList, nonNegativeInt, positiveInt, stopOnSignals, withEventLog } from './runtime.js';
import { eventView } from './streams.js';

interface TailOptions {
  type?: string[];
  correlation?: string[];
  actor?: string[];
  streamPrefix?: string[];
  from?: number;
  since?: number;
  until?: number;
  untilHead?: boolean;
  count?: number;
  json?: boolean;
}

/** How many events --since may pass over (EventStoreDB: its positions cannot be searched) before the event loop gets a turn (Ctrl-C). */
const SKIPS_PER_TURN = 512;

export function eventCommands(program: Command): void {
  program.command('events').description('follow the whole event log')
    .command('tail').description('print events as they are appended, until Ctrl-C (or, with --until-head, those up to the log\'s head)')
    .option('--type <type...>', 'only events of these types (repeatable, or comma-separated)', commaList)
    .option('--correlation <id...>', 'only events whose correlation_id (the request id, X-Request-Id) is one of these (repeatable, or comma-separated)', commaList)
    .option('--actor <actor...>', 'only events whose actor is one of these, as printed: key:<key id>, user:<subject>, owner, anonymous, ops:<login>@<host> (repeatable, or comma-separated)', actorList)
    .option('--stream-prefix <prefix>', 'only events of streams whose name starts with this, e.g. agent- (repeatable; not split at commas)', streamPrefixList)
    .option('--from <position>', 'start after this log position (0 = from the beginning; default: the current head, or 0 with --until-head)', nonNegativeInt)
    .option('--since <time>', 'start at the first event recorded at or after this time: RFC 3339 with a zone (2026-11-24T14:02:00Z, …+01:00) or a date (from its start, UTC)', (raw: string) => timeOption(raw))
    .option('--until <time>', 'stop after the last event recorded at or before this time (as --since; a date means its end, UTC), or at the log\'s head as it was when the command started', (raw: string) => timeOption(raw, true))
    .option('--until-head', 'stop at the log\'s head as it was when the command started, instead of following (with the other filters: a search of the history)')
    .option('--count <n>', 'stop after this many events', positiveInt)
    .option('--json', 'print one JSON object per line')
    // A process learns that its pipe's reader has gone only when it writes (Node cannot poll for it, as GNU tail -f does).
    .addHelpText('after', '\nFilters combine: an event is printed when it passes every filter given, and one of the values of each.'
      + '\nWhat did request X do, and what did key K do, from the start of the log:'
      + '\n  events tail --until-head --correlation X'
      + '\n  events tail --until-head --actor key:K --type AgentCreated,ApiKeyCreated'
      + '\nWhat happened during an incident (times as the log recorded them, in UTC: the `recorded_at` column):'
      + '\n  events tail --since 2026-11-24T14:02:00Z --until 2026-11-24T14:20:00Z'
      + '\nTo stop after N events, use --count N: piped into `head -N`, the tail ends only when the next event comes after head has exited.')
    .action(async (opts: TailOptions) => withEventLog(async (events) => {
      // Ctrl-C on `npm run ops -- events tail` reaches this process twice, from the terminal and passed on by npm (or
      // tsx): the repeat is the same stop, which must not end the tail by the signal (exit code 130) instead of cleanly (0).
      const stop = stopOnSignals('events tail stopped', ['SIGINT']);
      try {
        const head = await events.headPosition();
        // --until is a search of the history too: it ends at the head at the latest.
        const untilHead = opts.untilHead || opts.until !== undefined;
        // A history read from the current head would read nothing: with --until-head the default is the beginning.
        let from = opts.from ?? (untilHead || opts.since !== undefined ? 0 : head);
        if (opts.since !== undefined && from < head) from = Math.max(from, await positionBefore(events, opts.since, from, head));
        // A position from another log (a restored backup, a mistyped number) would skip, without a word, every event
        // appended until the log reaches it: the operator would take a quiet tail for a quiet log.
        if (from > head) notice(`note: --from ${from} is past the log's head (${head}); ${untilHead ? 'there is nothing to show' : `events up to position ${from} will not be shown`}`);
        // The store applies every filter (the embedded log has SQLite test them: only the matching events are parsed).
        const filter = opts.type?.length || opts.streamPrefix?.length || opts.correlation?.length || opts.actor?.length
          ? { types: opts.type, streamPrefixes: opts.streamPrefix, correlationIds: opts.correlation, actors: opts.actor }
          : undefined;
        // A filter that cannot match (a typo) says so: an empty answer would pass for "nothing happened".
        const notes = [
          opts.type && (await unseenTypesNote(events, opts.type, !untilHead)),
          opts.streamPrefix && (await unseenPrefixesNote(events, opts.streamPrefix, !untilHead)),
          opts.actor && unwrittenActorsNote(opts.actor),
        ];
        for (const note of notes) if (note) notice(`note: ${note}`);
        if (untilHead && from >= head) return;
        // --until-head: the subscription says how far it has read, also past events the filters skip, so that a
        // search whose last match lies before the head ends there rather than waiting for an event past it.
        const reachedHead = new AbortController();
        const onPosition = untilHead ? (position: number) => { if (position >= head) reachedHead.abort(); } : undefined;
        const signal = untilHead ? AbortSignal.any([stop.signal, reachedHead.signal]) : stop.signal;
        let seen = 0;
        let skipped = 0;
        for await (const event of events.subscribeToAll(from, { filter, signal, onPosition })) {
          if (untilHead && event.position > head) break;
          const recorded = opts.since !== undefined || opts.until !== undefined ? Date.parse(event.recorded_at) : 0;
          // Times follow positions (each log records its commits in order), so the first event past --until ends the search.
          if (opts.until !== undefined && recorded > opts.until) break;
          if (opts.since !== undefined && recorded < opts.since) {
            // The store yields without a turn of the event loop while it reads a batch: a search through a large
            // log that finds little would otherwise hold back Ctrl-C until it is done.
            if (++skipped % SKIPS_PER_TURN === 0) await new Promise((resolve) => setImmediate(resolve));
          } else {
            const view = eventView(event);
            // Who caused it, as `stream show` prints it: an operator watching the log live sees who does what.
            await writeOut(opts.json ? jsonLine(view)
              : `${printable(`${view.position}  ${view.recorded_at}  ${view.stream}@${view.revision}  ${view.type}  ${cell(view.correlation_id)}  ${cell(view.actor)}  ${JSON.stringify(view.data)}`)}\n`, stop.signal);
            if (opts.count !== undefined && ++seen >= opts.count) break;
          }
          if (untilHead && event.position >= head) break;
        }
        await flushOut(stop.signal);
      } catch (error) {
        // Ctrl-C while a reader that stopped reading held the output back: a stop like any other.
        const stopped = error === stop.signal.reason || (error instanceof Error && error.name === 'AbortError');
        if (!(stop.signal.aborted && stopped)) throw error;
      } finally {
        stop.release();
        // Stopped by Ctrl-C: what its reader has not taken is not waited for (the CLI ends the process at once).
        if (stop.signal.aborted) abandonOutput();
      }
    }));
}

/**
 * Option parser for `--since` and `--until`: a time in milliseconds. RFC 3339 with its zone, never a local time (an
 * operator's 14:02 is not the log's), checked as `keys create --expires-at` checks its time (TypeBox's date-time
 * format: real dates and times only), with the space RFC 3339 allows for the `T`; a date alone is its first
 * millisecond, UTC, or for `--until` (`end`) its last.
 */
export function timeOption(raw: string, end = false): number {
  const text = raw.trim();
  if (IsDate(text)) return Date.parse(`${text}T00:00:00Z`) + (end ? 86_400_000 - 1 : 0);
  const dateTime = text.replace(/^(\d{4}-\d{2}-\d{2}) /, '$1T');
  if (IsDateTime(dateTime)) return Date.parse(dateTime);
  throw new InvalidArgumentError('expected an RFC 3339 time with its zone, e.g. 2026-11-24T14:02:00Z or 2026-11-24T15:02:00+01:00, or a date, 2026-11-24 (UTC)');
}

/**
 * The position after which events are recorded at or after `since`, between `from` and `head`. The embedded log's
 * positions are 1 to its head without a gap, and its times follow them (each commit's time, in commit order): a
 * binary search reads about log2(head) single events. EventStoreDB's positions are byte offsets, which cannot be
 * read from at random: there the tail reads from `from` and passes over earlier events by their time.
 */
export async function positionBefore(events: EventStore, since: number, from: number, head: number): Promise<number> {
  if (events.kind !== 'embedded') return from;
  let low = from + 1;
  let high = head + 1;
  while (low < high) {
    const middle = Math.floor((low + high) / 2);
    const [event] = await events.readAll(middle - 1, { limit: 1 });
    if (event && Date.parse(event.recorded_at) < since) low = event.position + 1;
    else high = middle;
  }
  return low - 1;
}

/**
 * Option parser for `--actor`: as commaList, but a comma separates two actors only where the next one starts as
 * Cairn's actors do (`key:`, `user:`, `ops:`, `owner`, `anonymous`). A session's subject is whatever the identity
 * provider puts in `sub` (`CN=Ann,OU=Audit`), and split at each comma it would match nobody.
 */
export function actorList(raw: string, previous: string[] = []): string[] {
  const actors = raw.split(/,(?=\s*(?:key:|user:|ops:|(?:owner|anonymous)\s*(?:,|$)|$))/).map((s) => s.trim()).filter(Boolean);
  if (actors.length === 0) throw new InvalidArgumentError('expected one or more actors, comma-separated');
  return [...previous, ...actors];
}

/** Option parser for `--stream-prefix`: repeatable, each value whole (stream names may hold commas), never empty (it would match every stream). */
function streamPrefixList(raw: string, previous: string[] = []): string[] {
  if (raw === '') throw new InvalidArgumentError('expected the start of a stream name, e.g. agent-');
  return [...previous, raw];
}

/** What `--actor` names that Cairn never writes: a key id without `key:`, as an auditor may paste it from the API. */
export function unwrittenActorsNote(actors: string[]): string | undefined {
  const unknown = actors.filter((actor) => !/^(?:(?:key|user):.|ops:.*@|(?:owner|anonymous)$)/.test(actor));
  if (unknown.length === 0) return undefined;
  return `Cairn writes no actor ${alternatives(unknown)}; its actors are key:<key id>, user:<session subject>, owner, anonymous and ops:<login>@<host>`;
}

/**
 * What `--type` names that no event has shown yet (a typo, `MemoryStore` for `MemoryStored`) get on stderr before
 * the tail waits, as it still does: a new deployment may wait for its first event of a type. The embedded log says
 * whether a type has appeared from its (type, position) index, one type at a time (SQLite sorts every match of
 * several). On EventStoreDB a filtered read of $all for an absent type scans the whole log: there the types this
 * version of Cairn writes stand in for those that appeared.
 */
async function unseenTypesNote(events: EventStore, types: string[], waiting: boolean): Promise<string | undefined> {
  if (events.kind !== 'embedded') return unwrittenTypesNote(types, waiting);
  for (const type of types) {
    if ((await events.readAll(0, { limit: 1, filter: { types: [type] } })).length > 0) return undefined;
  }
  return `no event of type ${alternatives(types)} in the log${waiting ? ' yet; waiting' : ''}${knownTypes(types)}`;
}

/** As unseenTypesNote, for `--stream-prefix`: on the embedded log only, where the names are indexed (see listStreams). */
async function unseenPrefixesNote(events: EventStore, prefixes: string[], waiting: boolean): Promise<string | undefined> {
  if (events.kind !== 'embedded') return undefined;
  for (const prefix of prefixes) {
    if ((await events.listStreams({ prefix, limit: 1 })).length > 0) return undefined;
  }
  return `no stream in the log starts with ${alternatives(prefixes)}${waiting ? ' yet; waiting' : ''}`;
}

/** The note where the log is not asked (EventStoreDB): only when none of `types` is one Cairn writes. */
export function unwrittenTypesNote(types: string[], waiting = true): string | undefined {
  if (types.some((type) => EVENT_TYPES.includes(type))) return undefined;
  return `this version of Cairn writes no event of type ${alternatives(types)}${waiting ? '; waiting' : ''}${knownTypes(types)}`;
}

/** The list to find a near-miss in, when a name is not one Cairn writes (events of other writers may still come). */
function knownTypes(types: string[]): string {
  return types.every((type) => EVENT_TYPES.includes(type)) ? '' : ` (known types: ${EVENT_TYPES.join(', ')})`;
}

function alternatives(types: string[]): string {
  return types.map(quoted).join(' or ');
}
