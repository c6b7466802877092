import type Koa from 'koa';

/**
 * Both APIs are server-side only: anything that looks like a browser's call is refused (403).
 * Browsers send Sec-Fetch-Site with every request, and Sec-Fetch-Mode: cors on fetch()/XHR. Node's
 * built-in fetch (undici) also sends Sec-Fetch-Mode: cors, but never Sec-Fetch-Site, so the mode
 * counts as a browser signal only together with a Sec-Fetch-Site header: backends using fetch work.
 */
export function browserSignal(ctx: Koa.Context): string | undefined {
  if (ctx.get('Origin')) return 'browser requests are not accepted (Origin header present); call the API from your backend';
  const site = ctx.get('Sec-Fetch-Site').toLowerCase();
  if (site === 'cross-site' || site === 'same-site') return `browser requests are not accepted (Sec-Fetch-Site: ${site})`;
  if (site && ctx.get('Sec-Fetch-Mode').toLowerCase() === 'cors') return 'browser requests are not accepted (Sec-Fetch-Mode: cors)';
  return undefined;
}
