import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';

// While the server closes, answers to requests already in flight carry
// `Connection: close`, so their keep-alive sockets end with them instead of
// holding the shutdown open until the keep-alive timeout.
export default fp(
  async function gracefulPlugin(app: FastifyInstance) {
    let closing = false;
    app.addHook('preClose', async () => {
      closing = true;
    });
    app.addHook('onSend', async (_request, reply) => {
      if (closing) reply.header('connection', 'close');
    });
  },
  { name: 'graceful' },
);
