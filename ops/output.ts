/** Output for humans (aligned tables) and for scripts (`--json`). Data goes to stdout, everything else to stderr. */
import { once } from 'node:events';

export function printJson(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
}

/** One compact JSON document per line, for streams of records (`events tail --json`). */
export function jsonLine(value: unknown): string {
  return `${JSON.stringify(value)}\n`;
}

/**
 * For long outputs (`events tail` catching up with a large log): waits while a piped reader is behind, and
 * otherwise gives the event loop a turn, so that Ctrl-C is handled and unread output does not pile up in memory.
 * (A pipe is written asynchronously on POSIX: a reader that stopped reading leaves the event loop free.) `signal`
 * ends the wait for a reader that may never read again, rejecting with an AbortError.
 */
export async function writeOut(text: string, signal?: AbortSignal): Promise<void> {
  if (!process.stdout.write(text)) await once(process.stdout, 'drain', { signal });
  else await new Promise((resolve) => setImmediate(resolve));
}

let abandoned = false;

/** The command was stopped (Ctrl-C): output its reader has not taken is dropped rather than waited for (see cli.ts). */
export function abandonOutput(): void {
  abandoned = true;
}

/** Whether the process should end without waiting for stdout to take what was written (see abandonOutput). */
export function outputAbandoned(): boolean {
  return abandoned;
}

/**
 * Waits until everything written to stdout has been handed to the system. A pipe is written asynchronously: what a
 * slow reader (`| less`, `| ssh …`) has not taken yet waits in this process, and the CLI ends its process 2 s after
 * its command returns (cli.ts), which would cut a long output short while the exit code says success. `signal` ends
 * the wait for a reader that may never read again, rejecting with an AbortError, as writeOut's.
 */
export async function flushOut(signal?: AbortSignal): Promise<void> {
  signal?.throwIfAborted();
  const flushed = new Promise<void>((resolve) => process.stdout.write('', () => resolve()));
  if (!signal) return flushed;
  let onAbort: (() => void) | undefined;
  const aborted = new Promise<never>((_, reject) => signal.addEventListener('abort', onAbort = () => reject(signal.reason), { once: true }));
  try {
    await Promise.race([flushed, aborted]);
  } finally {
    signal.removeEventListener('abort', onAbort!);
  }
}

/**
 * Text for a terminal: control characters written as `\uXXXX`. Event data is whatever clients sent, and
 * JSON.stringify escapes only C0: DEL and C1 stay raw, and terminals such as VTE (GNOME Terminal) and screen
 * act on C1 (U+009B is CSI), so a stored text could move the cursor and overwrite the lines an operator reads.
 */
export function printable(text: string): string {
  return text.replace(/[\u0000-\u001f\u007f-\u009f]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

/** A name in a message, in double quotes (an empty one shows), its control characters escaped as in printable. */
export function quoted(name: string): string {
  return printable(JSON.stringify(name));
}

/**
 * A name as a shell word an operator can paste into the next command (`--after <name>`): as it is if it has only
 * safe characters, else in single quotes, or, with control characters, as `$'…'` with `\uXXXX` escapes (bash,
 * zsh and ksh read those), so that the name cannot drive the terminal either.
 */
export function shellWord(name: string): string {
  if (/^[\w./:@%+=,-]+$/.test(name)) return name;
  if (printable(name) === name) return `'${name.replaceAll("'", "'\\''")}'`;
  return `$'${printable(name.replace(/[\\']/g, '\\$&'))}'`;
}

/** `1 event`, `2 events`. */
export function count(n: number, noun: string): string {
  return `${n} ${noun}${n === 1 ? '' : 's'}`;
}

export function cell(value: unknown): string {
  if (value === null || value === undefined || value === '') return '-';
  return printable(typeof value === 'string' ? value : JSON.stringify(value));
}

export function printTable<Row extends object>(rows: Row[], columns: Array<keyof Row & string>): void {
  if (rows.length === 0) {
    process.stderr.write('(none)\n');
    return;
  }
  const lines = [columns.map((c) => c.toUpperCase()), ...rows.map((row) => columns.map((c) => cell(row[c])))];
  const widths = columns.map((_, i) => Math.max(...lines.map((line) => line[i]!.length)));
  for (const line of lines) {
    process.stdout.write(`${line.map((text, i) => (i === line.length - 1 ? text : text.padEnd(widths[i]!))).join('  ')}\n`);
  }
}

export function notice(message: string): void {
  process.stderr.write(`${message}\n`);
}

/** What stderr says, given why, if stdout cannot take a secret that exists nowhere else (see writeSecret). */
let lostSecretNotice: ((cause: string) => string) | undefined;

/**
 * What to say on stderr when stdout fails, and the exit code. A reader that went away (`ops … | head`) is how a
 * pipe ends: quiet, as other Unix tools are, with the exit code the command had. Any other failure (a file on a full
 * disk: ENOSPC, EFBIG, EIO) lost output the operator asked for: one line naming it, exit code 1. Either way, a
 * secret that was not written is named, with what to do about it.
 */
export function stdoutFailure(error: NodeJS.ErrnoException): { message?: string; exitCode: number } {
  const gone = error.code === 'EPIPE';
  const cause = gone ? 'its reader went away' : error.message;
  const message = lostSecretNotice?.(cause) ?? (gone ? undefined : `cannot write the output: ${cause}`);
  return { message, exitCode: gone ? Number(process.exitCode ?? 0) : 1 };
}

/**
 * Writes a secret that is shown once (a new API key). Until it is out the exit code is 1: a broken pipe
 * (`ops keys create | …` whose reader is gone) or a full disk must not pass for success, and stderr says what was
 * lost (`lostNotice`, given the cause).
 */
export async function writeSecret(text: string, lostNotice: (cause: string) => string): Promise<void> {
  process.exitCode = 1;
  lostSecretNotice = lostNotice;
  await new Promise<void>((resolve, reject) => process.stdout.write(text, (error) => (error ? reject(error) : resolve())));
  lostSecretNotice = undefined;
  process.exitCode = undefined;
}
