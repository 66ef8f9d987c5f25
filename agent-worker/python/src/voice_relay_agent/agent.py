"""The LiveKit ``Agent`` whose instructions and tools are the session mode's, from the worker.

A program builds one per user session (see ``agent-worker/reference/python/agent.py``): it
fetches the offer with :class:`~voice_relay_agent.tools.UiTools`, then gives the agent to an
``AgentSession``; a mode change replaces its tools and instructions in place.
"""

from __future__ import annotations

from livekit.agents import Agent

from .client import ToolOffer
from .tools import UiTools, compose_instructions


class VoiceRelayAgent(Agent):
    """An ``Agent`` whose instructions and tools are the session mode's, from the worker."""

    def __init__(self, ui: UiTools, offer: ToolOffer) -> None:
        super().__init__(instructions=compose_instructions(offer), tools=[ui.toolset])
        self.ui = ui
        ui.bind(self)
