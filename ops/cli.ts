#!/usr/bin/env node
/**
 * The operator CLI: `npm run ops -- <command>`. Uses the same stores as the server (DATA_DIR,
 * EVENTSTORE_URL, MONGODB_URL); the embedded files may be open in the server at the same time.
 */
import { Command, CommanderError } from 'commander';
import { backupCommands } from './backup.js';
import { eventCommands } from './events.js';
import { keyCommands } from './keys.js';
import { projectCommands } from './projects.js';
import { projectionCommands } from './projections.js';
import { outputAbandoned, stdoutFailure } from './output.js';
import { cairnVersion, OpsError } from './runtime.js';
import { streamCommands } from './streams.js';
import { startupProblem } from '../api/startup.js';
import { loadConfig } from '../infra/config.js';
import { EventStoreTimeoutError } from '../infra/eventstore/errors.js';
import { storeFileOf } from '../infra/stores.js';
import { describeError } from '../projections/health.js';
import { RebuildFailedError } from '../projections/rebuild.js';

/**
 * A store server's error as the server says it when it cannot start: the drivers' messages name neither the server
 * nor its setting (`getaddrinfo ENOTFOUND mongo.internal`, `Authentication failed.`), and may carry credentials.
 */
function storeServerProblem(thrown: unknown): string | undefined {
  // A rebuild that failed on a store server's error: the server is what failed, not the event it was applying.
  const error = thrown instanceof RebuildFailedError ? thrown.cause : thrown;
  const mongo = error instanceof Error && error.name.startsWith('Mongo');
  if (!mongo && !(error instanceof EventStoreTimeoutError)) return undefined;
  // The configuration loaded before the store was opened: it loads again.
  return startupProblem(error, loadConfig()) ?? `${mongo ? 'MONGODB_URL' : 'EVENTSTORE_URL'}: ${describeError(error)}`;
}

/** package.json's version: the tools and the server they operate on are released together. */
const program = new Command('ops')
  .description('Cairn operator tools: inspect the event log and read models, rebuild projections, bootstrap projects and keys, back up the embedded stores')
  .version(cairnVersion(), '-V, --version', 'print the version of Cairn these tools belong to')
  .showHelpAfterError('(add --help for usage)')
  .exitOverride();

// `ops … | head`, or output into a file on a full disk: a line on stderr where one is due (see stdoutFailure), not a stack trace.
process.stdout.on('error', (error: NodeJS.ErrnoException) => {
  const { message, exitCode } = stdoutFailure(error);
  if (message) process.stderr.write(`error: ${message}\n`);
  process.exit(exitCode);
});

streamCommands(program);
eventCommands(program);
projectionCommands(program);
projectCommands(program);
keyCommands(program);
backupCommands(program);

try {
  await program.parseAsync(process.argv);
} catch (error) {
  if (error instanceof CommanderError) {
    // Commander already printed its message (or the help/version it was asked for).
    process.exitCode = error.exitCode;
  } else {
    // A store file SQLite cannot use is named: its message alone ("file is not a database") does not say which.
    const file = storeFileOf(error);
    const message = storeServerProblem(error) ?? `${file ? `${file}: ` : ''}${error instanceof Error ? error.message : String(error)}`;
    process.stderr.write(`error: ${message}\n`);
    process.exitCode = error instanceof OpsError ? error.exitCode : 1;
  }
}
// Stores are closed by now; don't let a stray handle (a driver's timer) keep the process alive. Counted from when
// stdout has taken everything: output still on its way to a slow pipe reader (`| less`) is not cut short, unless the
// command was stopped (Ctrl-C on a tail whose reader stopped reading: that reader may never read again).
const exitSoon = () => setTimeout(() => process.exit(), 2000).unref();
if (outputAbandoned()) exitSoon();
else process.stdout.write('', exitSoon);
