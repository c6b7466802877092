import type { ExpectedRevision } from './port.js';

/** The stream was not at the revision the command was decided on. Maps to 409. */
export class WrongExpectedVersionError extends Error {
  override readonly name = 'WrongExpectedVersionError';
  constructor(
    readonly stream: string,
    readonly expected: ExpectedRevision,
    readonly actual: number | 'no_stream',
  ) {
    super(`stream ${stream} is at revision ${actual}, expected ${expected}`);
  }
}

/** An event id was reused for a different event. Maps to 409 as well. */
export class DuplicateEventIdError extends Error {
  override readonly name = 'DuplicateEventIdError';
  constructor(readonly eventId: string, readonly stream: string) {
    super(`event id ${eventId} already exists in another stream or position`);
  }
}

/**
 * The log's storage is full (SQLite's SQLITE_FULL: the disk, or a size limit): the append was refused and
 * nothing of it was written (the transaction rolled back). Maps to 507; appends succeed again once space is freed.
 */
export class StorageFullError extends Error {
  override readonly name = 'StorageFullError';
}
