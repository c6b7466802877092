/**
 * JSON over HTTP to OpenAI-compatible providers: one timeout per attempt (covering the reply body too),
 * and a bounded retry with exponential backoff on 429 and 5xx (honouring Retry-After up to a cap).
 * Failures become ProviderError, which carries the upstream status and a truncated body for the log;
 * the HTTP layer never puts either into a response.
 */
export class ProviderError extends Error {
  override readonly name = 'ProviderError';
  constructor(
    readonly provider: string,
    message: string,
    readonly status?: number,
    /** The upstream reply body, truncated: for the server log only. */
    readonly body?: string,
  ) {
    super(message);
  }
}

/**
 * A provider's answer that will not change by asking again: a 4xx other than 408 (timeout) and 429 (rate
 * limit), e.g. a text over the model's context length. Anything else (network, timeouts, 5xx, 429) may
 * pass on a later try.
 */
export function isPermanentRefusal(error: unknown): error is ProviderError {
  const status = error instanceof ProviderError ? error.status : undefined;
  return status !== undefined && status >= 400 && status < 500 && status !== 408 && status !== 429;
}

export interface HttpProviderOptions {
  baseUrl: string;
  apiKey?: string;
  timeoutMs: number;
  maxRetries: number;
  /** First backoff; doubled per attempt. */
  retryBaseMs?: number;
}

/** How much of a provider's reply goes into an error and the log (never into a response). */
export const BODY_LOG_LIMIT = 2000;
const MAX_RETRY_AFTER_MS = 10_000;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function retryDelay(attempt: number, baseMs: number, retryAfter: string | null): number {
  const seconds = retryAfter !== null ? Number(retryAfter) : NaN;
  if (Number.isFinite(seconds) && seconds >= 0) return Math.min(seconds * 1000, MAX_RETRY_AFTER_MS);
  const backoff = baseMs * 2 ** attempt;
  return backoff / 2 + Math.random() * (backoff / 2);
}

export async function postJson(provider: string, options: HttpProviderOptions, path: string, body: unknown): Promise<unknown> {
  const url = `${options.baseUrl}${path}`;
  const headers: Record<string, string> = { 'Content-Type': 'application/json', Accept: 'application/json' };
  if (options.apiKey) headers.Authorization = `Bearer ${options.apiKey}`;
  const payload = JSON.stringify(body);
  for (let attempt = 0; ; attempt++) {
    let status: number;
    let text: string;
    let retryAfter: string | null;
    try {
      // Redirects are not followed: a 307/308 would re-send the user's text (and, same-origin, the API key)
      // wherever the provider points; a provider that redirects is misconfigured, so it is a failure.
      const res = await fetch(url, { method: 'POST', headers, body: payload, redirect: 'manual', signal: AbortSignal.timeout(options.timeoutMs) });
      status = res.status;
      retryAfter = res.headers.get('retry-after');
      text = await res.text();
    } catch (error) {
      const name = (error as Error).name;
      if (name === 'TimeoutError' || name === 'AbortError') {
        throw new ProviderError(provider, `${provider} provider did not answer within ${options.timeoutMs} ms (${url})`);
      }
      throw new ProviderError(provider, `${provider} provider unreachable (${url}): ${(error as Error).message}`);
    }
    if (status >= 200 && status < 300) {
      try {
        return JSON.parse(text);
      } catch {
        throw new ProviderError(provider, `${provider} provider answered with a body that is not JSON`, status, text.slice(0, BODY_LOG_LIMIT));
      }
    }
    if (status >= 300 && status < 400) {
      throw new ProviderError(provider, `${provider} provider answered ${status} (a redirect, not followed: set its base URL to the final address)`, status, text.slice(0, BODY_LOG_LIMIT));
    }
    const retryable = status === 429 || status >= 500;
    if (retryable && attempt < options.maxRetries) {
      await sleep(retryDelay(attempt, options.retryBaseMs ?? 250, retryAfter));
      continue;
    }
    throw new ProviderError(provider, `${provider} provider answered ${status}${retryable && attempt > 0 ? ` after ${attempt + 1} attempts` : ''}`, status, text.slice(0, BODY_LOG_LIMIT));
  }
}
