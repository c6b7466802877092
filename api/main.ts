import { constants } from 'node:os';
import { ConfigError, loadConfig, type Config } from '../infra/config.js';
import { createLogger } from '../infra/logger.js';
import { REPEATED_SIGNAL_MS } from '../infra/signals.js';
import { startCairn } from './app.js';
import { startupProblem } from './startup.js';

/** A setting Cairn cannot run with is one line on stderr and exit code 1, not a stack trace that reads like a crash. */
function configOrExit(): Config {
  try {
    return loadConfig();
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    process.stderr.write(`cairn: configuration error: ${error.message}\n`);
    process.exit(1);
  }
}

const config = configOrExit();
const log = createLogger(config.logLevel);
const cairn = await startCairn({ config, log }).catch((error: unknown) => {
  // A connection string the driver refuses as it opens the store.
  if (error instanceof ConfigError) {
    process.stderr.write(`cairn: configuration error: ${error.message}\n`);
    process.exit(1);
  }
  // What the operator can act on is one line, like a configuration error; a defect keeps its stack trace.
  const problem = startupProblem(error, config);
  if (problem === undefined) throw error;
  process.stderr.write(`cairn: cannot start: ${problem}\n`);
  process.exit(1);
});
log.info({
  platform: `${cairn.platformUrl}/api/v1`, memory: cairn.memoryUrl,
  event_store: cairn.events.kind, read_store: cairn.reads.kind, data_dir: config.dataDir,
}, 'cairn started');

/** When the first stop signal came (performance.now()); undefined while running. */
let stoppingSince: number | undefined;
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    if (stoppingSince !== undefined) {
      if (performance.now() - stoppingSince < REPEATED_SIGNAL_MS) {
        log.info({ signal }, 'stop signal repeated at once: the same stop delivered twice (to a wrapper such as npm or tsx and to the server, or by a service manager signalling every process of the service), not a second one');
        return;
      }
      // A second Ctrl-C (or a service manager's second SIGTERM) stops at once, as a kill would: acknowledged writes
      // are on disk already; requests still in flight are cut and the read models catch up at the next start.
      log.warn({ signal }, 'stopping now, without waiting for requests in flight');
      process.exit(128 + constants.signals[signal]); // as a shell reports a process the signal ended: 130, 143
    }
    stoppingSince = performance.now();
    log.info({ signal }, 'stopping');
    cairn.close().then(() => process.exit(0), (error) => {
      log.error({ err: error }, 'error while stopping');
      process.exit(1);
    });
  });
}
