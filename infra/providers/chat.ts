import type { Logger } from '../logger.js';
import { BODY_LOG_LIMIT, postJson, ProviderError, type HttpProviderOptions } from './http.js';

export interface ChatMessage {
  role: 'system' | 'user' | 'assistant';
  content: string;
}

export interface ChatProvider {
  readonly model: string;
  /**
   * One non-streaming completion; resolves to the assistant message's text. With `json`, a reply cut off
   * by the provider's token limit before its JSON is complete is a ProviderError saying so; without it, a
   * cut-off text is returned as is (it is still an answer), unless it is empty. `signal`: aborted when the
   * answer is no longer wanted (the client went away): the request is cancelled and the signal's reason thrown.
   */
  complete(messages: ChatMessage[], options?: CompleteOptions): Promise<string>;
}

export interface CompleteOptions {
  json?: boolean;
  temperature?: number;
  signal?: AbortSignal;
}

/**
 * The largest completion read: far beyond any model's output limit (a 128k-token answer, reasoning
 * included, is a few MiB as JSON), and a bound on memory for a server that sends without end.
 */
export const MAX_CHAT_REPLY_BYTES = 8 * 1024 * 1024;

/**
 * The text of an assistant message's content: a string, or the `text` parts of an array of content parts
 * joined, as some OpenAI-compatible servers answer (Mistral's reasoning models send a `thinking` part,
 * which is not the answer, and the answer in one or more `text` parts). Undefined when there is none:
 * `null` (a refusal, a tool call) or only parts of other kinds.
 */
function messageText(content: unknown): string | undefined {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return undefined;
  const texts = content.flatMap((part: unknown) => {
    const { type, text } = (part ?? {}) as { type?: unknown; text?: unknown };
    return type === 'text' && typeof text === 'string' ? [text] : [];
  });
  return texts.length > 0 ? texts.join('') : undefined;
}

function isJson(text: string): boolean {
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
}

interface Choice {
  finish_reason?: unknown;
  message?: { content?: unknown; refusal?: unknown };
}

/**
 * The reply's text, or a ProviderError an operator can act on. `finish_reason: "length"` means the
 * provider stopped at its token limit: Cairn sends no `max_tokens`, so that is the server's own limit
 * (its context size or output cap), which only the operator can raise. A JSON reply cut off there cannot
 * be read, and saying so beats "no readable facts"; one that is complete anyway (JSON mode may pad a
 * finished object with whitespace up to the limit) is kept.
 */
function replyText(reply: unknown, json: boolean): string {
  const choice = (reply as { choices?: Choice[] } | null)?.choices?.[0];
  const text = messageText(choice?.message?.content);
  const blank = text === undefined || text.trim() === '';
  const body = () => JSON.stringify(reply).slice(0, BODY_LOG_LIMIT);
  if (choice?.finish_reason === 'length' && (blank || (json && !isJson(text)))) {
    throw new ProviderError('chat', `chat provider reply was cut off by the provider's token limit (finish_reason "length")${blank ? ' before any text' : ' before its JSON was complete'}: raise the model's context or output limit on the provider (e.g. Ollama num_ctx, llama.cpp --ctx-size / --n-predict, vLLM --max-model-len)`, 200, body());
  }
  if (blank) {
    const why = [
      ...(typeof choice?.message?.refusal === 'string' ? ['the model refused'] : []),
      ...(typeof choice?.finish_reason === 'string' ? [`finish_reason "${choice.finish_reason}"`] : []),
    ];
    throw new ProviderError('chat', `chat provider reply has no message text${why.length > 0 ? ` (${why.join(', ')})` : ''}`, 200, body());
  }
  return text;
}

/**
 * A 400 whose body names `response_format`: the provider does not take JSON mode. LM Studio accepts only
 * `json_schema` ("'response_format.type' must be 'json_schema'"), OpenAI's models older than
 * gpt-3.5-turbo-1106 have no JSON mode ("'response_format' of type 'json_object' is not supported with
 * this model"). `json_schema` is no way out: older llama.cpp builds and older OpenAI models refuse it.
 */
function refusesJsonMode(error: unknown): error is ProviderError {
  return error instanceof ProviderError && error.status === 400 && /response_format/i.test(error.body ?? '');
}

/** OpenAI-compatible `POST {base}/chat/completions` (OpenAI, Ollama, vLLM, llama.cpp server, LM Studio). */
export class OpenAiChat implements ChatProvider {
  /**
   * Whether JSON requests carry `response_format: {"type": "json_object"}`. Turned off, until restart, once
   * the provider refused it and then answered the same request without it: the prompt asks for JSON and
   * the facts parser tolerates prose, so a provider without JSON mode still works, without paying a
   * refused request every time. Only a retry that succeeds turns it off, so a 400 about something else
   * that merely echoes the request (and with it `response_format`) does not.
   */
  private jsonMode = true;

  /** `log`: where turning JSON mode off is said, once (an operator sees why ingest prompts changed). */
  constructor(private readonly http: HttpProviderOptions, readonly model: string, private readonly log?: Logger) {}

  async complete(messages: ChatMessage[], options: CompleteOptions = {}): Promise<string> {
    const request = {
      model: this.model,
      messages,
      stream: false,
      ...(options.temperature !== undefined ? { temperature: options.temperature } : {}),
    };
    const post = (body: object) => postJson('chat', this.http, '/chat/completions', body, { maxReplyBytes: MAX_CHAT_REPLY_BYTES, signal: options.signal });
    let reply: unknown;
    if (options.json && this.jsonMode) {
      try {
        reply = await post({ ...request, response_format: { type: 'json_object' } });
      } catch (error) {
        if (!refusesJsonMode(error)) throw error;
        reply = await post(request);
        if (this.jsonMode) {
          this.jsonMode = false;
          this.log?.warn({ provider: 'chat', model: this.model, upstream_status: error.status, upstream_body: error.body },
            'chat: the provider refused response_format json_object and answered without it; JSON mode is off until restart (ingest asks for JSON in the prompt only)');
        }
      }
    } else {
      reply = await post(request);
    }
    return replyText(reply, options.json === true);
  }
}
