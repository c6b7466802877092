import { Ajv2020 } from 'ajv/dist/2020.js';
import type { ValidateFunction } from 'ajv';

/**
 * Checks responses against the OpenAPI document the server publishes, so that what clients generate
 * from it is true for every response the API tests receive: the status is documented for the operation
 * (or, off any operation, is the 404/405 problem), the Content-Type is one it documents, the body is
 * valid against its schema, and the headers it marks required are present.
 *
 * The document is fetched from the server itself (`/docs/openapi.json`), not built from the route table,
 * so what is checked is exactly what clients download.
 */
export class OpenApiConformance {
  private readonly ajv = new Ajv2020({
    strict: false,
    allErrors: true,
    validateSchema: false,
    formats: {
      'date-time': /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})$/i,
      uuid: /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i,
      uri: /^[a-z][a-z0-9+.-]*:[^\s]*$/i,
    },
  });
  private readonly validators = new Map<string, ValidateFunction>();
  /** Path templates as regular expressions, those with fewer parameters first (`/agents/{id}` after a literal `/agents/x`). */
  private readonly paths: Array<{ template: string; pattern: RegExp; params: number }>;

  private constructor(private readonly doc: OpenApiDoc, private readonly id: string) {
    this.ajv.addSchema({ ...doc, $id: id } as object);
    this.paths = Object.keys(doc.paths)
      .map((template) => ({
        template,
        pattern: new RegExp(`^${template.split(/\{[^}]+\}/).map(escapeRegExp).join('[^/]+')}$`),
        params: (template.match(/\{/g) ?? []).length,
      }))
      .sort((a, b) => a.params - b.params);
  }

  static async load(baseUrl: string, name: string): Promise<OpenApiConformance> {
    const res = await fetch(`${baseUrl}/docs/openapi.json`);
    if (res.status !== 200) throw new Error(`GET ${baseUrl}/docs/openapi.json: ${res.status}`);
    return OpenApiConformance.of(await res.json(), name);
  }

  /** A checker of a document already in hand (its tests change documents to see the checker fail). */
  static of(doc: unknown, name: string): OpenApiConformance {
    return new OpenApiConformance(doc as OpenApiDoc, `urn:cairn:openapi:${name}`);
  }

  /** What is wrong with this response to `method url` by the document (empty: nothing). Reads a clone of `res`. */
  async violations(method: string, url: string, res: Response): Promise<string[]> {
    const path = new URL(url).pathname;
    const what = `${method} ${path.length > 120 ? `${path.slice(0, 117)}...` : path} → ${res.status}`;
    const template = this.paths.find((p) => p.pattern.test(path))?.template;
    const operation = template ? this.doc.paths[template]![method.toLowerCase()] : undefined;
    const text = method === 'HEAD' ? '' : await res.clone().text();
    let pointer: string;
    let documented: ResponseDoc;
    if (operation) {
      const status = String(res.status);
      const found = operation.responses[status] ?? operation.responses.default;
      if (found) {
        documented = found;
        pointer = `#/paths/${escapePointer(template!)}/${method.toLowerCase()}/responses/${operation.responses[status] ? status : 'default'}`;
      } else if (HTTP_LAYER.includes(res.status)) {
        documented = PROBLEM_ONLY;
        pointer = '';
      } else {
        return [`${what}: status ${status} is not documented for ${method} ${template} (documented: ${Object.keys(operation.responses).join(', ')})`];
      }
    } else {
      // Off the document's operations only the server's own answers may come: the guards every request
      // passes (401, 403), a path that cannot be decoded (400), an unknown route, a wrong method.
      const expected = [...OFF_OPERATION, ...HTTP_LAYER];
      if (!expected.includes(res.status)) return [`${what}: no operation ${method} ${template ?? path} in the document, yet the status is not ${expected.join(', ')}`];
      documented = PROBLEM_ONLY;
      pointer = '';
    }
    const problems: string[] = [];
    for (const [name, header] of Object.entries(documented.headers ?? {})) {
      if (header.required && !res.headers.has(name)) problems.push(`${what}: required header ${name} is missing`);
    }
    if (!documented.content) {
      if (text !== '') problems.push(`${what}: a body is sent where the document describes none`);
      return problems;
    }
    const type = (res.headers.get('content-type') ?? '').split(';', 1)[0]!.trim().toLowerCase();
    const media = documented.content[type];
    if (!media) return [...problems, `${what}: Content-Type ${type || '(none)'} is not one of ${Object.keys(documented.content).join(', ')}`];
    if (method === 'HEAD' || !media.schema) return problems;
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      return [...problems, `${what}: the body is not JSON: ${text.slice(0, 200)}`];
    }
    const validate = this.validator(pointer ? `${pointer}/content/${escapePointer(type)}/schema` : '#/components/schemas/Problem');
    if (!validate(body)) {
      const errors = (validate.errors ?? []).slice(0, 5).map((e) => `${e.instancePath || '(root)'} ${e.message}${e.params ? ` ${JSON.stringify(e.params)}` : ''}`);
      problems.push(`${what}: the body does not match the documented schema: ${errors.join('; ')}; body: ${text.slice(0, 300)}`);
    }
    if (type === 'application/problem+json') problems.push(...this.problemType(what, res.status, body as { type?: unknown; status?: unknown }));
    return problems;
  }

  /** A problem's `type` is one of the catalogue's (`x-problem-types` of the Problem schema) with this status, and `status` is the response's. */
  private problemType(what: string, status: number, body: { type?: unknown; status?: unknown }): string[] {
    const catalogue = this.doc.components.schemas.Problem['x-problem-types'];
    const entry = Object.values(catalogue).find((t) => t.type === body.type);
    if (!entry) return [`${what}: problem type ${String(body.type)} is not in the document's catalogue`];
    const problems: string[] = [];
    if (!entry.status.includes(status)) problems.push(`${what}: problem type ${String(body.type)} is catalogued with ${entry.status.join(', ')}, not ${status}`);
    if (body.status !== status) problems.push(`${what}: the problem's status member is ${String(body.status)}`);
    return problems;
  }

  private validator(pointer: string): ValidateFunction {
    let validate = this.validators.get(pointer);
    if (!validate) {
      validate = this.ajv.compile({ $ref: `${this.id}${pointer}` });
      this.validators.set(pointer, validate);
    }
    return validate;
  }
}

/** Answers the server gives on any path, outside the operations: the guards, an undecodable path, an unknown route, a wrong method. */
const OFF_OPERATION = [400, 401, 403, 404, 405];
/** Answers of Node's HTTP parser, before any route (URL and headers over its limit, chunk extensions too long): catalogued problem types, on no operation. */
const HTTP_LAYER = [413, 431];
const PROBLEM_ONLY: ResponseDoc = { content: { 'application/problem+json': { schema: { $ref: '#/components/schemas/Problem' } } } };

interface ResponseDoc {
  headers?: Record<string, { required?: boolean }>;
  content?: Record<string, { schema?: unknown }>;
}

interface OpenApiDoc {
  paths: Record<string, Record<string, { responses: Record<string, ResponseDoc> }>>;
  components: { schemas: { Problem: { 'x-problem-types': Record<string, { type: string; status: number[] }> } } };
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

/** A JSON Pointer token (RFC 6901), percent-encoded as a URI fragment needs. */
function escapePointer(token: string): string {
  return encodeURIComponent(token.replace(/~/g, '~0').replace(/\//g, '~1'));
}
