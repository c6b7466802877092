import { SingleBar } from 'cli-progress';
import type { Command } from 'commander';
import { loadConfig } from '../infra/config.js';
import { createLogger } from '../infra/logger.js';
import { allProjections } from '../projections/index.js';
import type { Projection } from '../projections/projection.js';
import { rebuildProjection } from '../projections/rebuild.js';
import { projectionStatus } from '../projections/runner.js';
import { count, printJson, printTable } from './output.js';
import { OpsError, stopOnSignals, withStores } from './runtime.js';

/** The projections the CLI knows are the server's: one list. Problems while rebuilding (a text the embeddings provider refuses) are logged on stderr. */
let cached: readonly Projection[] | undefined;
/** Built when a command needs it, so an invalid setting fails that command with its message, not `--help`. */
const known = (): readonly Projection[] =>
  (cached ??= allProjections(loadConfig(), {}, createLogger(process.env.LOG_LEVEL?.trim() || 'warn', { toStderr: true })));

function findProjection(name: string): Projection {
  const projection = known().find((p) => p.name === name);
  if (!projection) throw new OpsError(`unknown projection "${name}"; valid names: ${known().map((p) => p.name).join(', ')}`);
  return projection;
}

/**
 * `projections status` exits with this after printing when a projection is failing, paused or ahead of the log (what makes
 * a server's /readyz answer 503), so that scripts and cron checks need not parse the output; distinct from 1 (the command
 * itself failed: a store not reachable…).
 */
const FAILING_EXIT_CODE = 3;

export function projectionCommands(program: Command): void {
  const projections = program.command('projections').description('read models: checkpoints, lag, rebuilds');

  projections.command('status').description('checkpoint, head, lag, pause and failure of every projection')
    .option('--json', 'print JSON')
    .addHelpText('after', `\nExit code: 0 when no projection is failing, paused or ahead of the log, ${FAILING_EXIT_CODE} when one is failing, paused in a server or its checkpoint lies past the log's end (after printing the status), 1 when the status could not be read.`)
    .action(async (opts: { json?: boolean }) => withStores(async ({ events, reads }) => {
      // So that projections that never ran are listed too, with lag = head.
      for (const p of known()) await reads.register(p.name, p.collections);
      const statuses = await projectionStatus(events, reads);
      const rows = await Promise.all(statuses.map(async (s) => {
        const rebuild = await reads.rebuildCheckpoint(s.projection);
        // updated_at: when it last committed a batch. A rebuild whose process was killed (kill -9) leaves its slot
        // until the next rebuild of the projection supersedes it; only a time that stopped moving tells it apart.
        return {
          ...s,
          rebuilding: rebuild ? { position: rebuild.position, generation: rebuild.generation, updated_at: rebuild.updated_at } : null,
        };
      }));
      if (opts.json) printJson(rows);
      else {
        printTable(rows.map(({ lag_at_least: atLeast, ahead, paused_by: pausedBy, ...r }) => ({
          ...r, lag: ahead ? 'AHEAD of the log' : atLeast ? `${r.lag}+` : r.lag, rebuilding: r.rebuilding && `g${r.rebuilding.generation} at ${r.rebuilding.position} (${r.rebuilding.updated_at ?? 'no batch yet'})`,
          paused: pausedBy && pausedBy.map((p) => `since ${p.since} by ${p.host}:${p.pid}`).join('; '),
          failing: r.failing && `${r.failing.count}x since ${r.failing.since} (last ${r.failing.last_at}): ${r.failing.message}`,
        })),
          ['projection', 'position', 'head', 'lag', 'generation', 'updated_at', 'rebuilding', 'paused', 'failing']);
      }
      const failing = rows.filter((r) => r.failing).map((r) => r.projection);
      const paused = rows.filter((r) => r.paused_at).map((r) => r.projection);
      const ahead = rows.filter((r) => r.ahead).map((r) => r.projection);
      const problems = [
        ...(failing.length > 0 ? [`failing projection${failing.length === 1 ? '' : 's'}: ${failing.join(', ')}`] : []),
        // Held back by a server (ProjectionHost.pause): reads there that wait for its later positions time out.
        ...(paused.length > 0 ? [`paused projection${paused.length === 1 ? '' : 's'}: ${paused.join(', ')}`] : []),
        // The server refuses to start on such read models (see readModelsAhead); a rebuild from this log mends them.
        ...(ahead.length > 0 ? [`ahead of the event log (built from another or a longer log; rebuild): ${ahead.join(', ')}`] : []),
      ];
      if (problems.length > 0) throw new OpsError(problems.join('; '), FAILING_EXIT_CODE);
    }));

  projections.command('rebuild').description('rebuild a read model from position 0 beside the live one, then swap it in')
    .argument('<name>', 'projection name (see `projections status`)')
    .option('--json', 'print the new checkpoint as JSON (no progress bar)')
    .action(async (name: string, opts: { json?: boolean }) => {
      const projection = findProjection(name);
      await withStores(async ({ events, reads }) => {
        const bar = !opts.json && process.stderr.isTTY
          ? new SingleBar({ stream: process.stderr, format: `${name} [{bar}] {value}/{total} positions | {applied} events applied | {eta_formatted}` })
          : undefined;
        let applied = 0;
        const started = Date.now();
        // The head as the total from the start: a total of 0 draws a full bar (0/0) until the first batch.
        bar?.start(await events.headPosition(), 0, { applied });
        // A stop signal ends the rebuild between batches and drops its unfinished generation.
        const stop = stopOnSignals(`rebuild of ${name} interrupted; the live generation is unchanged`);
        const checkpoint = await rebuildProjection(events, reads, projection, (p) => {
          applied = p.applied;
          bar?.setTotal(p.head);
          bar?.update(p.position, { applied });
        }, stop.signal).catch((error: unknown) => {
          throw stop.signal.aborted ? stop.signal.reason : error;
        }).finally(() => {
          stop.release();
          bar?.stop();
        });
        if (opts.json) return printJson({ ...checkpoint, applied });
        process.stdout.write(`rebuilt ${name}: generation ${checkpoint.generation} is live at position ${checkpoint.position} `
          + `(${count(applied, 'event')} applied in ${((Date.now() - started) / 1000).toFixed(1)} s)\n`);
      });
    });
}
