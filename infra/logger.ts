import { pino } from 'pino';

export type Logger = pino.Logger;

/**
 * JSON logs on stdout (the server), or on stderr (`toStderr`: the operator CLI, whose stdout is its
 * output), or to `destination`. Secrets are redacted by path, at the top level of a record and one level
 * down, so a logged request never carries them.
 */
export function createLogger(level = process.env.LOG_LEVEL ?? 'info', options: { toStderr?: boolean; destination?: pino.DestinationStream } = {}): Logger {
  const settings = {
    level,
    redact: {
      paths: ['req.headers.authorization', 'req.headers.cookie', 'headers.authorization', 'authorization', 'key', 'signing_secret', 'token', '*.key', '*.signing_secret', '*.token'],
      censor: '[redacted]',
    },
  };
  if (options.destination) return pino(settings, options.destination);
  return options.toStderr ? pino(settings, pino.destination(2)) : pino(settings);
}
