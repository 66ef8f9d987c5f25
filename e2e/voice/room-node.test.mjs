// The voice room with the Node reference agent (@voice-relay/agent on LiveKit Agents for Node);
// see room.mjs. Its LLM is scripted (agent-worker/node/test/scripted-agent.mjs), the one fake.
import { voiceRoom } from './room.mjs';

voiceRoom('node');
