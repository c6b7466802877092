import { pino } from 'pino';

export type Logger = pino.Logger;

/**
 * JSON logs on stdout (the server), or on stderr (`toStderr`: the operator CLI, whose stdout is its
 * output), or to `destination`. Secrets are redacted by path, at the top level of a record and one level
 * down, so a logged request never carries them.
 */
export function createLogger(level: string | undefined = process.env.LOG_LEVEL, options: { toStderr?: boolean; destination?: pino.DestinationStream } = {}): Logger {
  const settings = {
    // Read as config.ts reads LOG_LEVEL: case and surrounding blanks aside, and blank is the default (pino
    // itself would refuse " warn" or "" at start-up, in the operator CLI that passes the variable on).
    level: level?.trim().toLowerCase() || 'info',
    redact: {
      paths: ['req.headers.authorization', 'req.headers.cookie', 'headers.authorization', 'authorization', 'key', 'signing_secret', 'token', '*.key', '*.signing_secret', '*.token'],
      censor: '[redacted]',
    },
  };
  if (options.destination) return pino(settings, options.destination);
  return options.toStderr ? pino(settings, pino.destination(2)) : pino(settings);
}
