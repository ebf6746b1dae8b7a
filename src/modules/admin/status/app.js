import { drawLineChart } from './charts.js';

// The live dashboard: one EventSource on /admin/status/stream (same origin,
// so the session cookie or the browser's Authorization header goes along).
// `history` brings the samples of the last minutes, then a `snapshot` every
// second brings current figures and the newest sample. The page stops for good
// when another tab has taken its stream or its session has ended, and says so;
// any other refusal of its stream is retried.

const WINDOW_SECONDS = 300;
const $ = (id) => document.getElementById(id);
const samples = [];

const MiB = 1024 * 1024;
const ms = (value) => (value === null || value === undefined ? '–' : value < 10 ? value.toFixed(2) : value.toFixed(1));
const mib = (bytes) => `${(bytes / MiB).toFixed(1)} MiB`;
const int = new Intl.NumberFormat('en');

function duration(seconds) {
  const s = Math.floor(seconds);
  const parts = [[Math.floor(s / 86400), 'd'], [Math.floor((s % 86400) / 3600), 'h'], [Math.floor((s % 3600) / 60), 'min'], [s % 60, 's']];
  const shown = parts.filter(([n], i) => n > 0 || i === parts.length - 1);
  return shown.slice(0, 3).map(([n, unit]) => `${n} ${unit}`).join(' ');
}

function setText(id, text) {
  const element = $(id);
  if (element.textContent !== text) element.textContent = text;
}

function setStatus(id, status) {
  const element = $(id);
  element.textContent = status.replace('_', ' ');
  element.dataset.state = status;
}

function setConnection(text, state) {
  const badge = $('connection');
  badge.textContent = text;
  badge.dataset.state = state;
}

function fillRows(tbody, rows) {
  tbody.replaceChildren(
    ...rows.map((cells) => {
      const tr = document.createElement('tr');
      for (const [text, className] of cells) {
        const td = document.createElement('td');
        td.textContent = text;
        if (className) td.className = className;
        tr.append(td);
      }
      return tr;
    }),
  );
}

function renderLive(live) {
  // null: the count could not be read (the database is down); show that, not the last count.
  if (!live) {
    setText('live-visitors', '–');
    $('live-websites').replaceChildren();
    return;
  }
  setText('live-visitors', int.format(live.activeVisitors));
  const active = live.websites.filter((website) => website.activeVisitors > 0);
  fillRows($('live-websites'), active.map((website) => [[website.name, 'website'], [int.format(website.activeVisitors), 'num']]));
}

function render({ metrics, health, live }) {
  renderLive(live);
  const { requests, latencyMs, memory, eventLoopLagMs } = metrics;
  setText('rps', requests.perSecond.toFixed(2));
  setText('total-requests', int.format(requests.total));
  const failed = (requests.byStatusClass['4xx'] ?? 0) + (requests.byStatusClass['5xx'] ?? 0);
  setText('error-rate', requests.total ? `${((100 * failed) / requests.total).toFixed(1)} %` : '0 %');
  setText('p50', ms(latencyMs.p50));
  setText('p95', ms(latencyMs.p95));
  setText('p99', ms(latencyMs.p99));
  setText('rss', mib(memory.rssBytes));
  setText('heap', mib(memory.heapUsedBytes));
  setText('heap-total', mib(memory.heapTotalBytes));
  setText('lag', ms(eventLoopLagMs.p99));
  setText('lag-mean', ms(eventLoopLagMs.mean));
  setText('lag-max', ms(eventLoopLagMs.max));
  setText('uptime', duration(metrics.uptimeSeconds));
  setText('started', new Date(metrics.startedAt).toLocaleString());

  setStatus('db-status', health.database.status);
  setText('db-latency', health.database.latencyMs === null ? '' : `${ms(health.database.latencyMs)} ms`);
  setStatus('auth-status', health.auth.status);
  setText('auth-latency', health.auth.latencyMs === null ? '' : `${ms(health.auth.latencyMs)} ms`);
  setStatus('email-status', health.email.status);
  setText('email-provider', health.email.provider ?? '');
  setText('outbox', health.email.pendingOutbox === null ? 'n/a' : int.format(health.email.pendingOutbox));
  setStatus('ratelimit-status', health.rateLimitStore.status);
  setText('ratelimit-latency', health.rateLimitStore.latencyMs === null ? '' : `${ms(health.rateLimitStore.latencyMs)} ms`);

  const codes = Object.entries(requests.byStatusCode).sort(([a], [b]) => a.localeCompare(b));
  fillRows($('status-codes'), codes.map(([code, count]) => [[code, `code c${code[0]}xx`], [int.format(count), 'num']]));

  const slowest = [...metrics.routes].sort((a, b) => (b.latencyMs.p95 ?? -1) - (a.latencyMs.p95 ?? -1)).slice(0, 8);
  fillRows(
    $('slow-routes'),
    slowest.map((r) => [
      [`${r.method} ${r.route}`, 'route'],
      [int.format(r.count), 'num'],
      [int.format(r.errors), 'num'],
      [ms(r.latencyMs.p50), 'num'],
      [ms(r.latencyMs.p95), 'num'],
      [ms(r.latencyMs.p99), 'num'],
    ]),
  );
  setText('updated', new Date().toLocaleTimeString());
}

function color(name, fallback) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim() || fallback;
}

function drawCharts() {
  const options = { windowSeconds: WINDOW_SECONDS };
  const pick = (read) => samples.map(read);
  drawLineChart($('chart-rps'), [{ label: 'req/s', color: color('--c1', '#4ea1ff'), values: pick((s) => s.requestsPerSecond) }], options);
  drawLineChart(
    $('chart-latency'),
    [
      { label: 'p50', color: color('--c2', '#52c41a'), values: pick((s) => s.latencyMs.p50) },
      { label: 'p95', color: color('--c3', '#faad14'), values: pick((s) => s.latencyMs.p95) },
      { label: 'p99', color: color('--c4', '#ff4d4f'), values: pick((s) => s.latencyMs.p99) },
    ],
    options,
  );
  drawLineChart(
    $('chart-memory'),
    [
      { label: 'rss', color: color('--c1', '#4ea1ff'), values: pick((s) => s.rssBytes / MiB) },
      { label: 'heap', color: color('--c2', '#52c41a'), values: pick((s) => s.heapUsedBytes / MiB) },
    ],
    options,
  );
  drawLineChart($('chart-lag'), [{ label: 'p99', color: color('--c3', '#faad14'), values: pick((s) => s.eventLoopLagP99Ms) }], options);
}

// Why the page stopped, and what its link (to the page itself) does about it.
const STOPPED = {
  replaced: ['Opened in another tab', 'reload to watch here'],
  401: ['Your session has ended', 'sign in again'],
  403: ['This account is no longer an administrator', 'sign in again'],
};

// The page's own retry after a refusal that says nothing about the session: from the
// stream's own 3 s, doubling up to 30 s, back to 3 s once a stream opens.
const RETRY_FIRST_MS = 3_000;
const RETRY_MAX_MS = 30_000;
let retryMs = RETRY_FIRST_MS;
let retryTimer;
let stopped = false;
let source;

/** Shows that the figures are no longer updated, and why. */
function stop([text, action]) {
  stopped = true;
  clearTimeout(retryTimer);
  source.close();
  document.body.classList.add('stale');
  setConnection('stopped', 'warn');
  $('notice-text').textContent = `${text} —`;
  $('notice-action').textContent = action;
  $('notice').hidden = false;
}

/** EventSource cannot read the status of a refused request; the session endpoint answers the same guard with one. */
async function explainRefusal() {
  const response = await fetch('/admin/status/session', { credentials: 'same-origin', cache: 'no-store' }).catch(() => undefined);
  if (stopped) return;
  const why = STOPPED[response?.status];
  if (why) return stop(why);
  // Anything else is no verdict on the session: a proxy's 502 or 503 while the server restarts,
  // a 503 while the database is down, a 429. EventSource gives up for good on any answer that
  // is not 200, so the page opens a new one itself, as the browser does after a dropped link.
  setConnection('reconnecting…', 'warn');
  retryTimer = setTimeout(connect, retryMs);
  retryMs = Math.min(retryMs * 2, RETRY_MAX_MS);
}

function connect() {
  source = new EventSource('/admin/status/stream');
  source.addEventListener('open', () => {
    retryMs = RETRY_FIRST_MS;
    setConnection('live', 'ok');
  });
  source.addEventListener('error', () => {
    // CONNECTING: the browser retries by itself (a dropped link, a restarting server). CLOSED: a retry was refused.
    if (source.readyState === EventSource.CLOSED) void explainRefusal();
    else setConnection('reconnecting…', 'warn');
  });
  source.addEventListener('end', (event) => {
    // Reconnecting would end this admin's next-oldest stream, whose tab would do the same, without end.
    // Any other end (sign-out, shutdown) is left to the retry: its answer says what happened.
    if (JSON.parse(event.data).code === 'replaced') stop(STOPPED.replaced);
  });
  source.addEventListener('history', (event) => {
    samples.splice(0, samples.length, ...JSON.parse(event.data));
    drawCharts();
  });
  source.addEventListener('snapshot', (event) => {
    const snapshot = JSON.parse(event.data);
    const { sample } = snapshot;
    if (sample && (samples.length === 0 || samples[samples.length - 1].t < sample.t)) {
      samples.push(sample);
      if (samples.length > WINDOW_SECONDS) samples.splice(0, samples.length - WINDOW_SECONDS);
    }
    render(snapshot);
    drawCharts();
  });
}

connect();

window.addEventListener('resize', drawCharts);

$('signout').addEventListener('click', async () => {
  stopped = true;
  clearTimeout(retryTimer);
  source.close();
  const response = await fetch('/admin/status/session', { method: 'DELETE', credentials: 'same-origin' }).catch(() => undefined);
  if (response?.ok) return window.location.reload();
  // The session could not be ended: say so, and why, rather than show a sign-in form while the
  // session, and the cookie, still work.
  stop([`Not signed out: ${await whySignOutFailed(response)}`, 'reload and sign out again']);
});

/** The server's own reason (its error envelope) when it answered, or that it did not. */
async function whySignOutFailed(response) {
  if (!response) return 'the server did not answer';
  const body = await response.json().catch(() => undefined);
  const reason = typeof body?.error === 'string' ? ` ${body.error}` : '';
  return `the server answered ${response.status}${reason}`;
}
