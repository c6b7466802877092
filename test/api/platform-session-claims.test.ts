import t from 'tap';
import { SignJWT } from 'jose';
import { bearer, startTestCairn, TEST_JWT_SECRET } from '../support/cairn.js';

const app = await startTestCairn();
t.teardown(() => app.stop());

const token = (claims: Record<string, unknown>) => new SignJWT({ tenant_id: 'acme', ...claims }).setProtectedHeader({ alg: 'HS256' })
  .setIssuedAt().setExpirationTime('5m').sign(new TextEncoder().encode(TEST_JWT_SECRET));

/**
 * MongoDB (BSON is UTF-8) stores a lone surrogate as U+FFFD, so the tenants "\ud800x", "\udc00x" and "\ufffdx" would be
 * one tenant in the projects read model: each would list the others' projects, and its own projects' keys would be
 * 404 to it (the read model's tenant is not its own). A session whose tenant or user is not well-formed Unicode is
 * refused, as every other text the API takes is; a well-formed one with U+FFFD or an emoji is a tenant like any other.
 */
t.test('a session whose tenant or sub is not well-formed Unicode is 401, naming the claim; U+FFFD and emoji are fine', async (t) => {
  for (const [label, claims, claim] of [
    ['a lone high surrogate in the tenant', { sub: 'u', tenant_id: '\ud800x' }, 'tenant_id'],
    ['a lone low surrogate in the tenant', { sub: 'u', tenant_id: 'x\udc00' }, 'tenant_id'],
    ['a lone surrogate in sub', { sub: 'u\ud800' }, 'sub'],
  ] as const) {
    const list = await app.platform('/projects', { headers: bearer(await token(claims)) });
    t.equal(list.status, 401, `${label}: GET /projects`);
    t.match(await list.json(), { type: 'https://cairn.dev/problems/unauthorized', detail: new RegExp(`${claim}.*well-formed Unicode`) });
    const create = await app.platform('/projects', { method: 'POST', headers: bearer(await token(claims)), json: { name: 'p' } });
    t.equal(create.status, 401, `${label}: POST /projects writes nothing`);
  }
  for (const tenant of ['\ufffdx', 'x\u{1F600}']) {
    const created = await app.platform('/projects', { method: 'POST', headers: bearer(await token({ sub: 'u\u{1F600}', tenant_id: tenant })), json: { name: 'p' } });
    t.equal(created.status, 200, `tenant ${JSON.stringify(tenant)}: a tenant like any other`);
    t.match(await created.json(), { tenant_id: tenant, created_by: 'user:u\u{1F600}' });
  }
});
