import { postJson, ProviderError, type HttpProviderOptions } from './http.js';

export interface ChatMessage {
  role: 'system' | 'user' | 'assistant';
  content: string;
}

export interface ChatProvider {
  readonly model: string;
  /** One non-streaming completion; resolves to the assistant message's text. */
  complete(messages: ChatMessage[], options?: { json?: boolean; temperature?: number }): Promise<string>;
}

/** OpenAI-compatible `POST {base}/chat/completions` (OpenAI, Ollama, vLLM, llama.cpp server). */
export class OpenAiChat implements ChatProvider {
  constructor(private readonly http: HttpProviderOptions, readonly model: string) {}

  async complete(messages: ChatMessage[], options: { json?: boolean; temperature?: number } = {}): Promise<string> {
    const reply = await postJson('chat', this.http, '/chat/completions', {
      model: this.model,
      messages,
      stream: false,
      ...(options.temperature !== undefined ? { temperature: options.temperature } : {}),
      ...(options.json ? { response_format: { type: 'json_object' } } : {}),
    });
    const content = (reply as { choices?: Array<{ message?: { content?: unknown } }> })?.choices?.[0]?.message?.content;
    if (typeof content !== 'string' || content.trim() === '') {
      throw new ProviderError('chat', 'chat provider reply has no message content', 200, JSON.stringify(reply).slice(0, 2000));
    }
    return content;
  }
}
