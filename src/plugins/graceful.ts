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
    // A callback hook: it runs on every answer, and an async onSend costs a promise each time.
    app.addHook('onSend', function closeWhenClosing(_request, reply, payload, done) {
      if (closing) reply.header('connection', 'close');
      done(null, payload);
    });
  },
  { name: 'graceful' },
);
