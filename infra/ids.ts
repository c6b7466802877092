import { hash } from 'node:crypto';

const namespaces = new Map<string, Buffer>();

/**
 * RFC 9562 UUID version 5 (SHA-1 of namespace and name), as deterministic ids: event ids from the
 * request key, resource ids from an Idempotency-Key. Same output as the `uuid` package's v5, with the
 * namespace parsed once instead of per call (this runs for every event appended).
 */
export function uuidV5(name: string, namespace: string): string {
  let ns = namespaces.get(namespace);
  if (!ns) {
    const hex = namespace.replace(/-/g, '');
    if (!/^[0-9a-f]{32}$/i.test(hex)) throw new Error(`invalid UUID namespace ${namespace}`);
    ns = Buffer.from(hex, 'hex');
    namespaces.set(namespace, ns);
  }
  const h = hash('sha1', Buffer.concat([ns, Buffer.from(name, 'utf8')]), 'buffer');
  h[6] = (h[6]! & 0x0f) | 0x50;
  h[8] = (h[8]! & 0x3f) | 0x80;
  const x = h.toString('hex', 0, 16);
  return `${x.slice(0, 8)}-${x.slice(8, 12)}-${x.slice(12, 16)}-${x.slice(16, 20)}-${x.slice(20)}`;
}
