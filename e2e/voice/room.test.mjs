// The voice room with the Python reference agent (LiveKit Agents for Python); see room.mjs.
import { voiceRoom } from './room.mjs';

voiceRoom('python');
