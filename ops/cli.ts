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
import { brokenPipeMessage } from './output.js';
import { OpsError } from './runtime.js';
import { streamCommands } from './streams.js';
import { storeFileOf } from '../infra/stores.js';
import { readFileSync } from 'node:fs';

/** package.json's version: the tools and the server they operate on are released together. */
function packageVersion(): string {
  return (JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }).version;
}

const program = new Command('ops')
  .description('Cairn operator tools: inspect the event log and read models, rebuild projections, bootstrap projects and keys, back up the embedded stores')
  .version(packageVersion(), '-V, --version', 'print the version of Cairn these tools belong to')
  .showHelpAfterError('(add --help for usage)')
  .exitOverride();

// `ops … | head`: once the reader is gone, stop quietly as other Unix tools do, instead of a stack trace.
process.stdout.on('error', (error: NodeJS.ErrnoException) => {
  if (error.code !== 'EPIPE') throw error;
  const lost = brokenPipeMessage();
  if (lost) process.stderr.write(`error: ${lost}\n`);
  process.exit(process.exitCode ?? 0);
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
    process.stderr.write(`error: ${file ? `${file}: ` : ''}${error instanceof Error ? error.message : String(error)}\n`);
    process.exitCode = error instanceof OpsError ? error.exitCode : 1;
  }
}
// Stores are closed by now; don't let a stray handle (a driver's timer) keep the process alive.
setTimeout(() => process.exit(), 2000).unref();
