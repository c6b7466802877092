/**
 * Text with credentials left out, for messages an operator sees (errors at start, `/readyz`, `ops`, provider
 * failures): a URL's user and password, a URL's query (which may carry keys), bearer and basic tokens, OpenAI-style
 * `sk-` keys and `password=`-style pairs.
 */
export function redactSecrets(text: string): string {
  return redactUrlCredentials(text)
    .replace(/\b([a-z][a-z0-9+.-]*:\/\/[^\s?#]*)\?[^\s#)]*/gi, '$1?[redacted]')
    .replace(/\b(bearer|basic)\s+[^\s,;)]+/gi, '$1 [redacted]')
    .replace(/\bsk[-_][A-Za-z0-9_-]{6,}/g, '[redacted]')
    .replace(/\b(api[-_]?key|access[-_]?token|token|secret|password|passwd|pwd)(\s*[=:]\s*)[^\s&,;)]+/gi, '$1$2[redacted]');
}

/** Text with the user and password of every URL in it left out (`https://[redacted]@host/`). */
export function redactUrlCredentials(text: string): string {
  return text.replace(/\b([a-z][a-z0-9+.-]*:\/\/)[^\s/?#@]*@/gi, '$1[redacted]@');
}
