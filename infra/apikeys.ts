import { hash, randomBytes } from 'node:crypto';
import { crc32 } from 'node:zlib';

/**
 * Keys look like `sk_<43 chars base62 of 256 random bits>_<6 chars base62 CRC32 of the random part>`.
 * The checksum lets secret scanners (and this server) reject lookalikes without a lookup.
 */
const ALPHABET = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';
const BODY_LENGTH = 43;
const CHECKSUM_LENGTH = 6;
const SHAPE = new RegExp(`^sk_([0-9A-Za-z]{${BODY_LENGTH}})_([0-9A-Za-z]{${CHECKSUM_LENGTH}})$`);

function base62(bytes: Buffer, length: number): string {
  let n = BigInt(`0x${bytes.toString('hex') || '0'}`);
  let out = '';
  while (out.length < length) {
    out = ALPHABET[Number(n % 62n)] + out;
    n /= 62n;
  }
  return out;
}

/** Base62 of the CRC32, zero-padded (the same digits as base62() of its 4 bytes; numbers, not BigInt: this runs per request). */
function checksum(body: string): string {
  let n = crc32(body) >>> 0;
  let out = '';
  while (out.length < CHECKSUM_LENGTH) {
    out = ALPHABET[n % 62] + out;
    n = Math.floor(n / 62);
  }
  return out;
}

export function generateApiKey(): { key: string; prefix: string; hash: string } {
  const body = base62(randomBytes(32), BODY_LENGTH);
  const key = `sk_${body}_${checksum(body)}`;
  return { key, prefix: key.slice(0, 11), hash: hashApiKey(key) };
}

export function isWellFormedApiKey(key: string): boolean {
  const m = SHAPE.exec(key);
  return m !== null && checksum(m[1]!) === m[2];
}

export function hashApiKey(key: string): string {
  return hash('sha256', key, 'hex');
}
