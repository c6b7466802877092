import { Writable } from 'node:stream';
import { pino } from 'pino';

/** A logger whose lines the test can read, parsed. */
export function capturingLogger() {
  const lines: Array<Record<string, any>> = [];
  const sink = new Writable({ write(chunk, _encoding, done) { for (const l of String(chunk).split('\n')) if (l) lines.push(JSON.parse(l)); done(); } });
  return { lines, log: pino({ level: 'info' }, sink) };
}

/** Polls `condition` every 5 ms until it holds; fails naming `what` after `ms`. */
export async function until(what: string, condition: () => boolean, ms = 5_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}
