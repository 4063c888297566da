// One Agenda worker for recruiter's benchmarks (benchmarks/agenda_system.py):
//
//     node worker.mjs <mongodb uri> <database> [<settings as JSON>]
//
// It processes the jobs "bench.noop" (does nothing) and "bench.sleep" (appends "start
// <pid>" to data.ledger, sleeps data.seconds, appends "end <pid>"), one at a time.
// Settings: processEvery and lockLifetime in milliseconds, lockLimit (how many jobs it
// may hold locked at once), changeStream (be told of new jobs by a change stream on the
// jobs collection rather than only polling).
//
// Like benchmarks/counted.py for the Python processes, it counts the commands its
// MongoDB client sends (the driver's command monitoring) and, on SIGUSR1, writes them
// to $RECRUITER_BENCH_COUNTS/<pid>.json; an empty getMore is counted apart, as
// "getMore (empty)". On SIGTERM it stops (releasing the jobs it holds but has not
// started) and exits.
import { appendFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

import { MongoBackend, MongoChangeStreamNotificationChannel } from '@agendajs/mongo-backend';
import { Agenda } from 'agenda';
import { MongoClient } from 'mongodb';

const EMPTY_FEED_READ = 'getMore (empty)';
const [uri, database, settingsJson] = process.argv.slice(2);
const settings = {
  processEvery: 100,
  lockLifetime: 10 * 60 * 1000,
  lockLimit: 1,
  changeStream: false,
  ...JSON.parse(settingsJson || '{}')
};

const counts = {};
const client = new MongoClient(uri, { monitorCommands: true });
client.on('commandStarted', event => {
  if (event.commandName !== 'getMore') {
    counts[event.commandName] = (counts[event.commandName] || 0) + 1;
  }
});
client.on('commandSucceeded', event => {
  if (event.commandName === 'getMore') {
    const batch = event.reply?.cursor?.nextBatch;
    const name = batch && batch.length ? 'getMore' : EMPTY_FEED_READ;
    counts[name] = (counts[name] || 0) + 1;
  }
});
client.on('commandFailed', event => {
  if (event.commandName === 'getMore') {
    counts.getMore = (counts.getMore || 0) + 1;
  }
});
process.on('SIGUSR1', () => {
  const path = join(process.env.RECRUITER_BENCH_COUNTS, `${process.pid}.json`);
  writeFileSync(`${path}.tmp`, JSON.stringify(counts));
  renameSync(`${path}.tmp`, path);
});

await client.connect();
const db = client.db(database);
const agenda = new Agenda({
  backend: new MongoBackend({ mongo: db }),
  notificationChannel: settings.changeStream
    ? new MongoChangeStreamNotificationChannel({ db })
    : undefined,
  processEvery: settings.processEvery,
  maxConcurrency: 1,
  defaultConcurrency: 1,
  lockLimit: settings.lockLimit,
  defaultLockLifetime: settings.lockLifetime
});
agenda.on('error', error => console.error(`agenda error: ${error.message}`));

agenda.define('bench.noop', async () => {});
agenda.define('bench.sleep', async job => {
  const { seconds, ledger } = job.attrs.data;
  appendFileSync(ledger, `start ${process.pid}\n`);
  await sleep(seconds * 1000);
  appendFileSync(ledger, `end ${process.pid}\n`);
});

process.on('SIGTERM', async () => {
  await agenda.stop();
  await client.close();
  process.exit(0);
});

await agenda.start();
console.log(`agenda worker ${process.pid} ready: ${JSON.stringify(settings)}`);
