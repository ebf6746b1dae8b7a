// package.json's `engines` names Node 24: the service is built, tested and
// measured on it. `npm start` runs the Node that `npm install` brings, but a
// deployment that starts `node dist/src/server.js` itself runs whatever Node
// its machine has, and an older one starts without a word.

/** The Node major version the service supports (package.json `engines`). */
export const SUPPORTED_NODE_MAJOR = 24;

/** The warning to log when `version` (as `process.version` writes it) is not the supported major; undefined when it is. */
export function nodeVersionWarning(version: string): string | undefined {
  const major = Number(/^v?(\d+)\./.exec(version)?.[1]);
  if (major === SUPPORTED_NODE_MAJOR) return undefined;
  return `Node ${version} is not the supported Node ${SUPPORTED_NODE_MAJOR} (package.json engines); npm install puts Node ${SUPPORTED_NODE_MAJOR} in node_modules/.bin/node`;
}
