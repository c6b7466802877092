import { pino } from 'pino';

export type Logger = pino.Logger;

/** JSON logs on stdout. Secrets are redacted by path so a logged request never carries them. */
export function createLogger(level = process.env.LOG_LEVEL ?? 'info'): Logger {
  return pino({
    level,
    redact: {
      paths: ['req.headers.authorization', 'req.headers.cookie', 'headers.authorization', '*.key', '*.signing_secret', '*.token'],
      censor: '[redacted]',
    },
  });
}
