import { pino } from 'pino';

export type Logger = pino.Logger;

/**
 * JSON logs on stdout (the server), or on stderr (`toStderr`: the operator CLI, whose stdout is its
 * output). Secrets are redacted by path so a logged request never carries them.
 */
export function createLogger(level = process.env.LOG_LEVEL ?? 'info', options: { toStderr?: boolean } = {}): Logger {
  const settings = {
    level,
    redact: {
      paths: ['req.headers.authorization', 'req.headers.cookie', 'headers.authorization', '*.key', '*.signing_secret', '*.token'],
      censor: '[redacted]',
    },
  };
  return options.toStderr ? pino(settings, pino.destination(2)) : pino(settings);
}
