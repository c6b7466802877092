import type Koa from 'koa';

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
