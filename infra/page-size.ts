import type Database from 'better-sqlite3';

/**
 * The page size of the embedded stores' files: 1 KiB, not SQLite's default 4 KiB. Each commit writes every page it
 * changed to the WAL in full, and a write here changes few bytes on many pages: an event's row, and an entry in the
 * index of event ids (random, so a page of its own nearly every time); a memory's document, its index entries. With
 * 1 KiB pages a commit writes (and fsyncs) about a quarter of the bytes. Measured on 2 cores, same window, alternating
 * (bench/RESULTS.md, twenty-fourth session): durable appends with 8 clients +21%, memory stores over HTTP +13–29%.
 *
 * The connections that write still checkpoint by themselves every 16,384 pages of WAL (`wal_autocheckpoint`), now
 * 16 MiB instead of 64. Kept in pages, not bytes: 65,536 pages (the same 64 MiB) measured 10–20% fewer memory stores
 * over HTTP than 16,384 or 32,768 (same window, alternating), and 8,192 or fewer were slower too. Why is not
 * established (a larger checkpoint inside a commit stalls that commit longer; the WAL's index grows with its frames).
 *
 * SQLite takes a page size only while a file is still empty; a file made with another (any file made before this
 * setting, a restored backup) keeps its own, and works as before.
 */
export const PAGE_SIZE = 1024;

/** Before the connection's first write (journal_mode = WAL writes the header of a new file). */
export function setPageSize(db: Database.Database): void {
  db.pragma(`page_size = ${PAGE_SIZE}`);
}
