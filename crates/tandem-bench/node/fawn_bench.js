// Variant (d) of the tandem benchmark: the transfer done with Fawn 2.1.5.
//
//   node fawn_bench.js URI DB POOL COLLECTION      (fawn and mongoose on NODE_PATH)
//
// Reads one JSON request per line on stdin and answers one JSON line on stdout:
//   {"op":"seq","start":K,"n":N}       N transfers one after another
//   {"op":"conc","start":K,"n":N,"c":C} N transfers by C concurrent promises
//   {"op":"quit"}                       disconnect and exit
// Transfer number K moves one unit between the same two accounts as in every
// other variant (see crates/tandem-bench/src/workload.rs). Commands are counted
// with the driver's command monitoring (mongodb.instrument).
'use strict';

const readline = require('readline');
const mongodb = require('mongodb');

let commands = 0;
let inFlight = 0;
let waves = 0;
const instrumentation = mongodb.instrument({}, (err) => {
  if (err) fatal(err);
});
instrumentation.on('started', () => {
  commands += 1;
  if (inFlight === 0) waves += 1;
  inFlight += 1;
});
const finished = () => {
  inFlight = Math.max(0, inFlight - 1);
};
instrumentation.on('succeeded', finished);
instrumentation.on('failed', finished);

const mongoose = require('mongoose');
const Promise = require('bluebird');
const Fawn = require('fawn');

mongoose.Promise = Promise;

const [uri, dbName, poolArg, collection] = process.argv.slice(2);
const pool = BigInt(parseInt(poolArg, 10));
const MASK = (1n << 64n) - 1n;

function say(obj) {
  process.stdout.write(JSON.stringify(obj) + '\n');
}

function fatal(err) {
  say({ fatal: String((err && err.stack) || err) });
  process.exit(1);
}

// splitmix64, as workload::mix in Rust.
function mix(n) {
  let z = (BigInt(n) + 0x9e3779b97f4a7c15n) & MASK;
  z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & MASK;
  z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & MASK;
  return z ^ (z >> 31n);
}

function accountId(i) {
  return 'acct-' + String(i).padStart(5, '0');
}

function pair(n) {
  const h = mix(n);
  const from = h % pool;
  const to = (from + 1n + ((h >> 32n) % (pool - 1n))) % pool;
  return [accountId(Number(from)), accountId(Number(to))];
}

function transfer(n) {
  const [from, to] = pair(n);
  return Fawn.Task()
    .update(collection, { _id: from, balance: { $gte: 1 } }, { $inc: { balance: -1 } })
    .update(collection, { _id: to }, { $inc: { balance: 1 } })
    .run();
}

function cpuMicros(since) {
  const u = process.cpuUsage(since);
  return u.user + u.system;
}

async function sequential(start, n) {
  const c0 = commands;
  const w0 = waves;
  const cpu0 = process.cpuUsage();
  const lat = [];
  const errors = [];
  for (let k = start; k < start + n; k++) {
    const t0 = process.hrtime.bigint();
    try {
      await transfer(k);
      lat.push(Number(process.hrtime.bigint() - t0));
    } catch (err) {
      errors.push(String(err && err.message));
    }
  }
  return {
    lat_ns: lat,
    cpu_us: cpuMicros(cpu0),
    commands: commands - c0,
    waves: waves - w0,
    errors,
  };
}

async function concurrent(start, n, c) {
  let next = start;
  const end = start + n;
  const errors = [];
  const t0 = process.hrtime.bigint();
  async function worker() {
    for (let i = 0; i < n && next < end; i++) {
      const k = next;
      next += 1;
      try {
        await transfer(k);
      } catch (err) {
        errors.push(String(err && err.message));
      }
    }
  }
  const workers = [];
  for (let i = 0; i < c; i++) workers.push(worker());
  await Promise.all(workers);
  return { wall_ns: Number(process.hrtime.bigint() - t0), errors };
}

async function main() {
  // Majority, journaled writes as the Rust variants use; a pool large enough for 16 promises.
  const base = uri.replace(/\/?(\?.*)?$/, '/');
  const url = base + dbName + '?w=majority&journal=true&maxPoolSize=64';
  await mongoose.connect(url, { useMongoClient: true });
  Fawn.init(mongoose, 'fawntasks');
  say({ ready: true });

  const lines = readline.createInterface({ input: process.stdin, terminal: false });
  for await (const line of lines) {
    if (!line.trim()) continue;
    const req = JSON.parse(line);
    if (req.op === 'seq') say(await sequential(req.start, req.n));
    else if (req.op === 'conc') say(await concurrent(req.start, req.n, req.c));
    else if (req.op === 'quit') break;
    else say({ fatal: 'unknown request ' + line });
  }
  await mongoose.disconnect();
  process.exit(0);
}

main().catch(fatal);
