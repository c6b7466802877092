import type { Test } from 'tap';
import { startTestCairn, type TestCairn } from './cairn.js';
import { capturingLogger } from './logs.js';
import { startOpenAiServer, type OpenAiServer } from './openai-server.js';

/** Cairn with its chat provider played by a local OpenAI-compatible server, its log captured. */
export interface ProviderApp {
  server: OpenAiServer;
  app: TestCairn;
  lines: Array<Record<string, any>>;
  /** A POST to the memory service, its body parsed. */
  post(path: string, json: unknown): Promise<{ status: number; body: any; text: string }>;
}

/** Started for `t` (stopped at its end): no retries unless `env` says otherwise. */
export async function startProviderApp(t: Test, env: Record<string, string>): Promise<ProviderApp> {
  const server = await startOpenAiServer();
  const { lines, log } = capturingLogger();
  const app = await startTestCairn({ LLM_BASE_URL: server.url, LLM_MAX_RETRIES: '0', ...env }, { log });
  t.teardown(async () => {
    await app.stop();
    await server.close();
  });
  return {
    server, app, lines,
    async post(path, json) {
      const res = await app.memory(path, { method: 'POST', json });
      const text = await res.text();
      return { status: res.status, body: JSON.parse(text), text };
    },
  };
}
