import { createHmac, hash } from 'node:crypto';
import { isbot } from 'isbot';
import { UAParser } from 'ua-parser-js';
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
  // browser can tell them apart (a Mac has no touch screen). The same test as
  // ua-parser-js's own browser-side withFeatureCheck(): model Macintosh plus
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

/** The most the table's referrer column holds. */
const MAX_STORED_REFERRER = 2048;

const NO_REFERRER = { stored: null, host: null } as const;

/**
 * A referrer, parsed once, as the event keeps it:
 * - `stored`: scheme, host (and port) and path, nothing else. A query or
 *   fragment can carry whatever the referring page put there (an address, a
 *   search, a token: `https://mail.example/?to=<address>` was stored whole),
 *   and userinfo is credentials; the path alone says where a visit came from,
 *   as the tracker's `page` is a path too. Cut at the column's length: the
 *   parser percent-encodes the path, which can lengthen a referrer the route
 *   took at its limit (the result is ASCII).
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
  return { stored: `${url.protocol}//${url.host}${url.pathname}`.slice(0, MAX_STORED_REFERRER), host: host === '' ? null : host.slice(0, 253) };
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
