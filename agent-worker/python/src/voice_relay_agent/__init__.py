"""The reference voice agent for LiveKit Agents: the relay's UI tools in a voice session.

- :mod:`voice_relay_agent.client`: typed async client of the agent worker's agent API;
- :mod:`voice_relay_agent.tools`: the worker's tools as LiveKit function tools, by mode;
- :mod:`voice_relay_agent.agent`: the agent, the job entrypoint and the ``AgentServer``;
- :mod:`voice_relay_agent.espeak`: a local TTS that runs ``espeak-ng``;
- :mod:`voice_relay_agent.keys`: the tab's key in participant metadata, fingerprints;
- :mod:`voice_relay_agent.config`: settings from the environment.
"""

__version__ = "0.1.0"
