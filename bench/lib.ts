import http from 'node:http';

/** Percentile of a sorted copy (nearest-rank). */
export function percentile(values: number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

export const fmt = (n: number, digits = 0) => n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });

export function latencySummary(ms: number[]): string {
  return `p50 ${fmt(percentile(ms, 50), 2)} ms, p95 ${fmt(percentile(ms, 95), 2)} ms, p99 ${fmt(percentile(ms, 99), 2)} ms`;
}

/** A minimal keep-alive JSON client on node:http (less client overhead than fetch, so the server is what is measured). */
export function jsonClient(baseUrl: string, maxSockets: number) {
  const url = new URL(baseUrl);
  const agent = new http.Agent({ keepAlive: true, maxSockets });
  return {
    request(method: string, path: string, body: unknown, headers: Record<string, string> = {}): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }> {
      const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
      return new Promise((resolve, reject) => {
        const req = http.request({
          host: url.hostname, port: url.port, method, path: url.pathname.replace(/\/$/, '') + path, agent,
          headers: { ...headers, ...(payload ? { 'Content-Type': 'application/json', 'Content-Length': payload.length } : {}) },
        }, (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString() }));
        });
        req.on('error', reject);
        req.end(payload);
      });
    },
    close() { agent.destroy(); },
  };
}

/** Runs `worker` on `clients` concurrent loops until `total` calls were made; returns calls/s and latencies. */
export async function closedLoop(clients: number, total: number, worker: (i: number) => Promise<void>): Promise<{ rate: number; latencies: number[] }> {
  let next = 0;
  const latencies: number[] = [];
  const started = performance.now();
  await Promise.all(Array.from({ length: clients }, async () => {
    for (let i = next++; i < total; i = next++) {
      const t0 = performance.now();
      await worker(i);
      latencies.push(performance.now() - t0);
    }
  }));
  return { rate: total / ((performance.now() - started) / 1000), latencies };
}
