/** Output for humans (aligned tables) and for scripts (`--json`). Data goes to stdout, everything else to stderr. */

export function printJson(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
}

/** One compact JSON document per line, for streams of records (`events tail --json`). */
export function printJsonLine(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value)}\n`);
}

export function cell(value: unknown): string {
  if (value === null || value === undefined || value === '') return '-';
  return typeof value === 'string' ? value : JSON.stringify(value);
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
