import t from 'tap';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Command } from 'commander';
import { loadConfig, type Config } from '../../infra/config.js';
import { backupCommands } from '../../ops/backup.js';
import { eventCommands } from '../../ops/events.js';
import { keyCommands } from '../../ops/keys.js';
import { projectCommands } from '../../ops/projects.js';
import { projectionCommands } from '../../ops/projections.js';
import { streamCommands } from '../../ops/streams.js';

/**
 * README's configuration tables, bench commands and operator examples are what a new user and an operator act on:
 * these tests keep them equal to the code (infra/config.ts, package.json, the ops command tree).
 */
const root = fileURLToPath(new URL('../../', import.meta.url));
const readme = readFileSync(join(root, 'README.md'), 'utf8');

/** Rows of README's configuration tables: the variables a row names (`A`, `B` in its first cell), its default cell, its meaning. */
const configRows = readme.split('\n')
  .map((line) => line.split('|').map((cell) => cell.trim()))
  .filter((cells) => cells.length >= 5 && /^`[A-Z][A-Z0-9_]*`/.test(cells[1]!))
  .map((cells) => ({ names: [...cells[1]!.matchAll(/`([A-Z][A-Z0-9_]*)`/g)].map((m) => m[1]!), fallback: cells[2]!, meaning: cells.slice(3, -1).join('|') }));

t.test('the configuration tables list every variable infra/config.ts reads, and nothing else', async (t) => {
  const source = readFileSync(join(root, 'infra/config.ts'), 'utf8');
  // Read as env.NAME, or by name through the helpers (bounded('PORT', …), flag(…), baseUrl(…), connectionString(…)).
  const read = new Set([...source.matchAll(/env\.([A-Z][A-Z0-9_]+)|\(\s*'([A-Z][A-Z0-9_]+)'\s*,/g)].map((m) => (m[1] ?? m[2])!));
  t.ok(read.size >= 30, `found the variables config.ts reads (${read.size})`);
  const listed = new Set(configRows.flatMap((r) => r.names));
  t.strictSame([...read].filter((name) => !listed.has(name)).sort(), [], 'every variable read is in a README table');
  t.strictSame([...listed].filter((name) => !read.has(name)).sort(), [], 'every variable in a README table is read');
});

t.test('the defaults and ranges the tables give are the ones loadConfig applies', async (t) => {
  const settings: Record<string, (c: Config) => unknown> = {
    HOST: (c) => c.host, PORT: (c) => c.port, MEMORY_PORT: (c) => c.memoryPort,
    EVENTSTORE_TIMEOUT_MS: (c) => c.eventStoreTimeoutMs, MONGODB_DB: (c) => c.mongodbDb,
    AUTH_TENANT_CLAIM: (c) => c.auth.tenantClaim, AUTH_SESSION_MAX_AGE: (c) => c.auth.sessionMaxAgeSeconds,
    CONSISTENCY_TIMEOUT_MS: (c) => c.consistencyTimeoutMs, SEND_TIMEOUT_MS: (c) => c.sendTimeoutMs, PROJECTIONS_THREAD: (c) => c.projectionsThread,
    STATE_CACHE_MB: (c) => c.stateCacheMb, PROJECTIONS_NICE: (c) => c.projectionsNice, READY_MAX_LAG: (c) => c.readyMaxLag,
    LOG_LEVEL: (c) => c.logLevel, LLM_CHAT_MODEL: (c) => c.providers.llm.chatModel,
    CHAT_MEMORY_MAX_BYTES: (c) => c.providers.llm.chatMemoryMaxBytes, LLM_TIMEOUT_MS: (c) => c.providers.llm.timeoutMs,
    LLM_MAX_RETRIES: (c) => c.providers.llm.maxRetries, EMBEDDINGS_PROVIDER: (c) => c.providers.embeddings.provider,
    LLM_EMBEDDING_MODEL: (c) => c.providers.embeddings.model,
  };
  const defaults = loadConfig({});
  for (const row of configRows) {
    for (const name of row.names) {
      const setting = settings[name];
      if (!setting) continue;
      const documented = /^`([^`]*)`/.exec(row.fallback)?.[1];
      t.equal(documented ?? 'unset', String(setting(defaults) ?? 'unset'), `${name}: default as documented (${row.fallback})`);
      // The first range the meaning gives ("0 to 65535", "1–100,000") is the variable's bounds.
      const range = /(\d[\d,]*)\s*(?:to|–)\s*(\d[\d,]*)/.exec(row.meaning);
      if (!range || typeof setting(defaults) === 'string') continue;
      const [min, max] = [Number(range[1]!.replaceAll(',', '')), Number(range[2]!.replaceAll(',', ''))];
      const accepts = (value: number) => { try { loadConfig({ [name]: String(value) }); return true; } catch { return false; } };
      t.ok(accepts(min) && accepts(max), `${name}: ${min} and ${max} are accepted`);
      if (min > 0) t.notOk(accepts(min - 1), `${name}: ${min - 1} is refused`);
      t.notOk(accepts(max + 1), `${name}: ${max + 1} is refused`);
    }
  }
});

t.test('every benchmark script of package.json is in README', async (t) => {
  const scripts = Object.keys((JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts);
  const benches = scripts.filter((name) => name.startsWith('bench:'));
  t.ok(benches.length > 0, 'package.json has bench scripts');
  for (const name of benches) t.ok(readme.includes(`npm run ${name} `), `README shows npm run ${name}`);
});

t.test('the operator commands README shows exist, with the options it gives them', async (t) => {
  const program = new Command('ops');
  for (const register of [streamCommands, eventCommands, projectionCommands, projectCommands, keyCommands, backupCommands]) register(program);
  const lines = [...readme.matchAll(/^npm run ops -- (.*)$/gm)].map((m) => m[1]!.replace(/\s+#.*$/, ''));
  t.ok(lines.length >= 8, `README shows operator commands (${lines.length})`);
  for (const line of lines) {
    const words = line.split(/\s+/);
    let command = program;
    for (const word of words) {
      const sub = command.commands.find((c) => c.name() === word);
      if (!sub) break;
      command = sub;
    }
    t.not(command, program, `${line}: a command`);
    const options = [...line.matchAll(/(?<![\w-])(--[a-z][a-z-]*)/g)].map((m) => m[1]!);
    for (const option of options) t.ok(command.options.some((o) => o.long === option), `${command.name()}: ${option} exists`);
  }
});

t.test('every in-page link of README leads to one of its headings (GitHub\'s anchors)', async (t) => {
  // GitHub's slugs: lower case, punctuation other than `-` and `_` dropped, spaces as `-`, a repeated slug numbered `-1`, `-2`.
  const seen = new Map<string, number>();
  const anchors = new Set<string>();
  let fenced = false;
  for (const line of readme.split('\n')) {
    if (line.startsWith('```')) fenced = !fenced;
    const heading = fenced ? null : /^#{1,6} (.+)$/.exec(line);
    if (!heading) continue;
    const slug = heading[1]!.trim().toLowerCase().replace(/`/g, '').replace(/[^\p{L}\p{N}\s_-]/gu, '').replace(/\s/g, '-');
    const n = seen.get(slug) ?? 0;
    seen.set(slug, n + 1);
    anchors.add(n === 0 ? slug : `${slug}-${n}`);
  }
  const links = [...readme.matchAll(/\]\(#([^)]+)\)/g)].map((m) => m[1]!);
  t.ok(links.length >= 10, `README links within itself (${links.length})`);
  t.strictSame([...new Set(links)].filter((a) => !anchors.has(a)), [], 'each names a heading');
});
