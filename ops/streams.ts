import type { Command } from 'commander';
import type { RecordedEvent } from '../infra/eventstore/port.js';
import { count, flushOut, notice, printJson, printTable, quoted, shellWord } from './output.js';
import { nonNegativeInt, OpsError, positiveInt, withEventLog } from './runtime.js';

/**
 * What operators see of an event: the envelope with its id, who caused it (correlation_id and actor for the
 * tables, and the whole metadata: causation_id, project_id, occurred_at, ... for audits), and the data.
 */
export function eventView(e: RecordedEvent) {
  return {
    position: e.position,
    stream: e.stream,
    revision: e.revision,
    id: e.id,
    type: e.type,
    recorded_at: e.recorded_at,
    correlation_id: e.metadata.correlation_id,
    actor: e.metadata.actor,
    metadata: e.metadata,
    data: e.data,
  };
}

export function streamCommands(program: Command): void {
  program.command('streams').description('inspect the streams of the event log')
    .command('list').description('list streams in name order')
    .option('--prefix <prefix>', 'only streams whose name starts with this (a category, e.g. project-)')
    .option('--limit <n>', 'at most this many streams', positiveInt, 100)
    .option('--after <name>', 'start after this stream name (the last name of the previous page)')
    .option('--json', 'print JSON')
    .action(async (opts: { prefix?: string; limit: number; after?: string; json?: boolean }) => withEventLog(async (events) => {
      // One more than the page, to say whether more follow: a full page alone may be the last one.
      const found = await events.listStreams({ prefix: opts.prefix, limit: opts.limit + 1, after: opts.after });
      const streams = found.slice(0, opts.limit);
      if (opts.json) printJson(streams);
      else printTable(streams, ['stream', 'revision', 'event_count', 'last_position', 'updated_at']);
      // With --json too (stderr keeps stdout a JSON document): a script must not take a page for the whole list.
      if (found.length > opts.limit) notice(`more follow: --after ${shellWord(streams.at(-1)!.stream)}`);
      await flushOut();
    }));

  program.command('stream').description('inspect one stream')
    .command('show').description("print a stream's events in revision order")
    .argument('<name>', 'stream name, e.g. project-<uuid>')
    .option('--from <revision>', 'first revision to show', nonNegativeInt, 0)
    .option('--limit <n>', 'at most this many events', positiveInt, 100)
    .option('--json', 'print JSON')
    .action(async (name: string, opts: { from: number; limit: number; json?: boolean }) => withEventLog(async (events) => {
      const info = await events.streamInfo(name);
      if (!info) throw new OpsError(`stream ${quoted(name)} not found`);
      const page = (await events.readStream(name, { fromRevision: opts.from, limit: opts.limit })).map(eventView);
      if (opts.json) printJson(page);
      else printTable(page, ['position', 'revision', 'type', 'recorded_at', 'correlation_id', 'actor', 'data']);
      const last = page.at(-1)?.revision ?? opts.from - 1;
      if (last < info.revision) notice(`${count(info.revision - last, 'more event')}: --from ${last + 1}`);
      // An empty page alone would pass for an empty stream, or for the end of one that has none after --from.
      else if (opts.from > info.revision) notice(`note: --from ${opts.from} is past the stream's last revision (${info.revision}); it holds ${count(info.event_count, 'event')}`);
      await flushOut();
    }));
}
