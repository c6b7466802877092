import { Ajv2020 } from 'ajv/dist/2020.js';
import t from 'tap';
import { startTestCairn } from '../support/cairn.js';

/**
 * The memory service's OpenAPI document against what the server answers, where a client generated from it would be
 * misled: a request body the document calls valid that the server refuses, a response value the document rules out.
 */

const app = await startTestCairn();
t.teardown(() => app.stop());

let scopes = 0;
const freshScope = () => ({ agent: 'text-rules', user: `u${++scopes}` });

async function call(method: string, path: string, json?: unknown) {
  const res = await app.memory(path, { method, json });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined };
}

async function document() {
  return (await call('GET', '/docs/openapi.json')).body;
}

/** The request body schema of an operation, compiled from the published document (its $refs resolved in it). */
function requestSchema(doc: { paths: Record<string, Record<string, unknown>> }, method: string, path: string) {
  const ajv = new Ajv2020({ strict: false, validateSchema: false });
  ajv.addSchema({ ...doc, $id: 'memory.json' });
  const pointer = `#/paths/${path.replaceAll('/', '~1')}/${method.toLowerCase()}/requestBody/content/application~1json/schema`;
  const validate = ajv.getSchema(`memory.json${pointer}`);
  if (!validate) throw new Error(`no request schema for ${method} ${path}`);
  return validate;
}

t.test('an empty text, query or personality is refused by the document as by the server', async (t) => {
  const doc = await document();
  const cases: Array<[string, string, string, (value: string) => Record<string, unknown>]> = [
    ['POST', '/v1/memories', 'text', (text) => ({ scope: freshScope(), text })],
    ['POST', '/v1/search', 'query', (query) => ({ scope: freshScope(), query })],
    ['POST', '/v1/context', 'query', (query) => ({ scope: freshScope(), query })],
    ['POST', '/v1/chat', 'query', (query) => ({ scope: freshScope(), query })],
    ['PUT', '/v1/personality', 'personality', (personality) => ({ scope: freshScope(), personality })],
    ['POST', '/v1/ingest', 'text', (text) => ({ scope: freshScope(), text })],
  ];
  for (const [method, path, field, body] of cases) {
    const validate = requestSchema(doc, method, path);
    t.ok(validate(body('x')), `${method} ${path}: a ${field} of one character is valid by the document`);
    const empty = body('');
    t.notOk(validate(empty), `${method} ${path}: an empty ${field} is invalid by the document`);
    const res = await call(method, path, empty);
    t.equal(res.status, 400, `${method} ${path}: and the server answers 400`);
    t.match(res.body, { errors: [{ location: `body.${field}`, message: 'must not be empty', value: '' }] }, `${method} ${path}: naming body.${field}, saying it is empty`);
  }
});

t.test('an exported vector is unit length, or all zeros for a text without words, as the document says', async (t) => {
  const scope = freshScope();
  for (const text of ['green tea in the morning', '...']) t.equal((await call('POST', '/v1/memories', { scope, text })).status, 200);
  const exported = await call('GET', `/v1/export?agent=${scope.agent}&user=${scope.user}`);
  t.equal(exported.status, 200);
  const norms = new Map<string, number>(exported.body.memories.map((m: { text: string; vector: number[] }) => [m.text, Math.hypot(...m.vector)]));
  t.ok(Math.abs(norms.get('green tea in the morning')! - 1) < 1e-6, 'a text with words: unit length');
  t.equal(norms.get('...'), 0, 'a text without words: all zeros');
  const doc = await document();
  const vector = doc.paths['/v1/export'].get.responses['200'].content['application/json'].schema.properties.memories.items.properties.vector;
  t.match(vector.description, /all zeros/, 'the document does not claim every vector is unit length');
});
