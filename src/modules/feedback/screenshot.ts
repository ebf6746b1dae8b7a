// Screenshots arrive as base64 image data URLs (SPEC section 2). Checked
// before anything is stored: an image MIME type we allow, strict base64, at
// most 5 MiB once decoded, and bytes that begin as that type's files do. SVG
// is refused: it is markup that can carry script.

export const MAX_SCREENSHOT_BYTES = 5 * 1024 * 1024;
export const SCREENSHOT_TYPES = ['image/png', 'image/jpeg', 'image/gif', 'image/webp', 'image/avif'] as const;

const DATA_URL = /^data:([a-z]+\/[a-z0-9.+-]+);base64,([A-Za-z0-9+/]*={0,2})$/;
const LONGEST_TYPE = Math.max(...SCREENSHOT_TYPES.map((type) => type.length));
/** Longest data URL that can still hold MAX_SCREENSHOT_BYTES. */
export const MAX_SCREENSHOT_CHARS = `data:;base64,`.length + LONGEST_TYPE + Math.ceil(MAX_SCREENSHOT_BYTES / 3) * 4;

export type ScreenshotProblem = 'format' | 'type' | 'size' | 'content';

/** Bytes the base64 text decodes to. */
export function decodedLength(base64: string): number {
  const padding = base64.endsWith('==') ? 2 : base64.endsWith('=') ? 1 : 0;
  return (base64.length / 4) * 3 - padding;
}

/** Why a data URL is not an acceptable screenshot, or undefined when it is. */
export function screenshotProblem(dataUrl: string): ScreenshotProblem | undefined {
  // Too long to fit is refused before a regular expression walks 7 MB.
  if (dataUrl.length > MAX_SCREENSHOT_CHARS) return dataUrl.startsWith('data:image/') ? 'size' : 'format';
  const match = DATA_URL.exec(dataUrl);
  if (!match || match[2].length % 4 !== 0 || match[2].length === 0) return 'format';
  if (!(SCREENSHOT_TYPES as readonly string[]).includes(match[1])) return 'type';
  if (decodedLength(match[2]) > MAX_SCREENSHOT_BYTES) return 'size';
  if (!beginsAsImageOf(match[1] as ScreenshotType, Buffer.from(match[2].slice(0, SIGNATURE_CHARS), 'base64'))) return 'content';
  return undefined;
}

type ScreenshotType = (typeof SCREENSHOT_TYPES)[number];

/** Base64 characters decoded to read a file's signature: 48 bytes, enough for an AVIF file's brands. */
const SIGNATURE_CHARS = 64;
const ascii = (bytes: Buffer, from: number, to: number) => bytes.toString('latin1', from, to);

/**
 * Whether `head`, the first bytes of the decoded data, begin as a file of
 * `type` does: its magic number, and for AVIF an ISO media file whose brands
 * name AVIF. Text or bytes sent under an image type ("hello world" as
 * image/png was stored and listed as a PNG) are not a screenshot.
 */
function beginsAsImageOf(type: ScreenshotType, head: Buffer): boolean {
  switch (type) {
    case 'image/png':
      return head.subarray(0, 8).equals(PNG_SIGNATURE);
    case 'image/jpeg':
      return head[0] === 0xff && head[1] === 0xd8 && head[2] === 0xff;
    case 'image/gif':
      return ascii(head, 0, 6) === 'GIF87a' || ascii(head, 0, 6) === 'GIF89a';
    case 'image/webp':
      return ascii(head, 0, 4) === 'RIFF' && ascii(head, 8, 12) === 'WEBP';
    case 'image/avif': {
      if (head.length < 16 || ascii(head, 4, 8) !== 'ftyp') return false;
      // The box holds the major brand, a version, then compatible brands, four bytes each.
      const boxEnd = Math.min(head.readUInt32BE(0), head.length);
      for (let at = 8; at + 4 <= boxEnd; at += at === 8 ? 8 : 4) {
        if (['avif', 'avis'].includes(ascii(head, at, at + 4))) return true;
      }
      return false;
    }
  }
}

const PNG_SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

export const SCREENSHOT_MESSAGES: Record<ScreenshotProblem, string> = {
  format: 'Screenshot must be a base64-encoded image data URL',
  type: 'Screenshot must be a PNG, JPEG, GIF, WebP or AVIF image',
  size: 'Screenshot must be at most 5 MiB (5,242,880 bytes)',
  content: 'Screenshot data is not an image of its declared type',
};

const OPAQUE_TYPE = 'application/octet-stream';

/**
 * A stored data URL as bytes to serve. Types outside SCREENSHOT_TYPES (a row
 * written past the API, e.g. SVG) are served as an opaque download, never as
 * something a browser would render as markup.
 */
export function screenshotFile(dataUrl: string): { type: string; image: boolean; bytes: Buffer } {
  const comma = dataUrl.indexOf(',');
  const type = servedScreenshotType(/^data:([a-z]+\/[a-z0-9.+-]+);base64$/.exec(dataUrl.slice(0, comma))?.[1]);
  return { type, image: type !== OPAQUE_TYPE, bytes: Buffer.from(dataUrl.slice(comma + 1), 'base64') };
}

/**
 * The Content-Type the screenshot route answers for a stored type. The list
 * names the same (`screenshotType`): telling a client `image/svg+xml` for what
 * the route serves as a download invited it to build an SVG of the bytes.
 */
export function servedScreenshotType(stored: string | null | undefined): string {
  return stored !== null && stored !== undefined && (SCREENSHOT_TYPES as readonly string[]).includes(stored) ? stored : OPAQUE_TYPE;
}
