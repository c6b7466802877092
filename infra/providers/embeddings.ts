import type { ProvidersConfig } from '../config.js';
import { tokenize } from '../search/tokenize.js';
import { normalize } from '../search/vector.js';
import { BODY_LOG_LIMIT, postJson, ProviderError, type HttpProviderOptions } from './http.js';

export interface Embedder {
  /** Recorded with every vector: vectors of different models are never compared. */
  readonly model: string;
  /**
   * Unit-length vectors of one dimension, one per text, in order. `signal`: aborted when the vectors are
   * no longer wanted (the client went away): the request is cancelled and the signal's reason thrown.
   */
  embed(texts: string[], signal?: AbortSignal): Promise<Float32Array[]>;
  /**
   * Embeds in this process: no third party sees the texts, nothing is paid per text, and a text costs microseconds.
   * The memory-vectors projection then embeds what a later event of the log supersedes rather than read ahead in the
   * log to leave it out (see its Lookahead).
   */
  readonly inProcess?: boolean;
}

export const LOCAL_EMBEDDING_DIM = 256;
/**
 * v2: the tokenizer case-folds (ß → ss, İ → i, ς → σ); v3: Korean bigrams, Thai/Lao/Khmer/Myanmar words;
 * v4: default-ignorable characters dropped, emoji and flags are words.
 * Vectors of an older version are ignored until `memory-vectors` is rebuilt.
 */
export const LOCAL_EMBEDDING_MODEL = `local-hash-${LOCAL_EMBEDDING_DIM}-v4`;

/** 32-bit FNV-1a over UTF-16 code units, finished with murmur3's fmix32 so every bit depends on every input. */
function hash32(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/**
 * The offline default: signed feature hashing of word unigrams (weight 1) and character trigrams of
 * each word with boundary marks (weight 0.5 each) into 256 dimensions, L2-normalised. Deterministic,
 * no network, no model files. It captures word and sub-word overlap (shared words, spelling variants,
 * shared stems such as "running"/"runner"), not meaning: synonyms, paraphrases and translations do not
 * come out close.
 */
export class LocalHashEmbedder implements Embedder {
  readonly model = LOCAL_EMBEDDING_MODEL;
  readonly inProcess: boolean = true;

  embedOne(text: string): Float32Array {
    const vector = new Float32Array(LOCAL_EMBEDDING_DIM);
    const add = (feature: string, weight: number) => {
      const h = hash32(feature);
      vector[h & (LOCAL_EMBEDDING_DIM - 1)]! += h & 0x80000000 ? -weight : weight;
    };
    for (const word of tokenize(text)) {
      add(`w:${word}`, 1);
      const padded = `\u0002${word}\u0003`;
      for (let i = 0; i + 3 <= padded.length; i++) add(padded.slice(i, i + 3), 0.5);
    }
    return normalize(vector);
  }

  async embed(texts: string[]): Promise<Float32Array[]> {
    return texts.map((t) => this.embedOne(t));
  }
}

const EMBEDDING_BATCH = 128;
/**
 * The largest reply read per input of a batch, plus a little for the envelope: a vector of 8,192
 * dimensions written with 30 characters each still fits, and a server that sends without end is cut off.
 */
const MAX_REPLY_BYTES_PER_INPUT = 256 * 1024;
const MAX_REPLY_ENVELOPE_BYTES = 64 * 1024;

/**
 * Scaled to unit length in double precision, then narrowed to Float32: narrowing first would turn a
 * component beyond Float32's range (±3.4e38) into ±Infinity and the scaled vector into NaN (a NaN score
 * ranks first and is sent as null), and tiny components into 0. Dividing by the largest component keeps
 * the sum of squares finite. A zero vector stays zero.
 */
function unitVector(values: number[]): Float32Array {
  let max = 0;
  for (const x of values) max = Math.max(max, Math.abs(x));
  if (max === 0) return new Float32Array(values.length);
  let sum = 0;
  for (const x of values) sum += (x / max) * (x / max);
  const norm = Math.sqrt(sum);
  return Float32Array.from(values, (x) => x / max / norm);
}

type EmbeddingItem = { index?: unknown; embedding?: unknown } | null;

/**
 * The reply's items in the order of the inputs: by their `index` (OpenAI's reply need not be in input
 * order), or as sent when no item has one. Indices that are not each input's exactly once (missing on some
 * items, repeated, out of range) cannot be paired with the inputs, so the reply is refused.
 */
function inInputOrder(data: EmbeddingItem[]): EmbeddingItem[] | undefined {
  if (data.every((item) => item?.index === undefined || item?.index === null)) return data;
  const ordered: EmbeddingItem[] = new Array(data.length);
  for (const item of data) {
    const index = item?.index;
    if (!Number.isInteger(index) || (index as number) < 0 || (index as number) >= data.length || ordered[index as number] !== undefined) return undefined;
    ordered[index as number] = item;
  }
  return ordered;
}

/** OpenAI-compatible `POST {base}/embeddings`, batched; vectors are normalised here (not every server does). */
export class OpenAiEmbedder implements Embedder {
  constructor(private readonly http: HttpProviderOptions, readonly model: string) {}

  async embed(texts: string[], signal?: AbortSignal): Promise<Float32Array[]> {
    const out: Float32Array[] = [];
    let dim: number | undefined;
    for (let start = 0; start < texts.length; start += EMBEDDING_BATCH) {
      const input = texts.slice(start, start + EMBEDDING_BATCH);
      const maxReplyBytes = MAX_REPLY_ENVELOPE_BYTES + input.length * MAX_REPLY_BYTES_PER_INPUT;
      const reply = await postJson('embeddings', this.http, '/embeddings', { model: this.model, input }, { maxReplyBytes, signal });
      const data = (reply as { data?: EmbeddingItem[] } | null)?.data;
      const logged = () => JSON.stringify(reply).slice(0, BODY_LOG_LIMIT);
      if (!Array.isArray(data) || data.length !== input.length) {
        throw new ProviderError('embeddings', `embeddings reply has ${Array.isArray(data) ? data.length : 'no'} vectors for ${input.length} inputs`, 200, logged());
      }
      const ordered = inInputOrder(data);
      if (!ordered) throw new ProviderError('embeddings', `embeddings reply's indices are not 0 to ${input.length - 1}, each once`, 200, logged());
      for (const item of ordered) {
        const e = item?.embedding;
        if (!Array.isArray(e) || e.length === 0 || !e.every((x) => typeof x === 'number' && Number.isFinite(x))) {
          throw new ProviderError('embeddings', 'embeddings reply has a malformed vector', 200, JSON.stringify(item).slice(0, BODY_LOG_LIMIT));
        }
        // One dimension for the whole call, across batches too: vectors of two dimensions cannot be compared.
        if (dim !== undefined && e.length !== dim) {
          throw new ProviderError('embeddings', `embeddings reply has vectors of ${dim} and ${e.length} dimensions`, 200, JSON.stringify(item).slice(0, BODY_LOG_LIMIT));
        }
        dim = e.length;
        out.push(unitVector(e as number[]));
      }
    }
    return out;
  }
}

/** The configured embedder, or undefined for EMBEDDINGS_PROVIDER=none. */
export function createEmbedder(config: ProvidersConfig): Embedder | undefined {
  const { embeddings, llm } = config;
  switch (embeddings.provider) {
    case 'none':
      return undefined;
    case 'local':
      return new LocalHashEmbedder();
    case 'openai':
      return new OpenAiEmbedder({ baseUrl: embeddings.baseUrl!, apiKey: embeddings.apiKey, timeoutMs: llm.timeoutMs, maxRetries: llm.maxRetries }, embeddings.model);
  }
}
