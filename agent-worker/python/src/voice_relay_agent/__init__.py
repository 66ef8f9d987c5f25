"""The agent worker's UI tools for LiveKit Agents (Python).

- :mod:`voice_relay_agent.client`: typed async client of the agent worker's agent API;
- :mod:`voice_relay_agent.errors`: its typed errors, one class per error code;
- :mod:`voice_relay_agent.tools`: the worker's tools as LiveKit function tools, by mode;
- :mod:`voice_relay_agent.agent`: the LiveKit ``Agent`` whose tools follow the mode;
- :mod:`voice_relay_agent.keys`: the tab's key in participant metadata, fingerprints;
- :mod:`voice_relay_agent.dispatch`: the user an agent is dispatched for, and its session token.

The reference voice agent built on it is ``agent-worker/reference/python/``.
"""

__version__ = "0.1.0"
