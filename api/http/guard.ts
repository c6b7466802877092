import type Koa from 'koa';
import { unauthorized } from './problem.js';

/**
 * Both APIs are server-side only: anything that looks like a browser's call is refused (403).
 * Browsers send Sec-Fetch-Site with every request, whatever its value: `same-origin` too (a page on a
 * DNS-rebound host name loading the API into a frame is same-origin with it) and `none` (a typed
 * address). Backend clients do not send it: Node's built-in fetch (undici) sends Sec-Fetch-Mode: cors
 * but never Sec-Fetch-Site, so the mode alone is not a browser signal, and backends using fetch work.
 */
export function browserSignal(ctx: Koa.Context): string | undefined {
  // Present, even empty, is enough: a browser signal, not a value to interpret.
  if (ctx.headers.origin !== undefined) return 'browser requests are not accepted (Origin header present); call the API from your backend';
  const site = ctx.headers['sec-fetch-site'];
  if (site !== undefined) return `browser requests are not accepted (Sec-Fetch-Site: ${String(site).toLowerCase().slice(0, 32)})`;
  return undefined;
}

/**
 * How many times the request carries the header `name` (lower-case). Node keeps only the first of a
 * repeated Authorization or Host header in `headers` and drops the others without a word.
 */
export function headerLines(ctx: Koa.Context, name: string): number {
  const raw = ctx.req.rawHeaders;
  let lines = 0;
  for (let i = 0; i < raw.length; i += 2) if (raw[i]!.length === name.length && raw[i]!.toLowerCase() === name) lines++;
  return lines;
}

/**
 * The token of `Authorization: Bearer <token>` (the scheme in any case), or undefined when there is none
 * or the header is not of that form. An Authorization header sent more than once is refused (401) rather
 * than read as its first line: a proxy in front may have checked, or added, another one (RFC 9110 §5.3
 * allows a header that is not a list once).
 */
export function bearerToken(ctx: Koa.Context): string | undefined {
  if (headerLines(ctx, 'authorization') > 1) throw unauthorized('the Authorization header was sent more than once; send one');
  return /^Bearer\s+(\S+)$/i.exec(ctx.get('Authorization'))?.[1];
}
