import { loadConfig } from '../infra/config.js';
import { createLogger } from '../infra/logger.js';
import { startCairn } from './app.js';

const config = loadConfig();
const log = createLogger(config.logLevel);
const cairn = await startCairn({ config, log });
log.info({
  platform: `${cairn.platformUrl}/api/v1`, memory: cairn.memoryUrl,
  event_store: cairn.events.kind, read_store: cairn.reads.kind, data_dir: config.dataDir,
}, 'cairn started');

let stopping = false;
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    if (stopping) return;
    stopping = true;
    log.info({ signal }, 'stopping');
    cairn.close().then(() => process.exit(0), (error) => {
      log.error({ err: error }, 'error while stopping');
      process.exit(1);
    });
  });
}
