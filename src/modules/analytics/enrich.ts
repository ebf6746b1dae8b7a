import { createHmac, hash } from 'node:crypto';
import { isbot } from 'isbot';
// ua-parser-js 1.x (MIT): 2.x is AGPL-3.0, which would bind every deployer of
// this service to publish its source; 1.x reads the device type alike (the
// user agents of the tests and 16 more compared: no difference).
import UAParser from 'ua-parser-js';
import { utcDay } from './dates.ts';

// What ingestion derives from a request before storing an event: bot or not,
// device type, the referrer as stored and its host, and the visitor id. The
// IP address is used for the visitor hash only and never stored.

export type DeviceType = 'desktop' | 'mobile' | 'tablet';

export interface UserAgentFacts {
  bot: boolean;
  device: DeviceType;
}

const UA_CACHE_SIZE = 5_000;
/** A user agent's facts, and what they become when the browser reports a touch screen. */
interface ParsedUserAgent {
  facts: UserAgentFacts;
  onTouchScreen: UserAgentFacts;
}
const userAgentCache = new Map<string, ParsedUserAgent>();

function parseUserAgent(userAgent: string): ParsedUserAgent {
  const { type, model } = UAParser(userAgent).device;
  // ua-parser-js leaves desktops untyped; TVs, consoles and the like count as desktop.
  const device: DeviceType = type === 'mobile' || type === 'wearable' ? 'mobile' : type === 'tablet' ? 'tablet' : 'desktop';
  const facts = { bot: isbot(userAgent), device };
  // Safari on iPadOS 13+ sends the Mac's user agent word for word; only the
  // browser can tell them apart (a Mac has no touch screen). The test
  // ua-parser-js 2's browser-side withFeatureCheck() makes: model Macintosh plus
  // touch is an iPad. Any other user agent keeps its type: an Android phone
  // with touch stays mobile, a Windows touch laptop stays desktop.
  const onTouchScreen = model === 'Macintosh' ? { ...facts, device: 'tablet' as const } : facts;
  return { facts, onTouchScreen };
}

/**
 * Bot or not, and the device type. `touchScreen`: the tracker's hint that a
 * Macintosh user agent comes with a touch screen (an iPad). Parsing is the
 * costly part of ingestion and few user agents repeat a lot: both answers are
 * cached with the user agent, so the hint costs no second parse.
 */
export function describeUserAgent(userAgent: string, touchScreen?: boolean | null): UserAgentFacts {
  let parsed = userAgentCache.get(userAgent);
  if (!parsed) {
    parsed = parseUserAgent(userAgent);
    if (userAgentCache.size >= UA_CACHE_SIZE) userAgentCache.delete(userAgentCache.keys().next().value as string);
    userAgentCache.set(userAgent, parsed);
  }
  return touchScreen === true ? parsed.onTouchScreen : parsed.facts;
}

/**
 * Does a path need canonicalPath's work? Only an escape or a non-ASCII
 * character can have another spelling: the tracker's usual ASCII path costs
 * this one test.
 */
const MAY_HAVE_OTHER_SPELLINGS = /[%\u0080-\uffff]/;
const ESCAPE_RUN = /(?:%[0-9A-Fa-f]{2})+/g;

/**
 * Bytes kept escaped when decoded: `/ ? # %` would change what the path says
 * (`a%2Fb` is one segment, `%3F` no query), and control characters are no
 * text to show (Postgres text cannot hold NUL).
 */
const keepsEscape = (byte: number) => byte === 0x2f || byte === 0x3f || byte === 0x23 || byte === 0x25 || byte < 0x20 || byte === 0x7f;

const escapeOf = (byte: number) => `%${byte.toString(16).toUpperCase().padStart(2, '0')}`;

/** Bytes of a UTF-8 sequence led by `lead`, and the range of its second byte (RFC 3629: no overlong forms, surrogates or code points past U+10FFFF); undefined for a byte that leads none. */
function utf8Sequence(lead: number): { length: number; low: number; high: number } | undefined {
  if (lead >= 0xc2 && lead <= 0xdf) return { length: 2, low: 0x80, high: 0xbf };
  if (lead === 0xe0) return { length: 3, low: 0xa0, high: 0xbf };
  if (lead === 0xed) return { length: 3, low: 0x80, high: 0x9f };
  if (lead >= 0xe1 && lead <= 0xef) return { length: 3, low: 0x80, high: 0xbf };
  if (lead === 0xf0) return { length: 4, low: 0x90, high: 0xbf };
  if (lead === 0xf4) return { length: 4, low: 0x80, high: 0x8f };
  if (lead >= 0xf1 && lead <= 0xf3) return { length: 4, low: 0x80, high: 0xbf };
  return undefined;
}

/** An escape that keepsEscape keeps (`%2F`, `%3F`, `%23`, `%25`, controls). */
const KEPT_ESCAPE = /%(?:2[35Ff]|3[Ff]|[01][0-9A-Fa-f]|7[Ff])/;

/** A run of escapes (`%C3%A9%2f`) with each valid UTF-8 sequence decoded and what stays escaped in upper-case hex. */
function decodeEscapeRun(run: string): string {
  // One escape alone: ASCII, or a byte no sequence completes (a crafted page is hundreds of these).
  if (run.length === 3) {
    const byte = Number.parseInt(run.slice(1), 16);
    return byte < 0x80 && !keepsEscape(byte) ? String.fromCharCode(byte) : escapeOf(byte);
  }
  const bytes = Buffer.from(run.replaceAll('%', ''), 'hex');
  let text = '';
  for (let at = 0; at < bytes.length; ) {
    const lead = bytes[at];
    if (lead < 0x80) {
      text += keepsEscape(lead) ? escapeOf(lead) : String.fromCharCode(lead);
      at += 1;
      continue;
    }
    const sequence = utf8Sequence(lead);
    let valid = sequence !== undefined && at + sequence.length <= bytes.length;
    for (let next = 1; valid && next < sequence!.length; next += 1) {
      const byte = bytes[at + next];
      valid = next === 1 ? byte >= sequence!.low && byte <= sequence!.high : byte >= 0x80 && byte <= 0xbf;
    }
    if (valid) {
      text += bytes.toString('utf8', at, at + sequence!.length);
      at += sequence!.length;
    } else {
      text += escapeOf(lead);
      at += 1;
    }
  }
  return text;
}

/** A path's escapes decoded as decodeEscapeRun decodes them. */
function decodePath(path: string): string {
  if (!path.includes('%')) return path;
  // The usual path, valid UTF-8 with nothing to keep escaped, decoded by the
  // engine at once. Tried once per path, not per run of escapes: a crafted
  // page of a few hundred invalid runs threw once for each (5–12 ms a request).
  if (!KEPT_ESCAPE.test(path)) {
    try {
      return decodeURIComponent(path);
    } catch {
      // An escape that is not valid UTF-8, or a `%` that starts none: the walk decodes what is.
    }
  }
  return path.replace(ESCAPE_RUN, decodeEscapeRun);
}

/**
 * One spelling for one path, so a page is counted once: `/café`, `/caf%C3%A9`,
 * `/caf%c3%a9` and `/cafe` + U+0301 (NFD) are all `/café`, `/a%20b` is `/a b`.
 * Escapes that form valid UTF-8 are decoded, except those keepsEscape keeps
 * (in upper-case hex, as is any escape left, such as a lone `%C3`), then the
 * text is put in NFC. Only the part before a `?` or `#` is a path: a query's
 * escapes can mean something (`%26` in a value). The result is never longer
 * in UTF-8 than `maxBytes`: NFC can lengthen a few characters, and a path
 * that would grow past the column is kept as sent.
 */
export function canonicalPath(text: string, maxBytes: number): string {
  if (!MAY_HAVE_OTHER_SPELLINGS.test(text)) return text;
  const pathEnd = text.search(/[?#]/);
  const path = pathEnd === -1 ? text : text.slice(0, pathEnd);
  const canonical = decodePath(path).normalize('NFC') + (pathEnd === -1 ? '' : text.slice(pathEnd));
  return Buffer.byteLength(canonical) <= maxBytes ? canonical : text;
}

/** The most the table's referrer column holds. */
const MAX_STORED_REFERRER = 2048;

const NO_REFERRER = { stored: null, host: null } as const;

/**
 * A referrer, parsed once, as the event keeps it:
 * - `stored`: scheme, host (and port) and path, nothing else. A query or
 *   fragment can carry whatever the referring page put there (an address, a
 *   search, a token: `https://mail.example/?to=<address>` was stored whole),
 *   and userinfo is credentials; the path alone says where a visit came from,
 *   as the tracker's `page` is a path too. The path is spelled as
 *   canonicalPath spells a page. Cut at the column's length: the parser
 *   percent-encodes the path, which can lengthen a referrer the route took at
 *   its limit.
 * - `host`: lower case, without a leading `www.`.
 * Both null when absent, not a URL, or a URL without a host (mailto:, file:).
 */
export function referrerParts(referrer: string | null | undefined): { stored: string | null; host: string | null } {
  if (!referrer) return NO_REFERRER;
  let url: URL;
  try {
    url = new URL(referrer);
  } catch {
    return NO_REFERRER;
  }
  if (url.host === '') return NO_REFERRER;
  const host = url.hostname.toLowerCase().replace(/^www\./, '');
  const origin = `${url.protocol}//${url.host}`;
  // The path in canonicalPath's one spelling, as the page is: the parser keeps an escape's hex as it came.
  // Decoded, it may hold non-ASCII text, which a cut could split: one too long is cut as the parser wrote it.
  const stored = `${origin}${canonicalPath(url.pathname, Infinity)}`;
  return {
    stored: stored.length <= MAX_STORED_REFERRER ? stored : `${origin}${url.pathname}`.slice(0, MAX_STORED_REFERRER),
    host: host === '' ? null : host.slice(0, 253),
  };
}

/** The referrer's host (referrerParts). */
export const referrerHost = (referrer: string | null | undefined): string | null => referrerParts(referrer).host;

/** The referrer as stored (referrerParts). */
export const storedReferrer = (referrer: string | null | undefined): string | null => referrerParts(referrer).stored;

/**
 * Visitor ids without cookies or stored IPs: the day's salt is derived from
 * a server secret with HMAC, so it changes every UTC day and the same person
 * cannot be linked across days; the id is SHA-256 over that salt, the
 * website, the IP and the user agent (the salt is a fixed-length prefix, so a
 * plain hash serves; an HMAC per event would cost a key setup each time).
 */
export function createVisitorIds(secret: string) {
  let saltDay = '';
  let salt = Buffer.alloc(0);
  return function visitorId(input: { userId?: string | null; websiteId: string; ip: string; userAgent: string; at: Date }): string {
    if (input.userId) return input.userId;
    const day = utcDay(input.at);
    if (day !== saltDay) {
      salt = createHmac('sha256', secret).update(`analytics-visitor-salt:${day}`).digest();
      saltDay = day;
    }
    // The salt's bytes, then the text's: one call to the one-shot hash, with no
    // Hash object for the collector to finalise on every event.
    const text = `${input.websiteId}\n${input.ip}\n${input.userAgent}`;
    const bytes = Buffer.allocUnsafe(salt.length + Buffer.byteLength(text));
    salt.copy(bytes);
    bytes.write(text, salt.length);
    return hash('sha256', bytes, 'base64url').slice(0, 22);
  };
}
