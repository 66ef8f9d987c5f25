// A catalog of the tests' own (none of the shipped tools): three modes, one nested.
export const catalog = {
  initialMode: 'drafting',
  modes: [
    { id: 'drafting', instructions: 'Help the user draw.', next: ['review', 'help'] },
    { id: 'review', instructions: 'Walk through the diagram.', next: ['drafting'] },
    { id: 'help', instructions: 'Answer questions, then go back.', nested: true },
  ],
  tools: [
    {
      name: 'CreateDiagram',
      description: 'Create a new diagram in the editor.',
      parameters: {
        type: 'object',
        properties: {
          title: { type: 'string', maxLength: 80 },
          kind: { type: 'string', enum: ['flow', 'sequence'] },
        },
        required: ['title', 'kind'],
        additionalProperties: false,
      },
      outputSchema: {
        type: 'object',
        properties: { id: { type: 'string' } },
        required: ['id'],
      },
      awaitResult: true,
      timeoutMs: 5000,
      modes: ['drafting'],
    },
    {
      name: 'zoom',
      description: 'Zoom the editor.',
      parameters: {
        type: 'object',
        properties: { level: { type: 'integer', minimum: 1, maximum: 10 } },
        required: ['level'],
        additionalProperties: false,
      },
      awaitResult: true,
      timeoutMs: 20000,
      modes: ['drafting', 'review'],
    },
    {
      name: 'ShowComment',
      description: 'Show a comment next to the diagram.',
      parameters: {
        type: 'object',
        properties: { text: { type: 'string', minLength: 1, maxLength: 200 } },
        required: ['text'],
        additionalProperties: false,
      },
      awaitResult: false,
      modes: ['review'],
    },
    {
      name: 'ShowHelp',
      description: 'Show the help panel.',
      parameters: { type: 'object', properties: {}, additionalProperties: false },
    },
  ],
};

export const byName = Object.fromEntries(catalog.tools.map((t) => [t.name, t]));
