import cors from '@fastify/cors';
import helmet from '@fastify/helmet';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import type { Config } from '../config.ts';

// Security headers, and CORS for exactly one front-end origin with
// credentials; a request from any other origin gets no CORS headers at all.
export default fp<{ config: Config }>(
  async function securityPlugin(app: FastifyInstance, { config }) {
    await app.register(helmet, {
      // Swagger UI sets its own policy on /docs (plugins/openapi.ts).
      global: true,
      hsts: config.NODE_ENV === 'production',
    });
    const allowedOrigin = new URL(config.CORS_ORIGIN).origin;
    await app.register(cors, {
      // false switches CORS off for the request: no Allow-Origin, no Allow-Credentials.
      origin: (origin, callback) => callback(null, origin === allowedOrigin),
      credentials: true,
      methods: ['GET', 'HEAD', 'POST', 'PUT', 'DELETE', 'OPTIONS'],
      allowedHeaders: ['Authorization', 'Content-Type', 'X-Request-Id', 'X-API-Key'],
      exposedHeaders: ['X-Request-Id', 'Retry-After', 'X-RateLimit-Limit', 'X-RateLimit-Remaining', 'X-RateLimit-Reset'],
      maxAge: 600,
    });
  },
  { name: 'security' },
);
