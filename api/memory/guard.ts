import type Koa from 'koa';
import { hash, timingSafeEqual } from 'node:crypto';
import { bearerToken, browserSignal } from '../http/guard.js';
import { unauthorized } from '../http/problem.js';
import type { Principal } from '../http/routes.js';

/** Liveness and readiness: what an orchestrator's probes ask for, addressed by the pod's or node's IP. */
const PROBES = new Set(['/healthz', '/readyz']);

/**
 * The memory service is called from backends only: requests that carry browser signals, or whose Host
 * is not one of MEMORY_ALLOWED_HOSTS (when set), are refused (DNS-rebinding and CSRF protection). The
 * probes are exempt from the Host check only: a Kubernetes probe sends the pod's IP as its Host, and they
 * answer nothing of a scope (as they need no owner token either); browser signals are refused there too.
 */
export function memoryGuard(allowedHosts: string[] | undefined) {
  return (ctx: Koa.Context): string | undefined => {
    const browser = browserSignal(ctx);
    if (browser) return browser;
    if (allowedHosts && allowedHosts.length > 0 && !PROBES.has(ctx.path)) {
      const host = (ctx.get('Host') || '').toLowerCase();
      if (!allowedHosts.includes(host) && !allowedHosts.includes(host.replace(/:\d+$/, ''))) return 'requests for this host are not accepted';
    }
    return undefined;
  };
}

/** MEMORY_OWNER_TOKEN, when set, is required on every request; compared in constant time. */
export function ownerAuthenticator(ownerToken: string | undefined) {
  const expected = ownerToken ? hash('sha256', ownerToken, 'buffer') : undefined;
  return async (ctx: Koa.Context): Promise<Principal> => {
    if (!expected) return { kind: 'owner', verified: false };
    const token = bearerToken(ctx);
    if (token === undefined) throw unauthorized('owner token required: Authorization: Bearer <MEMORY_OWNER_TOKEN>');
    // Hashing both sides gives equal lengths, so timingSafeEqual never leaks the token's length.
    const presented = hash('sha256', token, 'buffer');
    if (!timingSafeEqual(presented, expected)) throw unauthorized('owner token is not valid');
    return { kind: 'owner', verified: true };
  };
}
