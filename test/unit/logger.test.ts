import t from 'tap';
import { createLogger } from '../../infra/logger.js';

t.test('secrets are redacted at the top level of a log record and one level down', async (t) => {
  const lines: string[] = [];
  const log = createLogger('info', { destination: { write: (line: string) => { lines.push(line); } } });
  const secret = 'sk_secretsecretsecretsecretsecretsecretsecret1_abcdef';
  log.info({ key: secret, token: secret, signing_secret: secret, authorization: `Bearer ${secret}` }, 'top level');
  log.info({ use: { key: secret, token: secret, signing_secret: secret }, req: { headers: { authorization: `Bearer ${secret}`, cookie: secret } } }, 'nested');
  log.info({ key_id: 'k_1', project: { id: 'p' } }, 'not secrets');
  t.equal(lines.length, 3);
  for (const line of lines) t.notMatch(line, /secretsecret/, 'no secret in the line');
  t.match(JSON.parse(lines[0]!), { key: '[redacted]', token: '[redacted]', signing_secret: '[redacted]', authorization: '[redacted]' });
  t.match(JSON.parse(lines[1]!), { use: { key: '[redacted]', token: '[redacted]', signing_secret: '[redacted]' }, req: { headers: { authorization: '[redacted]', cookie: '[redacted]' } } });
  t.match(JSON.parse(lines[2]!), { key_id: 'k_1', project: { id: 'p' } }, 'other fields are kept');
});

t.test('the level is read as LOG_LEVEL is in the configuration: case and blanks aside, blank is the default', async (t) => {
  const level = (name: string | undefined) => createLogger(name, { destination: { write: () => {} } }).level;
  t.equal(level('WARN'), 'warn');
  t.equal(level(' debug\n'), 'debug', 'surrounding blanks');
  t.equal(level(''), 'info', 'empty: the default');
  t.equal(level('  '), 'info', 'blank: the default');
  t.equal(level('silent'), 'silent');
  t.throws(() => level('loud'), 'an unknown level is still refused');
});
