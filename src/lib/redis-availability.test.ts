import { describe, expect, it } from 'vitest';
import { RedisAvailability } from './redis-availability.ts';

function availability() {
  const said: string[] = [];
  const state = new RedisAvailability({
    unavailable: (error, outageBegins) => said.push(`${outageBegins ? 'down' : 'still down'}: ${error.message}`),
    answersAgain: () => said.push('up'),
  });
  return { state, said };
}

describe('RedisAvailability', () => {
  it('reports each outage when it begins and once when it ends; failures during one are not new outages', () => {
    const { state, said } = availability();
    state.onReady();
    state.onAnswer();
    expect([said, state.outages]).toEqual([[], 0]);
    state.onFailure(new Error('stalled'));
    state.onFailure(new Error('refused'));
    state.onAnswer();
    state.onAnswer();
    state.onFailure(new Error('stalled again'));
    expect(said).toEqual(['down: stalled', 'still down: refused', 'up', 'down: stalled again']);
    expect(state.outages).toBe(2);
  });

  it('counts a new connection as an outage (a restarted Redis may have lost its counts), said only if Redis had failed', () => {
    const { state, said } = availability();
    state.onReady();
    state.onReady();
    expect([said, state.outages]).toEqual([[], 1]);
    state.onFailure(new Error('closed'));
    state.onReady();
    expect([said, state.outages]).toEqual([['down: closed', 'up'], 3]);
  });
});
