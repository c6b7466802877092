import { LocalHashEmbedder } from '../../infra/providers/embeddings.js';

/** The local embedder, noting in `sent` every text it is asked to embed (what a paid provider would be sent). */
export class RecordingEmbedder extends LocalHashEmbedder {
  readonly sent: string[] = [];
  /** It stands for a provider elsewhere: what it is sent is what a third party would see. */
  override readonly inProcess = false;

  override async embed(texts: string[]): Promise<Float32Array[]> {
    this.sent.push(...texts);
    return super.embed(texts);
  }
}
