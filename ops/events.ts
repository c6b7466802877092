import type { Command } from 'commander';
import { jsonLine, printable, writeOut } from './output.js';
import { commaList, nonNegativeInt, positiveInt, withEventLog } from './runtime.js';
import { eventView } from './streams.js';

export function eventCommands(program: Command): void {
  program.command('events').description('follow the whole event log')
    .command('tail').description('print events as they are appended, until Ctrl-C')
    .option('--type <type...>', 'only events of these types (repeatable, or comma-separated)', commaList)
    .option('--from <position>', 'start after this log position (0 = from the beginning; default: the current head)', nonNegativeInt)
    .option('--count <n>', 'stop after this many events', positiveInt)
    .option('--json', 'print one JSON object per line')
    .action(async (opts: { type?: string[]; from?: number; count?: number; json?: boolean }) => withEventLog(async (events) => {
      const abort = new AbortController();
      const stop = () => abort.abort();
      process.once('SIGINT', stop);
      try {
        const from = opts.from ?? (await events.headPosition());
        const filter = opts.type?.length ? { types: opts.type } : undefined;
        let seen = 0;
        for await (const event of events.subscribeToAll(from, { filter, signal: abort.signal })) {
          const view = eventView(event);
          await writeOut(opts.json ? jsonLine(view)
            : `${printable(`${view.position}  ${view.recorded_at}  ${view.stream}@${view.revision}  ${view.type}  ${JSON.stringify(view.data)}`)}\n`);
          if (opts.count !== undefined && ++seen >= opts.count) break;
        }
      } finally {
        process.off('SIGINT', stop);
      }
    }));
}
