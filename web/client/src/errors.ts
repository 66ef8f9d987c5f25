// How a handler's failure travels back to the agent: `{ok:false, error:{code, message}}`.

export interface ErrorObject {
  code: string;
  message: string;
}

/** A handler error with its own code (sent as `{ok:false,error:{code,message}}`). */
export class ToolError extends Error {
  constructor(
    public readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = 'ToolError';
  }
}

/** A thrown value as the envelope's error: a ToolError keeps its code, anything else is `tool_failed`. */
export function toErrorObject(err: unknown): ErrorObject {
  const message = err instanceof Error ? err.message : typeof err === 'string' ? err : 'the tool failed';
  // The contract: a thrown error is `tool_failed`; a ToolError's own code says more.
  const code = err instanceof ToolError ? err.code : 'tool_failed';
  return { code, message };
}
