import { Worker } from 'node:worker_threads';

/**
 * Starts a worker thread from a module next to `importMetaUrl` (given without extension). When running
 * from TypeScript sources (tsx, tap), the worker registers tsx's loader before importing the module,
 * since loader hooks registered in this thread do not carry over to workers. tsx is resolved from this
 * module, not from the working directory (where an eval worker would look for it): a server started from
 * another directory (`/opt/cairn/node_modules/.bin/tsx /opt/cairn/api/main.ts`) starts its threads too.
 */
export function startWorker(importMetaUrl: string, relativePath: string, workerData: unknown): Worker {
  const fromSources = importMetaUrl.endsWith('.ts');
  const module = new URL(`${relativePath}${fromSources ? '.ts' : '.js'}`, importMetaUrl);
  if (!fromSources) return new Worker(module, { workerData });
  const bootstrap = `import(${JSON.stringify(import.meta.resolve('tsx/esm/api'))}).then((tsx) => { tsx.register(); return import(${JSON.stringify(module.href)}); })`;
  return new Worker(bootstrap, { eval: true, workerData });
}
