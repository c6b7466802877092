/** Waiting on a call that may never settle, without waiting for it longer than a test can. */

/** The call's outcome and how long it took, or 'hung' if it has not settled after `limitMs`. */
export async function timed(call: Promise<unknown>, limitMs: number): Promise<{ outcome: 'resolved' | 'rejected' | 'hung'; error?: unknown; ms: number }> {
  const started = performance.now();
  let timer: NodeJS.Timeout | undefined;
  const outcome = await Promise.race([
    call.then(() => ({ outcome: 'resolved' as const }), (error: unknown) => ({ outcome: 'rejected' as const, error })),
    new Promise<{ outcome: 'hung' }>((resolve) => { timer = setTimeout(() => resolve({ outcome: 'hung' }), limitMs); }),
  ]);
  clearTimeout(timer);
  return { ...outcome, ms: performance.now() - started };
}

/** Whether `event` (a promise that only resolves) happens within `ms`. */
export async function within(event: Promise<unknown>, ms: number): Promise<boolean> {
  return (await timed(event, ms)).outcome === 'resolved';
}
