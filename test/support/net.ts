import { createServer } from 'node:net';

/** A TCP port free on 127.0.0.1 right now (for starting a server process on a known port). */
export function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}
