import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import Fastify from 'fastify';
import { SUBMIT_BODY_LIMIT } from '../src/modules/feedback/routes.ts';
import jsonBody, { refusedShape } from '../src/plugins/json-body.ts';
import { benchArgs } from './load.ts';

// npm run bench:bodies [-- --tries=5]
//
// What a large body costs the process before it is answered, by shape: each
// about 7 MB (the feedback routes' limit, for a screenshot), sent with
// `inject` to a Fastify route behind the app's JSON body plugin, which
// answers 204 when the body is taken and 400 when it is refused. The process
// is single-threaded: each millisecond here is a millisecond every other
// request waits. Also the pass over the text for a typical ingested event, in
// a loop, against the walk over the parsed event it replaced. No network;
// the whole run takes a few seconds. Writes bench/results/bodies.json.

const ROOT = path.resolve(import.meta.dirname, '..');
const TRIES = Number(benchArgs().tries ?? 5);
const SIZE = 7_000_000;

const SHAPES: Record<string, string> = {
  'nested brackets': `{"comment":"x","extra":${'['.repeat(SIZE / 2)}${']'.repeat(SIZE / 2)}}`,
  'array of zeros': `{"comment":"x","extra":[${'0,'.repeat(SIZE / 2)}0]}`,
  'array of empty objects': `{"comment":"x","extra":[${'{},'.repeat(SIZE / 3)}{}]}`,
  'object of distinct keys': `{"comment":"x","extra":{${Array.from({ length: SIZE / 12 }, (_, i) => `"k${i}":0`).join(',')}}}`,
  whitespace: `{"comment":"x",${' '.repeat(SIZE)}"a":1}`,
  'string of escaped quotes': `{"comment":"x","extra":"${'\\"'.repeat(SIZE / 2)}"}`,
  'string of unicode escapes': `{"comment":"x","extra":"${'\\u00e9'.repeat(SIZE / 6)}"}`,
  'one long number': `{"comment":"x","extra":0.${'1'.repeat(SIZE)}}`,
  '10,000 long distinct keys': `{"comment":"x","extra":{${Array.from({ length: 9_990 }, (_, i) => `"${String(i).padStart(690, 'k')}":0`).join(',')}}}`,
  screenshot: JSON.stringify({ comment: 'x', screenshot: `data:image/png;base64,${'A'.repeat(SIZE)}` }),
};

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];

async function largeBodies() {
  const app = Fastify({ bodyLimit: SUBMIT_BODY_LIMIT });
  await app.register(jsonBody);
  app.post('/body', async (_request, reply) => reply.code(204).send());
  await app.ready();
  const send = (payload: string) => app.inject({ method: 'POST', url: '/body', headers: { 'content-type': 'application/json' }, payload });
  for (const payload of Object.values(SHAPES)) await send(payload); // warm up: the first shape would pay for the compiler
  const rows = [];
  for (const [shape, payload] of Object.entries(SHAPES)) {
    const times: number[] = [];
    let status = 0;
    for (let i = 0; i < TRIES; i += 1) {
      const start = performance.now();
      const response = await send(payload);
      times.push(performance.now() - start);
      status = response.statusCode;
    }
    rows.push({ shape, megabytes: Number((Buffer.byteLength(payload) / 1e6).toFixed(2)), status, medianMs: Number(median(times).toFixed(1)), minMs: Number(Math.min(...times).toFixed(1)), maxMs: Number(Math.max(...times).toFixed(1)) });
  }
  await app.close();
  return rows;
}

/** A walk over the parsed body for its depth, as the app did before the pass over the text (until 38e6349). */
function parsedDepthWalk(body: unknown): boolean {
  const stack: { value: unknown; depth: number }[] = [{ value: body, depth: 0 }];
  while (stack.length > 0) {
    const { value, depth } = stack.pop()!;
    if (value === null || typeof value !== 'object') continue;
    if (depth === 32) return true;
    for (const item of Array.isArray(value) ? value : Object.values(value)) if (item !== null && typeof item === 'object') stack.push({ value: item, depth: depth + 1 });
  }
  return false;
}

function typicalEvent() {
  const text = JSON.stringify({
    websiteId: '0d9e7c1e-4f4b-4c3a-9b1e-2f6a8c0d1e2f',
    eventType: 'page_view',
    page: '/work?utm_source=newsletter&utm_medium=email&utm_campaign=launch',
    referrer: 'https://www.google.com/search',
    userAgent: 'Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0.0.0 Safari/537.36',
    sessionId: 's-1',
  });
  const parsed: unknown = JSON.parse(text);
  const LOOPS = 500_000;
  let refused = 0;
  const nanosecondsEach = (check: () => boolean) => {
    const start = performance.now();
    for (let i = 0; i < LOOPS; i += 1) if (check()) refused += 1;
    return ((performance.now() - start) * 1e6) / LOOPS;
  };
  const passOverText = () => refusedShape(text) !== undefined;
  const walkParsed = () => parsedDepthWalk(parsed);
  // Two rounds of each to warm up, then five measured.
  const passes: number[] = [];
  const walks: number[] = [];
  for (let round = 0; round < 7; round += 1) {
    const [pass, walk] = [nanosecondsEach(passOverText), nanosecondsEach(walkParsed)];
    if (round >= 2) [passes.push(pass), walks.push(walk)];
  }
  if (refused > 0) throw new Error('the typical event was refused');
  return { characters: text.length, textPassNs: Math.round(median(passes)), parsedWalkNs: Math.round(median(walks)), rounds: 5, loops: LOOPS };
}

const bodies = await largeBodies();
const event = typicalEvent();
console.table(bodies.map((row) => ({ shape: row.shape, MB: row.megabytes, status: row.status, 'median ms': row.medianMs, 'min ms': row.minMs, 'max ms': row.maxMs })));
console.log(`a typical ingested event (${event.characters} characters): the pass over its text ${event.textPassNs} ns, the walk over it parsed ${event.parsedWalkNs} ns (medians of ${event.rounds} rounds of ${event.loops})`);
await writeFile(path.join(ROOT, 'bench/results/bodies.json'), `${JSON.stringify({ measuredAt: new Date().toISOString(), node: process.version, tries: TRIES, bodies, event }, null, 2)}\n`);
console.log('bench/results/bodies.json written');
