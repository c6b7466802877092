import type { EventStore } from '../infra/eventstore/port.js';
import type { ReadStore } from '../infra/readstore/port.js';

/** A projection whose live checkpoint lies past the end of the log it is used with. */
export interface AheadCheckpoint {
  projection: string;
  position: number;
  generation: number;
}

/**
 * Read models whose checkpoints lie past the end of the log: built from another log, or from a longer copy of
 * this one (an older backup of the log restored beside newer read models). A runner would skip every event
 * appended from now on up to its checkpoint, since it takes those positions as applied: writes acknowledged and
 * never seen by a query. The checkpoints are read before the log's end, so a node appending and projecting
 * meanwhile cannot make a read model look ahead.
 */
export async function readModelsAhead(events: EventStore, reads: ReadStore): Promise<{ end: number; ahead: AheadCheckpoint[] }> {
  const checkpoints = await reads.listCheckpoints();
  const end = await events.endPosition();
  return { end, ahead: checkpoints.filter((cp) => cp.position > end).map(({ projection, position, generation }) => ({ projection, position, generation })) };
}

/** readModelsAhead for one projection: its live checkpoint if that lies past the log's end. */
export async function projectionAhead(events: EventStore, reads: ReadStore, projection: string): Promise<AheadCheckpoint | undefined> {
  const { position, generation } = await reads.checkpoint(projection);
  return position > (await events.endPosition()) ? { projection, position, generation } : undefined;
}

/** The server does not start on read models ahead of its log: see readModelsAhead. */
export class ReadModelsAheadError extends Error {
  override readonly name = 'ReadModelsAheadError';
  constructor(readonly ahead: AheadCheckpoint[], readonly end: number, fix: string) {
    super(`the read models are ahead of the event log: ${ahead.map((a) => `${a.projection} at position ${a.position}`).join(', ')}, `
      + `but the log ends at position ${end}. They were built from another log or from a longer copy of this one `
      + `(an older backup of the log restored?), and would skip the events appended from now on. Nothing was changed. ${fix}`);
  }
}

/** What an operator does about it: a rebuild swaps in a generation built from this log, whatever the live one's checkpoint. */
export function aheadFix(readModelsFile?: string): string {
  return 'Rebuild each of them from this log (`npm run ops -- projections rebuild NAME`)'
    + (readModelsFile ? `, or stop every process using ${readModelsFile}, delete it (with its -wal and -shm files) and start again: the read models are rebuilt at start.` : '.');
}
