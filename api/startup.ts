import { basename } from 'node:path';
import type { Config } from '../infra/config.js';
import { storeFileOf } from '../infra/stores.js';
import { EventStoreTimeoutError } from '../infra/eventstore/errors.js';
import { ReadModelsAheadError } from '../projections/ahead.js';
import { describeError } from '../projections/health.js';

type SystemError = Error & { code?: string; syscall?: string; path?: string; address?: string; port?: number };

/**
 * What an operator can act on when the server cannot start, as one line (like a configuration error): a port
 * in use or not permitted, a DATA_DIR that cannot be written, an embedded store file that is not a database,
 * read models ahead of their log, an EventStoreDB or MongoDB server that cannot be reached. Anything else (a defect) is left to the stack trace: undefined.
 */
export function startupProblem(error: unknown, config: Pick<Config, 'host' | 'port' | 'memoryPort' | 'dataDir'>): string | undefined {
  if (error instanceof ReadModelsAheadError) return error.message;
  if (!(error instanceof Error)) return undefined;
  // A store server that is down or unreachable at start (first line, credentials redacted: describeError).
  if (error instanceof EventStoreTimeoutError) return `EVENTSTORE_URL: ${describeError(error)}; check that EventStoreDB is running and reachable from here`;
  if (['MongoServerSelectionError', 'MongoNetworkError', 'MongoNetworkTimeoutError'].includes(error.name)) {
    return `MONGODB_URL: MongoDB could not be reached (${describeError(error)}); check that it is running and reachable from here`;
  }
  const { code, syscall, path, port } = error as SystemError;
  // The address refused, whatever the port (Node's error names none when listening on 0, a free port).
  if (syscall === 'listen' && code === 'EADDRNOTAVAIL') return `HOST ${config.host} is not an address of this machine (EADDRNOTAVAIL)`;
  if (syscall === 'listen' && code === 'EINVAL') {
    const zoneless = /^fe[89ab][0-9a-f]:/i.test(config.host) && !config.host.includes('%');
    return `HOST ${config.host} cannot be listened on (EINVAL)${zoneless ? ': a link-local IPv6 address needs its zone (fe80::1%eth0)' : ''}; set HOST to an address of this machine (127.0.0.1, 0.0.0.0, ::)`;
  }
  if (syscall === 'listen' && port !== undefined) {
    const variable = port === config.port ? 'PORT' : port === config.memoryPort ? 'MEMORY_PORT' : 'the port';
    const where = `${config.host}:${port} (${variable})`;
    if (code === 'EADDRINUSE') return `${where} is in use by another process (EADDRINUSE): stop it, or set ${variable} to a free port`;
    if (code === 'EACCES') return `listening on ${where} is not permitted (EACCES): ports below 1024 need privileges; use a higher port`;
    return undefined;
  }
  // listen() looks HOST up when it is a name: one that does not resolve.
  if (syscall === 'getaddrinfo' && (error as SystemError & { hostname?: string }).hostname === config.host) {
    return `HOST ${config.host} cannot be resolved (${code}): set HOST to an address of this machine (127.0.0.1, 0.0.0.0, ::) or a name that resolves to one`;
  }
  // mkdir of DATA_DIR, or SQLite opening a file in it.
  if (path !== undefined && ['EACCES', 'EPERM', 'EROFS', 'ENOTDIR', 'ENOSPC', 'EEXIST'].includes(code ?? '')) {
    return `DATA_DIR ${config.dataDir}: ${syscall ?? 'access'} '${path}' failed: ${error.message.replace(/^[A-Z]+: /, '').split(',')[0]} (${code})`;
  }
  const file = storeFileOf(error);
  if (code === 'SQLITE_NOTADB' || code === 'SQLITE_CORRUPT') {
    return `DATA_DIR ${config.dataDir}: ${file ? basename(file) : 'events.db or readmodels.db'} is not a SQLite database or is damaged (${code}: ${error.message})`;
  }
  if (code === 'SQLITE_CANTOPEN' || code === 'SQLITE_READONLY' || code === 'SQLITE_PERM') {
    return `DATA_DIR ${config.dataDir}: ${file ? basename(file) : 'the embedded stores'} cannot be opened for writing (${code}: ${error.message}); check its permissions`;
  }
  return undefined;
}
