import type { ClientSession } from 'mongodb';
import { MongoNetworkError, MongoServerError, MongoServerSelectionError } from 'mongodb';
import t from 'tap';
import { commitWithRetry } from '../../infra/readstore/mongo.js';

/**
 * The driver labels a commit whose outcome is unknown UnknownTransactionCommitResult: server errors,
 * but also network and server-selection errors (a primary stepping down, a dropped connection), which
 * are not MongoServerErrors. Committing again is safe for all of them. Runs without a server: the
 * session is a stand-in that fails its first commits.
 */
function flakySession(failures: Error[]): { session: ClientSession; commits: () => number } {
  let commits = 0;
  const session = {
    async commitTransaction() {
      commits++;
      const failure = failures.shift();
      if (failure) throw failure;
    },
  } as unknown as ClientSession;
  return { session, commits: () => commits };
}

const unknown = <E extends Error & { addErrorLabel(label: string): void }>(error: E): E => {
  error.addErrorLabel('UnknownTransactionCommitResult');
  return error;
};

t.test('a commit with an unknown outcome is committed again, whatever the error class', async (t) => {
  for (const error of [
    unknown(new MongoServerError({ message: 'primary stepped down', code: 189 })),
    unknown(new MongoNetworkError('connection reset')),
    unknown(new MongoServerSelectionError('no primary', { type: 'ReplicaSetNoPrimary', servers: new Map(), stale: false, compatible: true, heartbeatFrequencyMS: 10000, localThresholdMS: 15, setName: 'rs', maxElectionId: null, maxSetVersion: null, commonWireVersion: 0, logicalSessionTimeoutMinutes: null } as never)),
  ]) {
    const { session, commits } = flakySession([error]);
    await commitWithRetry(session);
    t.equal(commits(), 2, `${error.name}: committed on the second try`);
  }
});

t.test('other commit errors, and a commit that keeps failing, are thrown', async (t) => {
  const plain = new MongoServerError({ message: 'write conflict', code: 112 });
  const { session } = flakySession([plain]);
  await t.rejects(commitWithRetry(session), plain);
  const { session: stuck, commits } = flakySession([1, 2, 3, 4, 5].map(() => unknown(new MongoNetworkError('down'))));
  await t.rejects(commitWithRetry(stuck), MongoNetworkError);
  t.equal(commits(), 4, 'three more tries');
});
