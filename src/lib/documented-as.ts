import type { z } from 'zod';

// A request schema that a route parses more loosely than its contract, so
// that it can answer with the SPEC's own message (sign in without a password
// is `Email and password are required`, not `Validation failed`), is shown in
// the OpenAPI document as the contract (src/plugins/openapi.ts).

const contracts = new WeakMap<z.ZodType, z.ZodType>();

/** Documents `schema` as `contract`; returns `schema`, which still does the parsing. */
export function documentedAs<T extends z.ZodType>(schema: T, contract: z.ZodType): T {
  contracts.set(schema, contract);
  return schema;
}

/** The contract `schema` is documented as, if it was given one. */
export function contractOf(schema: z.ZodType): z.ZodType | undefined {
  return contracts.get(schema);
}
