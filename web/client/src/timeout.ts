// The one bound on a wait used by the voice cores: a promise, or AttemptTimeout once the time is up.

/** What `bounded` rejects with when the time is up. */
export class AttemptTimeout extends Error {}

/** `promise`, or an AttemptTimeout once `ms` has passed. */
export function bounded<T>(promise: Promise<T>, ms: number): Promise<T> {
  // The loser of the race may reject later (a connect cut short): nobody waits for it.
  promise.catch(() => {});
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new AttemptTimeout()), Math.max(0, ms));
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}
