export * from './errors.js';
export * from './keys.js';
export * from './client.js';
export * from './dispatch.js';
export * from './tools.js';
export * from './session.js';
export * from './tracing.js';
