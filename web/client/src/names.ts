// What the relay accepts as a tool name and as a page tool's definition, checked in the tab
// before anything is sent (the relay checks the same and refuses more).

import type { ToolSpec } from './client.js';

export const PREFIX = 'voice-agent:';
/** Event names of the protocol itself; no tool may be called so. */
const RESERVED_NAMES = ['register', 'revoked', 'cancel', 'handles', 'mode'];
export const RESERVED = new Set(RESERVED_NAMES.map((n) => PREFIX + n));
/** A tool name the relay accepts: a letter, then up to 63 letters, digits, `_` or `-`. */
const TOOL_NAME = /^[A-Za-z][A-Za-z0-9_-]{0,63}$/;
const MODE_ID = /^[A-Za-z0-9_-]{1,64}$/;
/** Bounds the relay puts on a declaration (it refuses more). */
export const MAX_PAGE_TOOLS = 32;
export const MAX_PAGE_TOOLS_BYTES = 16 * 1024;
const MAX_DESCRIPTION = 1024;
/** Throws unless `name` is a tool name the relay accepts and not one of the protocol's events. */
export function checkToolName(name: string): void {
  if (typeof name !== 'string' || !TOOL_NAME.test(name)) {
    throw new TypeError(`${JSON.stringify(name)} is not a tool name (a letter, then up to 63 letters, digits, _ or -)`);
  }
  if (RESERVED_NAMES.includes(name)) {
    throw new TypeError(`${name} is a name of the relay's protocol, not a tool`);
  }
}

/** Throws with the field at fault unless `spec` is a page tool definition the relay accepts. */
export function checkToolSpec(name: string, spec: ToolSpec): void {
  const at = (field: string, why: string) => new TypeError(`tool ${name}: ${field} ${why}`);
  if (typeof spec !== 'object' || spec === null) throw at('spec', 'must be an object');
  const known = ['description', 'parameters', 'outputSchema', 'awaitResult', 'timeoutMs', 'modes'];
  const extra = Object.keys(spec).find((k) => !known.includes(k));
  if (extra) throw at(extra, `is not a field of a tool (expected ${known.join(', ')})`);
  if (typeof spec.description !== 'string' || !spec.description.trim() || [...spec.description].length > MAX_DESCRIPTION) {
    throw at('description', `must be a string of 1 to ${MAX_DESCRIPTION} characters`);
  }
  const isObject = (v: unknown) => typeof v === 'object' && v !== null && !Array.isArray(v);
  if (!isObject(spec.parameters)) throw at('parameters', 'must be a JSON Schema object');
  if (spec.parameters.type !== undefined && spec.parameters.type !== 'object') {
    throw at('parameters', 'must describe an object (type "object")');
  }
  if (spec.outputSchema !== undefined && !isObject(spec.outputSchema)) throw at('outputSchema', 'must be a JSON Schema object');
  if (spec.awaitResult !== undefined && typeof spec.awaitResult !== 'boolean') throw at('awaitResult', 'must be true or false');
  if (spec.timeoutMs !== undefined && !(Number.isInteger(spec.timeoutMs) && spec.timeoutMs > 0)) {
    throw at('timeoutMs', 'must be a positive integer of milliseconds');
  }
  if (spec.modes !== undefined && !(Array.isArray(spec.modes) && spec.modes.length <= 32 && spec.modes.every((m) => typeof m === 'string' && MODE_ID.test(m)))) {
    throw at('modes', 'must be an array of at most 32 mode ids');
  }
  if (JSON.stringify(spec).length > MAX_PAGE_TOOLS_BYTES) throw at('spec', `is larger than ${MAX_PAGE_TOOLS_BYTES} bytes`);
}
